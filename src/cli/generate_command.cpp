#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/commands.h"
#include "cli/offload_flags.h"
#include "cli/progress_bar.h"
#include "omni/error.h"
#include "omni/io/image_writer.h"
#include "omni/omni.h"
#include "omni/pipelines/request_preset.h"
#include "omni/random_seed.h"

namespace omni::cli {

int run_guarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const InvalidRequest& e) {
    std::cerr << "omni: invalid request: " << e.what() << "\n";
    return 2;
  } catch (const ConfigError& e) {
    std::cerr << "omni: configuration error: " << e.what() << "\n";
    return 2;
  } catch (const FormatError& e) {
    std::cerr << "omni: bad file: " << e.what() << "\n";
    return 3;
  } catch (const DeviceOutOfMemory& e) {
    std::cerr << "omni: out of device memory: " << e.what() << "\n";
    return 4;
  } catch (const Error& e) {
    std::cerr << "omni: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::string what = e.what();
    std::cerr << "omni: internal error: " << what.substr(0, what.find('\n')) << "\n";
    return 70;
  }
}

namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt;
  std::string negative_prompt;
  std::string seed = "-1";  // -1: pick one (parse_seed)
  std::optional<int> steps;
  std::string size;
  std::optional<int> num_frames;
  std::optional<double> guidance_scale;
  std::optional<double> guidance_scale_2;
  std::optional<double> boundary_ratio;
  std::optional<double> flow_shift;
  std::optional<int> fps;
  std::string output = "out.png";
  bool offload = false;
  std::string device = "auto";
  std::string dtype = "auto";
  std::string sim_memory = "64GiB";
  OffloadFlags offload_flags;
  std::string prompt_cache = "256MiB";
  std::string report_json;
  bool make_folders = false;  // --mkdir
  bool quiet = false;
  std::vector<std::string> loras;  // COMPONENT=PATH[:SCALE]
  std::string preset;
};

std::pair<int, int> parse_size(const std::string& size) {
  const auto x = size.find('x');
  OMNI_CHECK(x != std::string::npos && x > 0 && x + 1 < size.size(), InvalidRequest,
             "size must be WxH (e.g. 64x64), got '", size, "'");
  auto number = [&](const std::string& s) {
    OMNI_CHECK(s.size() <= 6 && s.find_first_not_of("0123456789") == std::string::npos,
               InvalidRequest, "size must be WxH with positive integers, got '", size, "'");
    return std::stoi(s);
  };
  return {number(size.substr(0, x)), number(size.substr(x + 1))};
}

// "-1": a random seed (random_seed.h); else a decimal number in 0..2^64-1.
std::uint64_t parse_seed(const std::string& text) {
  if (text == "-1") return random_seed();
  OMNI_CHECK(!text.empty() && text.size() <= 20 &&
                 text.find_first_not_of("0123456789") == std::string::npos,
             InvalidRequest, "--seed must be an integer in 0..18446744073709551615 or -1, got '",
             text, "'");
  errno = 0;
  const auto value = std::strtoull(text.c_str(), nullptr, 10);
  OMNI_CHECK(errno != ERANGE, InvalidRequest, "--seed must be at most 18446744073709551615, got '",
             text, "'");
  return value;
}

namespace fs = std::filesystem;

// Note [Output checks]
// Where generate writes is checked before the model loads, so a bad path
// costs nothing and a finished generation is never lost to it:
// - the folder must exist (--mkdir creates it) and take a new file: a probe
//   file is created there and removed (access() says yes to root on a
//   read-only or virtual file system);
// - the target, if it exists, must be a regular file we may open for writing:
//   a directory, FIFO, socket or device (/dev/null included) is refused, as a
//   picture written there is lost or blocks;
// - nothing is written on the kernel's virtual file systems (/proc, /sys):
//   their files look regular, but writing them sets kernel state.
// Each failure is a FormatError (exit 3) naming the path.
bool on_kernel_file_system(const fs::path& dir) {
  struct statfs info {};
  if (::statfs(dir.c_str(), &info) != 0) return false;
  return info.f_type == PROC_SUPER_MAGIC || info.f_type == SYSFS_MAGIC;
}

