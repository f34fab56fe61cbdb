// The real `omni` binary, end to end: generate with offload (PNG, MP4, report
// JSON), the one-line errors of bad inputs, and inspect.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "omni/io/image_writer.h"
#include "omni/io/safetensors.h"
#include "omni/io/video_writer.h"
#include "support/hub_cache.h"
#include "support/run_process.h"
#include "support/scratch_dir.h"

#ifdef OMNI_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#if OMNI_WITH_VIDEO
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}
#endif

namespace fs = std::filesystem;
using omni::testing::run_process;

namespace {

class Cli : public omni::testing::ScratchDirTest {
 protected:
  Cli() : ScratchDirTest("omni_cli_test") {}
  static omni::testing::ProcessResult run_omni(std::vector<std::string> args) {
    args.insert(args.begin(), OMNI_BINARY);
    return run_process(args);
  }
  // A short, small generation (2 steps) of the built-in example; `overrides`
  // replace or add options (each option is given once).
  std::vector<std::string> generate_args(
      const std::string& output, const std::map<std::string, std::string>& overrides = {}) const {
    std::map<std::string, std::string> options = {{"--prompt", "a red circle moving right"},
                                                  {"--steps", "2"},
                                                  {"--size", "64x48"},
                                                  {"--output", (dir_ / output).string()}};
    for (const auto& [k, v] : overrides) options[k] = v;
    std::vector<std::string> args = {"generate", "example:wan-shaped"};
    for (const auto& [k, v] : options) {
      args.push_back(k);
      args.push_back(v);
    }
    return args;
  }
};

void expect_one_line_error(const omni::testing::ProcessResult& r, const std::string& mentions) {
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.err_lines(), 1) << r.err;
  EXPECT_EQ(r.err.rfind("omni: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(mentions), std::string::npos) << r.err;
}

TEST_F(Cli, GenerateWithOffloadWritesAPngAndTheReport) {
  const auto report_path = (dir_ / "report.json").string();
  auto args = generate_args("one.png", {{"--num-frames", "1"}, {"--report-json", report_path}});
  args.push_back("--enable-cpu-offload");
  const auto r = run_omni(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("offload report"), std::string::npos) << r.out;

  const auto png = omni::io::decode_png(omni::testing::read_text_file((dir_ / "one.png").string()));
  EXPECT_EQ(png.sizes(), (std::vector<std::int64_t>{48, 64, 3}));

  const auto json = nlohmann::json::parse(omni::testing::read_text_file(report_path));
  for (const char* key :
       {"device", "peak_resident_bytes", "planned_peak_without_offload_bytes", "pinned_host_bytes",
        "pageable_host_bytes", "d2h_bytes", "components", "transfers"})
    EXPECT_TRUE(json.contains(key)) << key;
  EXPECT_TRUE(json["device"].is_string());
  EXPECT_EQ(json["d2h_bytes"].get<std::uint64_t>(), 0u) << "offloading must copy nothing back";
  EXPECT_GT(json["peak_resident_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_LT(json["peak_resident_bytes"].get<std::uint64_t>(),
            json["planned_peak_without_offload_bytes"].get<std::uint64_t>());
  EXPECT_GT(json["pinned_host_bytes"].get<std::uint64_t>() +
                json["pageable_host_bytes"].get<std::uint64_t>(),
            0u);
  std::set<std::string> roles;
  ASSERT_EQ(json["components"].size(), 4u);
  for (const auto& c : json["components"]) {
    for (const char* key : {"name", "role", "bytes", "uploads"})
      EXPECT_TRUE(c.contains(key)) << key << " in " << c.dump();
    roles.insert(c["role"].get<std::string>());
    EXPECT_TRUE(c["uploads"].is_number_unsigned()) << c.dump();
  }
  EXPECT_EQ(roles, (std::set<std::string>{"dit", "encoder", "vae"}));
  // This request swapped the encoder in, then the high-noise expert (2 steps
  // at shift 12 both lie above the boundary); the VAE came up at load.
  ASSERT_FALSE(json["transfers"].empty());
  std::set<std::string> moved;
  std::uint64_t moved_bytes = 0;
  for (const auto& t : json["transfers"]) {
    for (const char* key : {"component", "direction", "bytes", "seconds"})
      EXPECT_TRUE(t.contains(key)) << key << " in " << t.dump();
    EXPECT_EQ(t["direction"], "h2d");
    moved.insert(t["component"].get<std::string>());
    moved_bytes += t["bytes"].get<std::uint64_t>();
  }
  EXPECT_TRUE(moved.count("text_encoder") && moved.count("transformer")) << json["transfers"];
  EXPECT_EQ(moved_bytes, json["h2d_bytes"].get<std::uint64_t>());
}

// Streaming over a paced sim link writes the frames a cpu run writes, and
// the report splits the transfer time into exposed and hidden.
TEST_F(Cli, StreamedOffloadOverASimLinkMatchesTheCpuFrames) {
  const auto report_path = (dir_ / "streamed.json").string();
  auto streamed = generate_args("streamed.png", {{"--num-frames", "5"},
                                                 {"--seed", "4"},
                                                 {"--device", "sim"},
                                                 {"--sim-link-gbps", "1"},
                                                 {"--report-json", report_path}});
  streamed.push_back("--enable-cpu-offload");
  const auto r = run_omni(streamed);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(streamed)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("exposed"), std::string::npos) << r.out;
  const auto cpu = run_omni(
      generate_args("cpu.png", {{"--num-frames", "5"}, {"--seed", "4"}, {"--device", "cpu"}}));
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(omni::testing::read_text_file((dir_ / "streamed.png").string()),
            omni::testing::read_text_file((dir_ / "cpu.png").string()));
  const auto json = nlohmann::json::parse(omni::testing::read_text_file(report_path));
  EXPECT_TRUE(json.at("streaming").get<bool>());
  // Compute waited for part of the uploads, inside the request's own time.
  EXPECT_GT(json.at("exposed_transfer_seconds").get<double>(), 0.0);
  EXPECT_LT(json.at("exposed_transfer_seconds").get<double>(), json.at("seconds").get<double>());
  double upload = 0;
  for (const auto& c : json.at("components")) {
    EXPECT_TRUE(c.contains("exposed_transfer_seconds")) << c.dump();
    EXPECT_TRUE(c.contains("hidden_transfer_seconds")) << c.dump();
    upload += c.at("upload_seconds").get<double>();
  }
  EXPECT_GT(upload, 0.0) << "a 1 GB/s link takes time";
  // --offload-streaming takes on or off only.
  auto bad = generate_args("bad.png", {{"--offload-streaming", "sometimes"}});
  bad.push_back("--enable-cpu-offload");
  EXPECT_EQ(run_omni(bad).exit_code, 2);
}

TEST_F(Cli, SeveralFramesToPngMakeAContactSheet) {
  auto args = generate_args("sheet.png");
  args.push_back("--quiet");
  const auto r = run_omni(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  // 5 frames (the default) in a 3 × 2 grid.
  const auto png =
      omni::io::decode_png(omni::testing::read_text_file((dir_ / "sheet.png").string()));
  EXPECT_EQ(png.sizes(), (std::vector<std::int64_t>{2 * 48, 3 * 64, 3}));
}

TEST_F(Cli, BadInputsFailWithOneLine) {
  auto with = [&](const std::map<std::string, std::string>& overrides) {
    return run_omni(generate_args("bad.png", overrides));
  };
  expect_one_line_error(with({{"--size", "30x30"}}), "multiple of 16");
  expect_one_line_error(with({{"--device", "gpu"}}), "gpu");
  expect_one_line_error(with({{"--num-frames", "4"}}), "num_frames");
  expect_one_line_error(with({{"--prompt", ""}}), "prompt");
  expect_one_line_error(with({{"--output", (dir_ / "bad.gif").string()}}), ".gif");
  expect_one_line_error(with({{"--dtype", "vae=int8"}}), "'int8'");
  const auto tiny = std::string(OMNI_SOURCE_DIR) + "/models/tiny-shapes";
  const auto unknown = run_omni({"generate", tiny, "--prompt", "x", "--dtype", "unet=bfloat16"});
  expect_one_line_error(unknown, "'unet'");
  EXPECT_EQ(unknown.exit_code, 2);
  expect_one_line_error(run_omni({"inspect", tiny, "--dtype", "unet=bfloat16"}), "'unet'");
  expect_one_line_error(run_omni({"generate", "example:nope", "--prompt", "x"}), "example:nope");
  expect_one_line_error(run_omni({"generate", (dir_ / "missing").string(), "--prompt", "x"}),
                        "missing");
  EXPECT_FALSE(fs::exists(dir_ / "bad.png"));
  EXPECT_FALSE(fs::exists(dir_ / "bad.gif"));
}

TEST_F(Cli, AHubIdMissingFromTheCacheExitsThreeNamingWhereItLooked) {
  omni::testing::ScopedEnv cache("HF_HUB_CACHE", (dir_ / "hub").string());
  for (const auto& command : {"generate", "inspect"}) {
    std::vector<std::string> args = {command, "acme/not-downloaded"};
    if (std::string(command) == "generate") args.insert(args.end(), {"--prompt", "x"});
    const auto r = run_omni(args);
    EXPECT_EQ(r.exit_code, 3) << r.err;
    expect_one_line_error(r, "'acme/not-downloaded'");
    EXPECT_NE(r.err.find((dir_ / "hub" / "models--acme--not-downloaded").string()),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("huggingface-cli download acme/not-downloaded"), std::string::npos)
        << r.err;
  }
}

// The regression: CLI11's parse errors exited 104/106/109, not the documented 2.
TEST_F(Cli, ParseErrorsExitTwo) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"generate"},
        {"generate", "example:wan-shaped"},
        {"generate", "example:wan-shaped", "--prompt", "x", "--steps", "many"},
        {"generate", "example:wan-shaped", "--prompt", "x", "--no-such-flag"},
        {"nonsense"}}) {
    const auto r = run_omni(args);
    EXPECT_EQ(r.exit_code, 2) << args.size() << " args: " << r.err;
  }
  EXPECT_EQ(run_omni({"--help"}).exit_code, 0);
  EXPECT_EQ(run_omni({"--version"}).exit_code, 0);
}

