#include "bench/json_file.h"

#include <filesystem>
#include <fstream>

#include "omni/error.h"

namespace omni::bench {

void write_json_file(const std::string& path, const nlohmann::json& json) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    OMNI_CHECK(out.good(), FormatError, path, ": cannot write the benchmark's JSON");
    out << json.dump(2) << "\n";
    OMNI_CHECK(out.good(), FormatError, path, ": cannot write the benchmark's JSON");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  OMNI_CHECK(!ec, FormatError, path, ": cannot write the benchmark's JSON: ", ec.message());
}

}  // namespace omni::bench