void check_writable(const fs::path& file, const char* what, bool make_folders) {
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  if (make_folders) {
    std::error_code error;
    fs::create_directories(dir, error);
    OMNI_CHECK(!error, FormatError, what, " ", file.string(), ": cannot create folder ",
               dir.string(), ": ", error.message());
  }
  std::error_code error;
  const auto folder = fs::status(dir, error);
  OMNI_CHECK(folder.type() != fs::file_type::not_found, FormatError, what, " ", file.string(),
             ": folder ", dir.string(), " does not exist (create it, or pass --mkdir)");
  OMNI_CHECK(!error && folder.type() == fs::file_type::directory, FormatError, what, " ",
             file.string(), ": ", dir.string(), " is not a folder",
             error ? ": " + error.message() : std::string());
  OMNI_CHECK(!on_kernel_file_system(dir), FormatError, what, " ", file.string(), ": ", dir.string(),
             " is a kernel file system (/proc, /sys), not a place for output");
  const auto target = fs::status(file, error);
  if (target.type() != fs::file_type::not_found) {
    OMNI_CHECK(!error, FormatError, what, " ", file.string(), ": ", error.message());
    OMNI_CHECK(target.type() == fs::file_type::regular, FormatError, what, " ", file.string(),
               ": not a regular file (a folder, device, FIFO or socket); name a new or regular "
               "file");
    const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);  // no O_TRUNC
    OMNI_CHECK(fd >= 0, FormatError, what, " ", file.string(),
               ": cannot be written: ", std::strerror(errno));
    ::close(fd);
    return;
  }
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
  OMNI_CHECK(fd >= 0, FormatError, what, " ", file.string(), ": cannot be created in ",
             dir.string(), ": ", std::strerror(errno));
  ::close(fd);
  ::unlink(file.c_str());
}

// What io::write_frames accepts, checked before the model loads: an .mp4 is
// one file (a '%' in its name is just a character); otherwise a '%' makes a
// frame pattern, whose rules are a ConfigError (exit 2) and whose first
// frame's file stands for the rest in the output checks (Note [Output checks]).
void check_output(const std::string& output, bool make_folders) {
  const fs::path path(output);
  const auto ext = path.extension().string();
  if (ext != ".mp4" && io::FramePattern::is_pattern(output)) {
    check_writable(io::FramePattern(output).file(0), "output", make_folders);
    return;
  }
  OMNI_CHECK(ext == ".mp4" || ext == ".png", FormatError, output, ": unsupported output format '",
             ext,
             "' (use .mp4 for video, .png for a frame or contact sheet, or a pattern like "
             "frames/%03d.png)");
  check_writable(path, "output", make_folders);
}