// `omni --version` names the LibTorch (and CUDA toolkit) it was compiled
// against: the same headers as this test binary's.
TEST_F(Cli, VersionNamesTheLibTorchAndCudaItWasBuiltWith) {
  const auto r = run_omni({"--version"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // m[1] the LibTorch version, m[2] and m[3] its major and minor; m[5] and
  // m[6] the CUDA toolkit's major and minor.
  const std::regex line(R"(omni \d+\.\d+\.\d+ \(LibTorch ((\d+)\.(\d+)\.\d+\S*), )"
                        R"((no CUDA|CUDA (\d+)\.(\d+))\)\n)");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(r.out, m, line)) << r.out;
  EXPECT_EQ(m[1].str(), TORCH_VERSION);
  EXPECT_EQ(std::stoi(m[2]), TORCH_VERSION_MAJOR);
  EXPECT_EQ(std::stoi(m[3]), TORCH_VERSION_MINOR);
#ifdef OMNI_WITH_CUDA
  ASSERT_TRUE(m[5].matched) << r.out;
  EXPECT_EQ(std::stoi(m[5]), CUDART_VERSION / 1000);
  EXPECT_EQ(std::stoi(m[6]), CUDART_VERSION % 1000 / 10);
#else
  EXPECT_EQ(m[4].str(), "no CUDA");
#endif
}

// The regression: the output path was checked only after the whole
// generation, and an uncreatable directory exited 70 "internal error".
TEST_F(Cli, AnUnwritableOutputExitsThreeBeforeTheModelLoads) {
  std::ofstream(dir_ / "a-file") << "not a directory";
  const auto output = (dir_ / "a-file" / "sub" / "out.png").string();
  // The model does not exist either: an error about the output proves it came first.
  const auto r =
      run_omni({"generate", (dir_ / "no-model").string(), "--prompt", "x", "-o", output});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  expect_one_line_error(r, "a-file");
  // (The missing model above shows the order; a time limit here failed on a loaded host.)
  const auto real = run_omni(generate_args("ignored.png", {{"--output", output}}));
  EXPECT_EQ(real.exit_code, 3) << real.err;
  const auto report = run_omni(generate_args("ok.png", {{"--report-json", output}}));
  EXPECT_EQ(report.exit_code, 3) << report.err;
  EXPECT_FALSE(fs::exists(dir_ / "ok.png"));
}

// The regression (issue 34, D1): --output went to snprintf as its format:
// f_%03d_%s.png wrote f_000_(null).png then crashed, %n and %s%s%s%s crashed,
// %d_%d wrote garbage names. Any '%' but one %d-style field (or %%) is a
// configuration error (exit 2) naming the pattern, before the model loads.
TEST_F(Cli, AFramePatternTakesExactlyOneNumberField) {
  for (const std::string pattern :
       {"f_%03d_%s.png", "f_%n.png", "%s%s%s%s.png", "f_%d_%d.png", "f_%x.png", "f_%-5d.png",
        "f_%.3d.png", "f_%ld.png", "f_100%%.png", "f_%", "f_%1000d.png", "f%d/x.png"}) {
    SCOPED_TRACE(pattern);
    const auto output = (dir_ / pattern).string();
    const auto r = run_omni(generate_args("unused.png", {{"--output", output}}));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    expect_one_line_error(r, "frame pattern '" + output + "'");
    // The missing model is never reached: the pattern is checked first.
    const auto first =
        run_omni({"generate", (dir_ / "no-model").string(), "--prompt", "x", "-o", output});
    EXPECT_EQ(first.exit_code, 2) << first.err;
    EXPECT_EQ(first.err.find("no-model"), std::string::npos) << first.err;
  }
  EXPECT_TRUE(fs::is_empty(dir_));

  // Flag 0, a width and %% are kept; one file per frame, numbered from 0.
  auto sequence = generate_args("f_%03d_100%%.png", {{"--num-frames", "5"}});
  sequence.push_back("--quiet");
  const auto r = run_omni(sequence);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_))
    names.insert(entry.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"f_000_100%.png", "f_001_100%.png", "f_002_100%.png",
                                          "f_003_100%.png", "f_004_100%.png"}));
  const auto png =
      omni::io::decode_png(omni::testing::read_text_file((dir_ / "f_004_100%.png").string()));
  EXPECT_EQ(png.sizes(), (std::vector<std::int64_t>{48, 64, 3}));
}

