// Hub ids from the local cache (Note [The hub cache layout], hub_cache.h).
#include "omni/io/hub_cache.h"

#include <cstdlib>
#include <fstream>
#include <set>

#include "omni/error.h"

namespace fs = std::filesystem;

namespace omni::io {

namespace {

// The characters the hub allows in an org or repository name.
bool is_name(std::string_view s) {
  if (s.empty() || s.size() > 96 || s.front() == '.' || s.front() == '-') return false;
  if (s.find("..") != std::string_view::npos || s.find("--") != std::string_view::npos)
    return false;
  for (const char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'))
      return false;
  return true;
}

// A branch, tag or commit (refs/pr/1 included); never a path out of refs/.
bool is_revision(std::string_view s) {
  if (s.empty() || s.size() > 255 || s.front() == '/' || s.back() == '/') return false;
  if (s.find("..") != std::string_view::npos || s.find("//") != std::string_view::npos)
    return false;
  for (const char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ||
          c == '/'))
      return false;
  return true;
}

std::string download_hint(const HubModelId& id, bool with_revision) {
  return detail::concat("omni never downloads; fetch it with `huggingface-cli download ",
                        id.repo_id(), with_revision ? " --revision " + id.revision : "",
                        "` (or pass a local directory)");
}

// "main (1a2b3c4…), v1 (…)" for the refs a repository folder has.
std::string cached_revisions(const fs::path& repo) {
  std::set<std::string> found;
  std::error_code ec;
  if (fs::is_directory(repo / "refs", ec))
    for (auto it = fs::recursive_directory_iterator(repo / "refs", ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_regular_file(ec)) found.insert(fs::relative(it->path(), repo / "refs").string());
  if (fs::is_directory(repo / "snapshots", ec))
    for (const auto& e : fs::directory_iterator(repo / "snapshots", ec))
      found.insert(e.path().filename().string());
  std::string out;
  for (const auto& r : found) out += (out.empty() ? "" : ", ") + r;
  return out.empty() ? "none" : out;
}

std::string read_ref(const fs::path& file) {
  std::ifstream in(file);
  std::string commit;
  std::getline(in, commit);
  while (!commit.empty() &&
         (commit.back() == '\n' || commit.back() == '\r' || commit.back() == ' '))
    commit.pop_back();
  return commit;
}

}  // namespace

std::optional<HubModelId> HubModelId::parse(std::string_view text) {
  const auto at = text.find('@');
  const auto repo = text.substr(0, at);
  const auto slash = repo.find('/');
  if (slash == std::string_view::npos || repo.find('/', slash + 1) != std::string_view::npos)
    return std::nullopt;
  HubModelId id;
  id.org = std::string(repo.substr(0, slash));
  id.name = std::string(repo.substr(slash + 1));
  if (!is_name(id.org) || !is_name(id.name)) return std::nullopt;
  if (at != std::string_view::npos) {
    id.revision = std::string(text.substr(at + 1));
    if (!is_revision(id.revision)) return std::nullopt;
  }
  return id;
}

HubCacheDir hub_cache_dir() {
  if (const char* cache = std::getenv("HF_HUB_CACHE"); cache && *cache)
    return {fs::path(cache), "$HF_HUB_CACHE"};
  if (const char* home = std::getenv("HF_HOME"); home && *home)
    return {fs::path(home) / "hub", "$HF_HOME/hub"};
  const char* user_home = std::getenv("HOME");
  return {fs::path(user_home && *user_home ? user_home : "/") / ".cache" / "huggingface" / "hub",
          "~/.cache/huggingface/hub"};
}

fs::path resolve_hub_snapshot(const HubModelId& id, const HubCacheDir& cache) {
  const auto repo = cache.path / ("models--" + id.org + "--" + id.name);
  std::error_code ec;
  OMNI_CHECK(fs::is_directory(repo, ec), ModelNotFound, "model '", id.repo_id(),
             "' is not in the local Hugging Face cache: searched ", repo.string(), " (cache ",
             cache.path.string(), ", from ", cache.source, "); ", download_hint(id, false));
  std::string commit;
  const auto ref = repo / "refs" / id.revision;
  if (fs::is_regular_file(ref, ec)) {
    commit = read_ref(ref);
    OMNI_CHECK(!commit.empty() && commit.find('/') == std::string::npos &&
                   commit.find("..") == std::string::npos,
               ModelNotFound, ref.string(), ": revision '", id.revision, "' of '", id.repo_id(),
               "' names no commit; ", download_hint(id, true));
  } else {
    commit = id.revision;  // a commit hash names its snapshot directly
  }
  const auto snapshot = repo / "snapshots" / commit;
  OMNI_CHECK(commit.find('/') == std::string::npos && fs::is_directory(snapshot, ec), ModelNotFound,
             "revision '", id.revision, "' of model '", id.repo_id(),
             "' is not in the local Hugging Face cache: searched ", ref.string(), " and ",
             (repo / "snapshots" / commit).string(), "; cached revisions: ", cached_revisions(repo),
             "; ", download_hint(id, true));
  return snapshot;
}

fs::path resolve_model_dir(const std::string& model) {
  // Throws filesystem_error for a path the system refuses (a name too long):
  // the loaders turn it into a FormatError naming the path.
  if (fs::is_directory(model)) return fs::path(model);
  if (const auto id = HubModelId::parse(model)) {
    try {
      return resolve_hub_snapshot(*id, hub_cache_dir());
    } catch (const ModelNotFound& e) {
      throw ModelNotFound(
          detail::concat(e.what(), " (no local directory '", model, "' exists either)"));
    }
  }
  throw ConfigError(detail::concat("model '", model,
                                   "' is neither a built-in (example:wan-shaped), a directory, "
                                   "nor a hub id (org/name[@revision]) in the local cache"));
}

}  // namespace omni::io
