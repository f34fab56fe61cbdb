// Models named by Hugging Face hub id, resolved offline from the local cache
// the hub client writes (never fetched):
//
//   omni generate Wan-AI/Wan2.2-T2V-A14B-Diffusers ...
//   omni inspect Wan-AI/Wan2.2-T2V-A14B-Diffusers@main
//
// Note [The hub cache layout]
// huggingface_hub keeps each repository under
// `<cache>/models--<org>--<name>/`: `refs/<revision>` is a file holding a
// commit hash, `snapshots/<commit>/` mirrors the repository's files at that
// commit as symlinks into `blobs/<content hash>` (copies on file systems
// without symlinks). `<cache>` is $HF_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub. A revision is a branch or tag with a file under
// refs/, or a commit hash with a snapshot folder. Reading through the
// snapshot's symlinks gives the blobs' bytes; nothing here writes the cache.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace omni::io {

struct HubModelId {
  std::string org;
  std::string name;
  std::string revision = "main";
  // "org/name" or "org/name@revision"; nullopt for anything else (a path
  // with more parts, a leading '/' or '.', characters the hub refuses).
  static std::optional<HubModelId> parse(std::string_view text);
  std::string repo_id() const { return org + "/" + name; }
};

// The cache directory (Note [The hub cache layout]) and which variable chose it.
struct HubCacheDir {
  std::filesystem::path path;
  std::string source;  // "$HF_HUB_CACHE", "$HF_HOME/hub" or "~/.cache/huggingface/hub"
};
HubCacheDir hub_cache_dir();

// The snapshot folder of `id` in `cache`. ModelNotFound naming the id, the
// folders searched and the download command when the repository or the
// revision is not cached.
std::filesystem::path resolve_hub_snapshot(const HubModelId& id, const HubCacheDir& cache);

// Where `model` lives: the directory itself when it is one, else a hub id's
// snapshot in hub_cache_dir(). ModelNotFound for a hub id that is not
// cached; ConfigError when `model` is neither a directory nor a hub id;
// std::filesystem::filesystem_error for a path the system refuses.
std::filesystem::path resolve_model_dir(const std::string& model);

}  // namespace omni::io
