#include "schedulers/config_fields.h"

#include <nlohmann/json.hpp>

#include "omni/error.h"

namespace omni::schedulers::internal {

void require_flag(io::ConfigReader& reader, const std::string& key, bool implemented,
                  const char* why) {
  const bool value = reader.optional<bool>(key, implemented);
  OMNI_CHECK(value == implemented, ConfigError, reader.source(), ": field '", key,
             "' = ", value ? "true" : "false", " is not supported (only ",
             implemented ? "true" : "false", "): ", why);
}

std::string read_choice(io::ConfigReader& reader, const std::string& key,
                        const std::string& fallback, std::initializer_list<const char*> allowed) {
  std::string value = reader.optional<std::string>(key, fallback);
  std::string list;
  for (const char* option : allowed) {
    if (value == option) return value;
    list += (list.empty() ? "'" : ", '") + std::string(option) + "'";
  }
  throw ConfigError(::omni::detail::concat(reader.source(), ": field '", key, "' = '", value,
                                           "' is not supported (supported: ", list, ")"));
}

void require_null(io::ConfigReader& reader, const std::string& key, const char* why) {
  const auto value = reader.nullable<nlohmann::json>(key);
  OMNI_CHECK(!value.has_value(), ConfigError, reader.source(), ": field '", key,
             "' = ", value->dump(), " is not supported (only null): ", why);
}

}  // namespace omni::schedulers::internal
