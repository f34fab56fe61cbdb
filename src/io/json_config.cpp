#include "omni/io/json_config.h"

#include <fstream>
#include <sstream>

namespace omni::io {

nlohmann::json parse_json(std::string_view text, const std::string& source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(detail::concat(source, ": invalid JSON: ", e.what()));
  }
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  OMNI_CHECK(in.good(), FormatError, path.string(), ": cannot open file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return parse_json(buffer.str(), path.string());
}

ConfigReader::ConfigReader(const nlohmann::json& config, std::string source)
    : config_(config), source_(std::move(source)) {
  OMNI_CHECK(config_.is_object(), ConfigError, source_, ": expected a JSON object, got ",
             config_.type_name());
}

void ConfigReader::ignore(std::initializer_list<std::string> keys) {
  for (const auto& k : keys) seen_.insert(k);
}

void ConfigReader::finish() const {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : config_.items()) {
    if (!key.empty() && key[0] == '_') continue;
    if (!seen_.count(key)) unknown.push_back(key);
  }
  if (unknown.empty()) return;
  std::string list;
  for (const auto& k : unknown) list += (list.empty() ? "'" : ", '") + k + "'";
  throw ConfigError(
      detail::concat(source_, ": unknown field", unknown.size() > 1 ? "s " : " ", list));
}

}  // namespace omni::io
