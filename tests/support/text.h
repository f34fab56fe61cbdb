// String checks the tests share (error messages, reports).
#pragma once

#include <string_view>

namespace omni::testing {

// Whether `text` contains `part`.
inline bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

}  // namespace omni::testing
