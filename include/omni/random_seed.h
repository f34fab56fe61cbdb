// The seed a front end picks when a request names none (`omni generate`
// without --seed or with --seed -1, a server request without "seed" or with
// -1). The front end then reports it, so the output can be reproduced.
#pragma once

#include <cstdint>
#include <random>

namespace omni {

// A fresh seed below 2^53: every JSON client (JavaScript's numbers included)
// can send it back unchanged.
inline std::uint64_t random_seed() {
  std::random_device device;
  const std::uint64_t bits = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  return bits & ((std::uint64_t{1} << 53) - 1);
}

}  // namespace omni
