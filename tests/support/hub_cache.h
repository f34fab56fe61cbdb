// A Hugging Face hub cache laid out as huggingface_hub writes it (Note [The
// hub cache layout], omni/io/hub_cache.h), built in a test's folder:
// refs/<revision> files, snapshots/<commit>/ whose files are relative
// symlinks into blobs/<content name>.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace omni::testing {

// Copies every file under `source` into `cache`'s repository `org/name` as
// commit `commit` (symlinks into blobs/), and points refs/<ref> at it when
// `ref` is not empty. Returns the snapshot folder.
inline std::filesystem::path add_to_hub_cache(const std::filesystem::path& cache,
                                              const std::string& org, const std::string& name,
                                              const std::filesystem::path& source,
                                              const std::string& commit,
                                              const std::string& ref = "main") {
  namespace fs = std::filesystem;
  const auto repo = cache / ("models--" + org + "--" + name);
  const auto snapshot = repo / "snapshots" / commit;
  fs::create_directories(repo / "blobs");
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(source)) {
    if (!e.is_regular_file()) continue;
    const auto relative = fs::relative(e.path(), source);
    // Content-addressed names in the real cache; unique per file here.
    const auto blob = repo / "blobs" / (commit.substr(0, 8) + "-" + std::to_string(n++));
    fs::copy_file(e.path(), blob, fs::copy_options::overwrite_existing);
    const auto link = snapshot / relative;
    fs::create_directories(link.parent_path());
    fs::create_symlink(fs::relative(blob, link.parent_path()), link);
  }
  if (!ref.empty()) {
    fs::create_directories((repo / "refs" / ref).parent_path());
    std::ofstream(repo / "refs" / ref) << commit;  // no newline, as the hub client writes
  }
  return snapshot;
}

// Sets (or, with nullopt, unsets) an environment variable for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (saved_)
      ::setenv(name_, saved_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

}  // namespace omni::testing
