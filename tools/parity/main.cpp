// omni-parity DIR [--device cpu|cuda[:N]]: checks the port against one
// reference fixture (see parity.h). Exit status: 0 every stored output is
// within tolerance; 1 at least one is not; 2 the fixture could not be run
// (unreadable, unknown kind, a weight key missing or extra or mis-shaped, ...).
#include <ATen/Context.h>

#include <iostream>

#include "omni/error.h"
#include "parity/parity.h"

namespace {

int usage(const char* argv0) {
  std::cerr << "usage: " << argv0 << " FIXTURE_DIR [--device cpu|cuda[:N]]\n"
            << "Runs the port on a reference fixture (tests/data/wan/README.md) and compares\n"
            << "every stored output with its float64 reference.\n";
  return 2;
}

omni::parity::Computed run(const omni::parity::Fixture& fixture,
                           const omni::parity::RunOptions& options) {
  using namespace omni::parity;
  const auto& kind = fixture.kind();
  if (kind == "WanTransformer3DModel") return run_transformer(fixture, options);
  if (kind == "AutoencoderKLWan") return run_vae(fixture, options);
  if (kind == "UMT5EncoderModel") return run_umt5(fixture, options);
  if (kind == "FlowMatchEulerDiscreteScheduler" || kind == "UniPCMultistepScheduler")
    return run_scheduler(fixture, options);
  if (kind == "WanPipeline") return run_pipeline(fixture, options);
  std::string known;
  for (const auto& k : known_kinds()) known += (known.empty() ? "" : ", ") + k;
  throw FixtureError(fixture.config_path().string() + ": fixture kind '" + kind +
                     "' is not supported (known: " + known + ")");
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  std::string device = "cpu";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      usage(argv[0]);
      return 0;
    }
    if (arg == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else if (!arg.starts_with("-") && dir.empty()) {
      dir = arg;
    } else {
      return usage(argv[0]);
    }
  }
  if (dir.empty()) return usage(argv[0]);
  try {
    omni::parity::RunOptions options;
    options.device = torch::Device(device);
    // The tolerances assume true float32: no TF32 matmuls or convolutions.
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
    torch::NoGradGuard no_grad;
    const auto fixture = omni::parity::Fixture::open(dir);
    const auto computed = run(fixture, options);
    const auto checks = omni::parity::compare(fixture, computed);
    return omni::parity::print_report(std::cout, fixture, checks) ? 0 : 1;
  } catch (const omni::parity::FixtureError& e) {
    std::cerr << "omni-parity: FAIL: " << e.what() << "\n";
  } catch (const omni::Error& e) {
    std::cerr << "omni-parity: " << dir << ": FAIL: " << e.what() << "\n";
  } catch (const c10::Error& e) {
    std::cerr << "omni-parity: " << dir << ": FAIL: " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "omni-parity: " << dir << ": FAIL: " << e.what() << "\n";
  }
  return 2;
}
