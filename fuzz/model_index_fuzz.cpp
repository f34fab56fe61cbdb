// Fuzzes a diffusers model directory's model_index.json: written into a
// directory whose component folders are the tiny WanPipeline of
// tests/data/wan/wan_pipeline (linked, not copied), then loaded with
// load_pipeline (the registry and WanPipeline::load, the CLI's and server's
// path) and planned with inspect_model (omni inspect). Expected: a
// ConfigError or FormatError, or a pipeline that loads.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "fuzz_input.h"
#include "omni/engine/inspect.h"
#include "omni/error.h"
#include "omni/pipelines/pipeline.h"

namespace fs = std::filesystem;

namespace {

const fs::path& model_dir() {
  static const omni::fuzz::ScratchDir dir("model_index");
  static const bool linked = [] {
    const fs::path tiny = fs::path(OMNI_SOURCE_DIR) / "tests/data/wan/wan_pipeline";
    for (const char* component : {"transformer", "transformer_2", "vae", "scheduler"})
      fs::create_directory_symlink(tiny / component, dir.path() / component);
    return true;
  }();
  (void)linked;
  return dir.path();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& dir = model_dir();
  omni::fuzz::write_file(dir / "model_index.json", data, size);
  omni::fuzz::expect_typed_error([&] { (void)omni::pipelines::load_pipeline(dir.string()); });
  omni::fuzz::expect_typed_error([&] { (void)omni::inspect_model(dir.string()).to_json().dump(); });
  return 0;
}