// The regression (issue 34, D4): a missing output folder was created
// silently. Now it is an error before the model loads (exit 3) unless
// --mkdir asks for it; the same for --report-json.
TEST_F(Cli, MissingOutputFoldersAreAnErrorUnlessMkdir) {
  const auto output = (dir_ / "new" / "deeper" / "x.png").string();
  const auto report = (dir_ / "reports" / "r.json").string();
  const auto missing = run_omni(generate_args("unused.png", {{"--output", output}}));
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
  expect_one_line_error(missing, "--mkdir");
  EXPECT_NE(missing.err.find(output), std::string::npos) << missing.err;
  const auto missing_report =
      run_omni(generate_args("ok.png", {{"--num-frames", "1"}, {"--report-json", report}}));
  EXPECT_EQ(missing_report.exit_code, 3) << missing_report.err;
  expect_one_line_error(missing_report, report);
  EXPECT_FALSE(fs::exists(dir_ / "new"));
  EXPECT_FALSE(fs::exists(dir_ / "reports"));
  EXPECT_FALSE(fs::exists(dir_ / "ok.png")) << "checked before generating";

  auto args = generate_args(
      "unused.png", {{"--output", output}, {"--num-frames", "1"}, {"--report-json", report}});
  args.push_back("--mkdir");
  const auto made = run_omni(args);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_TRUE(fs::is_regular_file(output));
  EXPECT_TRUE(fs::is_regular_file(report));
}

