// Reading the scheduler config fields that take one of a few values, with
// messages that name the field, the value and what is accepted.
#pragma once

#include <initializer_list>
#include <string>

#include "omni/io/json_config.h"

namespace omni::schedulers::internal {

// A bool field whose only implemented value is `implemented` (its diffusers
// default); ConfigError naming the field and `why` otherwise.
void require_flag(io::ConfigReader& reader, const std::string& key, bool implemented,
                  const char* why);

// A string field (default `fallback`) that must be one of `allowed`;
// ConfigError naming the field, the value and the accepted values otherwise.
std::string read_choice(io::ConfigReader& reader, const std::string& key,
                        const std::string& fallback, std::initializer_list<const char*> allowed);

// A field that must be absent or null because the feature it enables is not
// implemented; ConfigError naming the field and `why` otherwise.
void require_null(io::ConfigReader& reader, const std::string& key, const char* why);

// Reads a field only to check its type (diffusers accepts it but it does not
// change the numbers of the implemented path).
template <typename T>
void check_type(io::ConfigReader& reader, const std::string& key) {
  (void)reader.nullable<T>(key);
}

}  // namespace omni::schedulers::internal
