// Error vocabulary of omni.cpp.
//
// Note [Two kinds of failure]
// A typed omni::Error (or subclass) reports the user's mistake or the
// environment's refusal: a bad path, a malformed file, a bad request, device
// memory exhausted. OMNI_INTERNAL_ASSERT reports our own bug and throws
// omni::InternalError. Neither aborts the process: front ends translate both
// once at their boundary (exit code in the CLI, HTTP status in the server).
#pragma once

#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>

namespace omni {

// Base of every error omni throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A configuration that cannot work: bad dotted path, conflicting roles,
// unknown or missing config field, invalid option value.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A request that is well-formed but has invalid values (size not a multiple
// of 16, zero steps, empty prompt).
class InvalidRequest : public Error {
 public:
  using Error::Error;
};

// A file that cannot be read or does not follow its format.
class FormatError : public Error {
 public:
  using Error::Error;
};

// A model named by a hub id ("org/name[@revision]") that is not in the
// local Hugging Face cache, or not at that revision (io/hub_cache.h). omni
// never downloads; the message names the id, the directories searched and
// the command that downloads it. Exit status 3 in the CLI, as a bad file.
class ModelNotFound : public FormatError {
 public:
  using FormatError::FormatError;
};

// The device could not hold what was asked of it.
class DeviceOutOfMemory : public Error {
 public:
  using Error::Error;
};

// A transition would break the residency invariant (design.md §2 rule 2).
class ResidencyViolation : public Error {
 public:
  using Error::Error;
};

// A computation touched a weight that is not resident on the device.
class NonResidentWeightAccess : public Error {
 public:
  using Error::Error;
};

// The caller stopped a request before it finished (a progress callback threw
// it: a Python KeyboardInterrupt, an HTTP client that went away, a server
// shutting down). Nothing is left half-changed: the engine stays usable.
class Cancelled : public Error {
 public:
  using Error::Error;
};

// A bug in omni itself.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// Runs `fn`; a std::filesystem::filesystem_error it throws (a path the
// operating system refuses: a name too long, no permission, a loop of links)
// becomes a FormatError naming the path and the system's reason, so a loader
// answers a hostile directory with a typed error.
template <typename Fn>
decltype(auto) with_typed_filesystem_errors(Fn&& fn) {
  try {
    return fn();
  } catch (const std::filesystem::filesystem_error& e) {
    throw FormatError(concat(e.path1().string(), ": ", e.code().message()));
  }
}
}  // namespace detail

}  // namespace omni

// Throws ErrorType with the streamed message when cond is false.
#define OMNI_CHECK(cond, ErrorType, ...)                               \
  do {                                                                 \
    if (!(cond)) throw ErrorType(::omni::detail::concat(__VA_ARGS__)); \
  } while (0)

// Checks an invariant of omni's own code; failure is a bug.
#define OMNI_INTERNAL_ASSERT(cond, ...)                                                     \
  do {                                                                                      \
    if (!(cond))                                                                            \
      throw ::omni::InternalError(::omni::detail::concat(                                   \
          "internal error at ", __FILE__, ":", __LINE__, ": ", #cond, " ", ##__VA_ARGS__)); \
  } while (0)
