// Strict reading of JSON config files (config.json, model_index.json,
// scheduler_config.json): every field is either read, explicitly ignored, or
// an error naming it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "omni/error.h"

namespace omni::io {

// Reads and parses a JSON file; FormatError naming the file on any failure.
nlohmann::json read_json_file(const std::filesystem::path& path);

// Parses JSON text; FormatError naming `source` on failure.
nlohmann::json parse_json(std::string_view text, const std::string& source);

class ConfigReader {
 public:
  // `source` names the config in messages (usually its path).
  ConfigReader(const nlohmann::json& config, std::string source);

  // A field that must be present; ConfigError naming it when missing or of the wrong type.
  template <typename T>
  T required(const std::string& key) {
    seen_.insert(key);
    OMNI_CHECK(config_.contains(key), ConfigError, source_, ": missing required field '", key, "'");
    return convert<T>(key);
  }

  // A field with a default; null counts as absent.
  template <typename T>
  T optional(const std::string& key, T fallback) {
    seen_.insert(key);
    if (!config_.contains(key) || config_.at(key).is_null()) return fallback;
    return convert<T>(key);
  }

  // A nullable field: std::nullopt when absent or null.
  template <typename T>
  std::optional<T> nullable(const std::string& key) {
    seen_.insert(key);
    if (!config_.contains(key) || config_.at(key).is_null()) return std::nullopt;
    return convert<T>(key);
  }

  bool has(const std::string& key) const {
    return config_.contains(key) && !config_.at(key).is_null();
  }

  // Marks fields as known but unused by this implementation.
  void ignore(std::initializer_list<std::string> keys);

  // Throws ConfigError listing every field that was neither read nor ignored.
  // Fields starting with '_' (e.g. _class_name, _diffusers_version) are metadata
  // and always allowed.
  void finish() const;

  const std::string& source() const { return source_; }

 private:
  template <typename T>
  T convert(const std::string& key) const {
    const auto& value = config_.at(key);
    if (const std::string why = lossy_conversion<T>(value); !why.empty())
      throw ConfigError(detail::concat(source_, ": field '", key, "' has the wrong type (",
                                       value.type_name(), "): ", why, ", got ", value.dump()));
    try {
      return value.get<T>();
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(detail::concat(source_, ": field '", key, "' has the wrong type (",
                                       value.type_name(), "): ", e.what()));
    }
  }

  // Why `value` cannot become a T exactly ("" when it can). nlohmann's get<T>()
  // converts between booleans, integers and floats silently, truncating 2.5
  // to 2, and a float outside an integer's range is undefined behaviour.
  template <typename T>
  static std::string lossy_conversion(const nlohmann::json& value) {
    if constexpr (std::is_same_v<T, bool>) {
      return value.is_boolean() ? "" : "expected true or false";
    } else if constexpr (std::is_integral_v<T>) {
      if (!value.is_number_integer()) return "expected an integer";
      const bool fits = value.is_number_unsigned() ? std::in_range<T>(value.get<std::uint64_t>())
                                                   : std::in_range<T>(value.get<std::int64_t>());
      return fits ? "" : "integer out of range";
    } else if constexpr (std::is_floating_point_v<T>) {
      return value.is_number() ? "" : "expected a number";
    } else if constexpr (is_vector<T>::value) {
      if (!value.is_array()) return "expected an array";
      for (std::size_t i = 0; i < value.size(); ++i)
        if (std::string why = lossy_conversion<typename T::value_type>(value[i]); !why.empty())
          return detail::concat("entry ", i, ": ", why);
      return "";
    } else {
      return "";  // strings, objects: nlohmann's own type checks are exact
    }
  }

  template <typename T>
  struct is_vector : std::false_type {};
  template <typename E, typename A>
  struct is_vector<std::vector<E, A>> : std::true_type {};

  const nlohmann::json& config_;
  std::string source_;
  std::set<std::string> seen_;
};

}  // namespace omni::io
