// MP4 output: what write_video writes is read back here with FFmpeg's own
// demuxer and decoder (not with anything of ours), then compared with the input.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "omni/error.h"
#include "omni/io/image_writer.h"
#include "omni/io/video_writer.h"

#if OMNI_WITH_VIDEO
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}
#endif

namespace fs = std::filesystem;

namespace {

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("omni_video_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  // Files in the directory other than `keep` (temporaries left behind).
  std::vector<std::string> others(const std::string& keep) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_))
      if (e.path().filename() != keep) out.push_back(e.path().filename().string());
    return out;
  }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

// A smooth colour gradient that drifts a little each frame: uint8 [F, H, W, 3].
torch::Tensor gradient_clip(std::int64_t frames, std::int64_t height, std::int64_t width) {
  auto t = torch::arange(frames, torch::kFloat).view({frames, 1, 1});
  auto y = torch::arange(height, torch::kFloat).view({1, height, 1});
  auto x = torch::arange(width, torch::kFloat).view({1, 1, width});
  auto r = 30 + 190 * x / std::max<std::int64_t>(1, width - 1) + 2 * t;
  auto g = 40 + 170 * y / std::max<std::int64_t>(1, height - 1) + 0 * t;
  auto b = 200 - 80 * (x + y) / std::max<std::int64_t>(1, width + height - 2) - t;
  return torch::stack({r.expand({frames, height, width}), g.expand({frames, height, width}),
                       b.expand({frames, height, width})},
                      3)
      .round()
      .clamp(0, 255)
      .to(torch::kUInt8);
}

#if OMNI_WITH_VIDEO

struct Decoded {
  torch::Tensor frames;  // uint8 [F, H, W, 3]
  std::string codec;
  AVRational frame_rate{0, 1};
  AVPixelFormat pix_fmt = AV_PIX_FMT_NONE;
  AVColorSpace colorspace = AVCOL_SPC_UNSPECIFIED;
  AVColorRange range = AVCOL_RANGE_UNSPECIFIED;
};

// Demuxes and decodes every frame of the file's video stream into RGB24,
// interpreting YUV as the stream is tagged (BT.709 limited range expected).
Decoded decode_video(const fs::path& path) {
  Decoded out;
  AVFormatContext* format = nullptr;
  if (avformat_open_input(&format, path.c_str(), nullptr, nullptr) < 0)
    throw std::runtime_error("cannot open " + path.string());
  std::unique_ptr<AVFormatContext, void (*)(AVFormatContext*)> format_guard(
      format, [](AVFormatContext* f) { avformat_close_input(&f); });
  if (avformat_find_stream_info(format, nullptr) < 0) throw std::runtime_error("no stream info");
  const AVCodec* decoder = nullptr;
  const int index = av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0);
  if (index < 0 || decoder == nullptr) throw std::runtime_error("no video stream");
  AVStream* stream = format->streams[index];
  out.codec = avcodec_get_name(stream->codecpar->codec_id);
  out.frame_rate = stream->avg_frame_rate;
  std::unique_ptr<AVCodecContext, void (*)(AVCodecContext*)> codec(
      avcodec_alloc_context3(decoder), [](AVCodecContext* c) { avcodec_free_context(&c); });
  avcodec_parameters_to_context(codec.get(), stream->codecpar);
  if (avcodec_open2(codec.get(), decoder, nullptr) < 0) throw std::runtime_error("decoder");
  std::unique_ptr<AVFrame, void (*)(AVFrame*)> frame(av_frame_alloc(),
                                                     [](AVFrame* f) { av_frame_free(&f); });
  std::unique_ptr<AVPacket, void (*)(AVPacket*)> packet(av_packet_alloc(),
                                                        [](AVPacket* p) { av_packet_free(&p); });
  std::vector<torch::Tensor> frames;
  auto drain = [&] {
    while (avcodec_receive_frame(codec.get(), frame.get()) >= 0) {
      out.pix_fmt = static_cast<AVPixelFormat>(frame->format);
      out.colorspace = frame->colorspace;
      out.range = frame->color_range;
      const int w = frame->width, h = frame->height;
      SwsContext* sws = sws_getContext(w, h, out.pix_fmt, w, h, AV_PIX_FMT_RGB24,
                                       SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr,
                                       nullptr, nullptr);
      const int* coefficients = sws_getCoefficients(
          frame->colorspace == AVCOL_SPC_BT709 ? SWS_CS_ITU709 : SWS_CS_DEFAULT);
      sws_setColorspaceDetails(sws, coefficients, frame->color_range == AVCOL_RANGE_JPEG,
                               coefficients, 1, 0, 1 << 16, 1 << 16);
      auto rgb = torch::empty({h, w, 3}, torch::kUInt8);
      std::uint8_t* dst[1] = {rgb.data_ptr<std::uint8_t>()};
      const int dst_stride[1] = {3 * w};
      sws_scale(sws, frame->data, frame->linesize, 0, h, dst, dst_stride);
      sws_freeContext(sws);
      frames.push_back(rgb);
      av_frame_unref(frame.get());
    }
  };
  while (av_read_frame(format, packet.get()) >= 0) {
    if (packet->stream_index == index) {
      avcodec_send_packet(codec.get(), packet.get());
      drain();
    }
    av_packet_unref(packet.get());
  }
  avcodec_send_packet(codec.get(), nullptr);
  drain();
  if (!frames.empty()) out.frames = torch::stack(frames);
  return out;
}

double mean_abs_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat) - b.to(torch::kFloat)).abs().mean().item<double>();
}