// The regression (issue 34, D4): as root, access() passed /proc, so
// -o /proc/version.mp4 failed only after the whole generation; a FIFO output
// would have blocked forever. Special files, folders and the kernel's file
// systems are refused before the model loads (exit 3), with nothing left behind.
TEST_F(Cli, SpecialAndKernelFilesAreRefusedBeforeTheModelLoads) {
  ASSERT_EQ(::mkfifo((dir_ / "pipe.png").c_str(), 0600), 0);
  fs::create_directory(dir_ / "folder.png");
  const auto no_model = (dir_ / "no-model").string();
  for (const auto& [option, path, mentions] : std::vector<std::array<std::string, 3>>{
           {"-o", "/proc/version.mp4", "kernel file system"},
           {"-o", "/proc/sys/kernel/x.png", "kernel file system"},
           {"-o", (dir_ / "pipe.png").string(), "not a regular file"},
           {"-o", (dir_ / "folder.png").string(), "not a regular file"},
           {"--report-json", "/dev/null", "not a regular file"},
           {"--report-json", "/proc/version", "kernel file system"},
           {"--report-json", (dir_ / "pipe.png").string(), "not a regular file"}}) {
    SCOPED_TRACE(option + " " + path);
    std::vector<std::string> args = {"generate", no_model, "--prompt", "x", option, path};
    if (option != "-o") args.insert(args.end(), {"-o", (dir_ / "out.png").string()});
    const auto r = run_omni(args);
    EXPECT_EQ(r.exit_code, 3) << r.err;
    expect_one_line_error(r, mentions);
    EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("no-model"), std::string::npos) << r.err;
  }
  // The writability probe leaves no file behind.
  const auto r =
      run_omni({"generate", no_model, "--prompt", "x", "-o", (dir_ / "out.png").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no-model"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "out.png"));
}

// The regression: --seed -1 wrapped silently to 2^64-1, while the server rejected it.
TEST_F(Cli, NoSeedOrMinusOnePicksOneAndPrintsIt) {
  const std::regex printed(R"(seed (\d+))");
  std::smatch m;
  const auto minus_one =
      run_omni(generate_args("a.png", {{"--num-frames", "1"}, {"--seed", "-1"}}));
  ASSERT_EQ(minus_one.exit_code, 0) << minus_one.err;
  ASSERT_TRUE(std::regex_search(minus_one.out, m, printed)) << minus_one.out;
  const std::string seed = m[1];
  EXPECT_NE(seed, "18446744073709551615");
  const auto none = run_omni(generate_args("b.png", {{"--num-frames", "1"}}));
  ASSERT_EQ(none.exit_code, 0) << none.err;
  ASSERT_TRUE(std::regex_search(none.out, m, printed)) << none.out;
  EXPECT_NE(m[1], seed);
  // The printed seed reproduces the picture.
  const auto again = run_omni(generate_args("c.png", {{"--num-frames", "1"}, {"--seed", seed}}));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("seed " + seed), std::string::npos) << again.out;
  EXPECT_EQ(omni::testing::read_text_file((dir_ / "a.png").string()),
            omni::testing::read_text_file((dir_ / "c.png").string()));
  expect_one_line_error(run_omni(generate_args("d.png", {{"--seed", "-2"}})), "--seed");
  expect_one_line_error(run_omni(generate_args("d.png", {{"--seed", "18446744073709551616"}})),
                        "--seed");
}

