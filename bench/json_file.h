// Writing a benchmark's JSON result: the file appears whole or not at all.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace omni::bench {

// Writes `json` (indented) to `path` through a temporary file renamed into
// place; FormatError naming the path when it cannot be written.
void write_json_file(const std::string& path, const nlohmann::json& json);

}  // namespace omni::bench