TEST(VideoWriter, GradientRoundTripsThroughH264) {
  ASSERT_TRUE(omni::io::video_supported());
  EXPECT_FALSE(omni::io::video_encoder_name().empty());
  TempDir dir;
  const auto path = dir.path() / "clip.mp4";
  const auto clip = gradient_clip(9, 48, 64);
  omni::io::write_video(path, clip, {.fps = 12});
  ASSERT_TRUE(fs::exists(path));
  EXPECT_TRUE(dir.others("clip.mp4").empty()) << "a temporary file was left behind";

  const auto decoded = decode_video(path);
  EXPECT_EQ(decoded.codec, "h264");
  EXPECT_EQ(decoded.pix_fmt, AV_PIX_FMT_YUV420P);
  EXPECT_EQ(decoded.colorspace, AVCOL_SPC_BT709);
  EXPECT_EQ(decoded.range, AVCOL_RANGE_MPEG);
  EXPECT_EQ(decoded.frame_rate.num, 12 * decoded.frame_rate.den);
  ASSERT_TRUE(decoded.frames.defined());
  ASSERT_EQ(decoded.frames.sizes(), clip.sizes());
  // Chroma subsampling and quantisation cost a little on a smooth gradient.
  const double mae = mean_abs_error(decoded.frames, clip);
  EXPECT_LT(mae, 3.0) << "mean abs error " << mae;
  std::cout << "encoder " << omni::io::video_encoder_name() << ", mean abs error " << mae
            << " (0..255)\n";
  for (std::int64_t i = 0; i < clip.size(0); ++i)
    EXPECT_LT(mean_abs_error(decoded.frames[i], clip[i]), 4.0) << "frame " << i;
}

TEST(VideoWriter, OneFrameIsAValidVideo) {
  TempDir dir;
  const auto path = dir.path() / "still.mp4";
  omni::io::write_video(path, gradient_clip(1, 32, 32), {.fps = 16});
  const auto decoded = decode_video(path);
  ASSERT_TRUE(decoded.frames.defined());
  EXPECT_EQ(decoded.frames.size(0), 1);
}

TEST(VideoWriter, OddSizesArePaddedByRepeatingTheEdge) {
  TempDir dir;
  const auto path = dir.path() / "odd.mp4";
  const auto clip = gradient_clip(5, 17, 33);
  omni::io::write_video(path, clip, {.fps = 8});
  const auto decoded = decode_video(path);
  ASSERT_TRUE(decoded.frames.defined());
  ASSERT_EQ(decoded.frames.sizes(), (std::vector<std::int64_t>{5, 18, 34, 3}));
  const auto inner = decoded.frames.slice(1, 0, 17).slice(2, 0, 33);
  EXPECT_LT(mean_abs_error(inner, clip), 3.0);
  // The padding column repeats the last one.
  EXPECT_LT(mean_abs_error(decoded.frames.select(2, 33).slice(1, 0, 17), clip.select(2, 32)), 4.0);
  // So does the padding row.
  EXPECT_LT(mean_abs_error(decoded.frames.select(1, 17).slice(1, 0, 33), clip.select(1, 16)), 4.0);
}

TEST(VideoWriter, WriteFramesDispatchesMp4AndCreatesFolders) {
  TempDir dir;
  const auto path = dir.path() / "sub" / "out.mp4";
  const auto written = omni::io::write_frames(path, gradient_clip(5, 32, 48), 16);
  ASSERT_EQ(written.size(), 1u);
  EXPECT_EQ(written[0], path);
  const auto decoded = decode_video(path);
  ASSERT_TRUE(decoded.frames.defined());
  EXPECT_EQ(decoded.frames.sizes(), (std::vector<std::int64_t>{5, 32, 48, 3}));
  EXPECT_EQ(decoded.frame_rate.num, 16 * decoded.frame_rate.den);
}

TEST(VideoWriter, AFailedWriteLeavesTheTargetUntouched) {
  TempDir dir;
  const auto path = dir.path() / "keep.mp4";
  { std::ofstream(path) << "previous"; }
  // Bad input: refused before anything is created.
  EXPECT_THROW(omni::io::write_video(path, torch::zeros({2, 16, 16, 3}), {}), omni::FormatError);
  EXPECT_THROW(omni::io::write_video(path, gradient_clip(1, 16, 16), {.fps = 0}),
               omni::FormatError);
  std::string content;
  std::getline(std::ifstream(path), content);
  EXPECT_EQ(content, "previous");
  EXPECT_TRUE(dir.others("keep.mp4").empty());

  // The encode succeeds but the final rename cannot replace a directory:
  // the temporary file is removed and the error names the target.
  const auto blocked = dir.path() / "blocked.mp4";
  fs::create_directories(blocked / "inside");
  try {
    omni::io::write_video(blocked, gradient_clip(1, 16, 16), {});
    FAIL() << "expected a FormatError";
  } catch (const omni::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("blocked.mp4"), std::string::npos) << e.what();
  }
  for (const auto& name : dir.others("keep.mp4")) EXPECT_EQ(name, "blocked.mp4");
}

#else  // !OMNI_WITH_VIDEO

TEST(VideoWriter, ABuildWithoutVideoSaysSo) {
  EXPECT_FALSE(omni::io::video_supported());
  TempDir dir;
  try {
    omni::io::write_video(dir.path() / "x.mp4", gradient_clip(1, 16, 16), {});
    FAIL() << "expected a FormatError";
  } catch (const omni::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("OMNI_WITH_VIDEO"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.path() / "x.mp4"));
}

#endif  // OMNI_WITH_VIDEO

}  // namespace