TEST_F(Cli, InspectTheBuiltInExample) {
  const auto r = run_omni({"inspect", "example:wan-shaped"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"text_encoder", "transformer_2", "encoder", "dit", "vae", "F32",
                           "with model-level offload", "without offload"})
    EXPECT_NE(r.out.find(text), std::string::npos) << text << " in\n" << r.out;

  const auto j = run_omni({"inspect", "example:wan-shaped", "--json", "-"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto json = nlohmann::json::parse(j.out);
  EXPECT_EQ(json["components"].size(), 4u);
  EXPECT_LT(json["planned_peak_with_offload_bytes"].get<std::uint64_t>(),
            json["planned_peak_without_offload_bytes"].get<std::uint64_t>());

  expect_one_line_error(run_omni({"inspect", "example:nope"}), "example:nope");
  expect_one_line_error(run_omni({"inspect", (dir_ / "missing").string()}), "missing");
}

TEST_F(Cli, GenerateWithoutOffloadPrintsNoEmptyReport) {
  const auto r = run_omni(generate_args("plain.png", {{"--num-frames", "1"}}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("offload report"), std::string::npos) << r.out;
}

#if OMNI_WITH_VIDEO

struct Probe {
  int frames = 0;
  int width = 0;
  int height = 0;
  std::string codec;
};

// Decodes every frame of the file's video stream with FFmpeg's own decoder.
Probe probe_video(const fs::path& path) {
  Probe p;
  AVFormatContext* format = nullptr;
  if (avformat_open_input(&format, path.c_str(), nullptr, nullptr) < 0) return p;
  avformat_find_stream_info(format, nullptr);
  const AVCodec* decoder = nullptr;
  const int index = av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0);
  if (index >= 0 && decoder != nullptr) {
    p.codec = avcodec_get_name(format->streams[index]->codecpar->codec_id);
    AVCodecContext* codec = avcodec_alloc_context3(decoder);
    avcodec_parameters_to_context(codec, format->streams[index]->codecpar);
    avcodec_open2(codec, decoder, nullptr);
    AVPacket* packet = av_packet_alloc();
    AVFrame* frame = av_frame_alloc();
    auto drain = [&] {
      while (avcodec_receive_frame(codec, frame) >= 0) {
        ++p.frames;
        p.width = frame->width;
        p.height = frame->height;
        av_frame_unref(frame);
      }
    };
    while (av_read_frame(format, packet) >= 0) {
      if (packet->stream_index == index && avcodec_send_packet(codec, packet) >= 0) drain();
      av_packet_unref(packet);
    }
    avcodec_send_packet(codec, nullptr);
    drain();
    av_frame_free(&frame);
    av_packet_free(&packet);
    avcodec_free_context(&codec);
  }
  avformat_close_input(&format);
  return p;
}

TEST_F(Cli, GenerateWritesAnMp4) {
  auto args = generate_args("clip.mp4");
  args.push_back("--enable-cpu-offload");
  const auto r = run_omni(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto p = probe_video(dir_ / "clip.mp4");
  EXPECT_EQ(p.codec, "h264");
  EXPECT_EQ(p.frames, 5);
  EXPECT_EQ(p.width, 64);
  EXPECT_EQ(p.height, 48);
}

#else

TEST_F(Cli, Mp4WithoutVideoSupportIsAOneLineError) {
  expect_one_line_error(run_omni(generate_args("clip.mp4")), "OMNI_WITH_VIDEO");
}

#endif

}  // namespace

// --lora and --preset: a LoRA fused at load is in the report; bad specs exit
// 2 (configuration) or 3 (file) with one line. (The built-in example has no
// flow shift for the lightning preset to set; tests/python runs it.)
TEST_F(Cli, LoraAndPresetFlags) {
  torch::manual_seed(2);
  const auto lora = dir_ / "shaped.safetensors";
  omni::io::save_safetensors(lora,
                             {{"transformer.blocks.0.fc1.lora_A.weight", torch::randn({8, 128})},
                              {"transformer.blocks.0.fc1.lora_B.weight", torch::randn({384, 8})}});
  auto args = generate_args("lora.png", {{"--report-json", (dir_ / "lora.json").string()}});
  args.insert(args.end(), {"--lora", "transformer=" + lora.string() + ":0.5", "--device", "sim",
                           "--enable-cpu-offload"});
  const auto r = run_omni(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto report =
      nlohmann::json::parse(omni::testing::read_text_file((dir_ / "lora.json").string()));
  ASSERT_EQ(report["loras"].size(), 1u);
  EXPECT_EQ(report["loras"][0]["scale"], 0.5);
  EXPECT_EQ(report["loras"][0]["style"], "peft");
  EXPECT_NE(r.out.find("LoRA on transformer"), std::string::npos) << r.out;

  auto with = [&](std::vector<std::string> extra) {
    auto a = generate_args("bad.png");
    a.insert(a.end(), extra.begin(), extra.end());
    return run_omni(a);
  };
  const auto no_equals = with({"--lora", lora.string()});
  expect_one_line_error(no_equals, "COMPONENT=PATH");
  EXPECT_EQ(no_equals.exit_code, 2);
  const auto unknown = with({"--lora", "unet=" + lora.string()});
  expect_one_line_error(unknown, "no component 'unet'");
  EXPECT_EQ(unknown.exit_code, 2);
  const auto missing = with({"--lora", "transformer=" + (dir_ / "absent.safetensors").string()});
  expect_one_line_error(missing, "absent.safetensors");
  EXPECT_EQ(missing.exit_code, 3);
  omni::io::save_safetensors(dir_ / "sdxl.safetensors",
                             {{"lora_unet_mid_block_proj.lora_down.weight", torch::ones({2, 2})}});
  const auto mismatched = with({"--lora", "transformer=" + (dir_ / "sdxl.safetensors").string()});
  expect_one_line_error(mismatched, "lora_unet_mid_block_proj.lora_down.weight");
  EXPECT_EQ(mismatched.exit_code, 3);
  const auto preset = with({"--preset", "turbo"});
  expect_one_line_error(preset, "unknown preset 'turbo'");
  EXPECT_EQ(preset.exit_code, 2);
}