int generate(const GenerateOptions& o) {
  check_output(o.output, o.make_folders);
  if (!o.report_json.empty()) check_writable(o.report_json, "report", o.make_folders);
  EngineArgs args;
  args.model = o.model;
  args.enable_cpu_offload = o.offload;
  args.device = o.device;
  args.dtype = o.dtype;
  args.sim_memory_bytes = device::parse_byte_size(o.sim_memory);
  o.offload_flags.apply(args);
  args.prompt_cache_bytes = device::parse_byte_size(o.prompt_cache);
  for (const auto& text : o.loras) args.loras.push_back(models::wan::LoraSpec::parse(text));
  GenerationRequest request;
  request.prompt = o.prompt;
  request.negative_prompt = o.negative_prompt;
  request.seed = parse_seed(o.seed);
  request.steps = o.steps;
  request.num_frames = o.num_frames;
  request.guidance_scale = o.guidance_scale;
  request.guidance_scale_2 = o.guidance_scale_2;
  request.boundary_ratio = o.boundary_ratio;
  request.flow_shift = o.flow_shift;
  request.fps = o.fps;
  if (!o.size.empty()) {
    const auto [w, h] = parse_size(o.size);
    request.width = w;
    request.height = h;
  }
  if (!o.preset.empty()) request = pipelines::apply_preset(request, o.preset);
  LoadBar load_bar;
  args.offload.home_progress = [&](std::uint64_t done, std::uint64_t total) {
    load_bar.update(done, total);
  };
  Omni omni(args);
  if (omni.device().is_stand_in() && !o.quiet)
    std::cerr << "omni: device sim is a simulated stand-in accelerator (host memory); its "
                 "figures are simulated\n";
  ProgressBar bar;
  auto result = omni.generate(request, [&](int step, int total) { bar.update(step, total); });
  const auto files = detail::with_typed_filesystem_errors([&] { return result.save(o.output); });
  if (!o.quiet) {
    std::cout << "wrote " << files.front().string();
    if (files.size() > 1)
      std::cout << " … " << files.back().string() << " (" << files.size() << " files)";
    std::cout << " — " << result.frames.size(0) << " frame(s) " << result.frames.size(2) << "x"
              << result.frames.size(1) << " in " << result.seconds << " s, seed "
              << result.request.seed << "\n";
    // Without offload there is nothing to report (strategy "none": no
    // components, no transfers); --report-json still writes it.
    if (result.report.strategy != "none") std::cout << result.report.to_table();
  }
  if (!o.report_json.empty()) {
    std::ofstream out(o.report_json);
    OMNI_CHECK(out.good(), FormatError, o.report_json, ": cannot create report file");
    out << result.report_json().dump(2) << "\n";
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand("generate", "Generate a video or image from a prompt");
  cmd->add_option("model", options->model,
                  "Model: a diffusers directory (model_index.json) or example:wan-shaped")
      ->required();
  cmd->add_option("--prompt,-p", options->prompt, "Text prompt")->required();
  cmd->add_option("--negative-prompt", options->negative_prompt, "Negative prompt (CFG)");
  cmd->add_option("--seed", options->seed,
                  "Seed (same seed, same output); -1 or none: a random one, printed");
  cmd->add_option("--steps", options->steps, "Denoising steps (model default if omitted)");
  cmd->add_option("--size", options->size, "Frame size WxH, multiples of 16 (e.g. 64x64)");
  cmd->add_option("--num-frames", options->num_frames, "Frames, 4k+1 (1, 5, 9, …)");
  cmd->add_option("--guidance-scale", options->guidance_scale,
                  "CFG scale of the high-noise expert");
  cmd->add_option("--guidance-scale-2", options->guidance_scale_2,
                  "CFG scale of the low-noise expert");
  cmd->add_option("--boundary-ratio", options->boundary_ratio,
                  "Expert switch in (0, 1): the high-noise expert runs while t >= ratio x 1000 "
                  "(model_index.json's if omitted)");
  cmd->add_option("--flow-shift", options->flow_shift,
                  "The scheduler's shift (its scheduler_config.json's if omitted)");
  cmd->add_option("--fps", options->fps, "Frames per second of an .mp4 (model default if omitted)");
  cmd->add_option("--output,-o", options->output,
                  "Output: .mp4 (H.264), .png (frame or contact sheet) or a pattern like "
                  "frames/%03d.png (one %d field, flag 0 and a width allowed; %% is a '%')")
      ->capture_default_str();
  cmd->add_flag("--enable-cpu-offload", options->offload,
                "Model-level offload: only the running component group stays on the device");
  cmd->add_option("--device", options->device, "auto | cpu | sim | cuda[:N]")
      ->capture_default_str();
  cmd->add_option("--dtype", options->dtype,
                  "auto (each component's stored dtype) | float32 | bfloat16 | float16, or per "
                  "component: transformer=bfloat16,vae=float32")
      ->capture_default_str();
  cmd->add_option("--sim-memory", options->sim_memory, "Capacity of the sim device (e.g. 2GiB)")
      ->capture_default_str();
  options->offload_flags.add_to(*cmd);
  cmd->add_option("--prompt-cache", options->prompt_cache,
                  "Bytes of text-encoder outputs kept for repeated prompts (0: off)")
      ->capture_default_str();
  cmd->add_option("--report-json", options->report_json, "Write the offload report as JSON");
  cmd->add_flag("--mkdir", options->make_folders,
                "Create the folders of --output and --report-json when missing (else an error)");
  cmd->add_flag("--quiet,-q", options->quiet, "Print nothing but errors");
  cmd->add_option("--lora", options->loras,
                  "COMPONENT=PATH[:SCALE]: fuse a LoRA into a component's weights at load "
                  "(repeatable: --lora transformer=high.safetensors "
                  "--lora transformer_2=low.safetensors:0.8)")
      ->allow_extra_args(false);
  cmd->add_option("--preset", options->preset,
                  "Request settings over the model's defaults: lightning (4 steps, guidance 1, "
                  "flow shift 5); flags given win");
  cmd->callback([options] { std::exit(run_guarded([&] { return generate(*options); })); });
}

}  // namespace omni::cli
