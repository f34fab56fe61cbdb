#include "omni/io/video_writer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "omni/error.h"

#if OMNI_WITH_VIDEO
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}
#endif

namespace fs = std::filesystem;

namespace omni::io {

namespace {

void check_video_frames(const torch::Tensor& frames, const VideoOptions& options) {
  OMNI_CHECK(frames.defined() && frames.dim() == 4 && frames.size(3) == 3 &&
                 frames.scalar_type() == torch::kUInt8,
             FormatError, "video frames must be uint8 [F, H, W, 3]");
  OMNI_CHECK(frames.size(0) >= 1 && frames.size(1) >= 1 && frames.size(2) >= 1, FormatError,
             "video frames must not be empty, got ", frames.sizes());
  OMNI_CHECK(frames.size(1) <= 16384 && frames.size(2) <= 16384, FormatError, "video frames of ",
             frames.size(2), "x", frames.size(1), " exceed the 16384x16384 limit");
  OMNI_CHECK(options.fps >= 1 && options.fps <= 240, FormatError,
             "video fps must be in 1..240, got ", options.fps);
  OMNI_CHECK(options.crf >= 0 && options.crf <= 51, FormatError, "video crf must be in 0..51, got ",
             options.crf);
}

}  // namespace

#if OMNI_WITH_VIDEO

namespace {

std::string av_error(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, buf, sizeof buf);
  return buf;
}

struct CodecContextDeleter {
  void operator()(AVCodecContext* c) const noexcept { avcodec_free_context(&c); }
};
struct FrameDeleter {
  void operator()(AVFrame* f) const noexcept { av_frame_free(&f); }
};
struct PacketDeleter {
  void operator()(AVPacket* p) const noexcept { av_packet_free(&p); }
};
struct SwsDeleter {
  void operator()(SwsContext* s) const noexcept { sws_freeContext(s); }
};
// Closes the file (if opened) and frees the muxer.
struct FormatContextDeleter {
  void operator()(AVFormatContext* f) const noexcept {
    if (f->pb != nullptr && !(f->oformat->flags & AVFMT_NOFILE)) avio_closep(&f->pb);
    avformat_free_context(f);
  }
};
using CodecContextPtr = std::unique_ptr<AVCodecContext, CodecContextDeleter>;

// Removes a temporary file unless released (the rename succeeded).
class TempFile {
 public:
  explicit TempFile(fs::path path) : path_(std::move(path)) {}
  ~TempFile() {
    if (!path_.empty()) {
      std::error_code ec;
      fs::remove(path_, ec);
    }
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const fs::path& path() const { return path_; }
  void release() { path_.clear(); }

 private:
  fs::path path_;
};

bool supports_yuv420p(const AVCodec* codec) {
  if (codec->pix_fmts == nullptr) return true;  // the encoder does not say: try it
  for (const AVPixelFormat* f = codec->pix_fmts; *f != AV_PIX_FMT_NONE; ++f)
    if (*f == AV_PIX_FMT_YUV420P) return true;
  return false;
}

// The H.264 encoders to try, libx264 first (best quality per bit, always
// available in software), then any other that takes yuv420p (hardware ones
// open only where their device exists).
std::vector<const AVCodec*> h264_candidates() {
  std::vector<const AVCodec*> out;
  if (const AVCodec* x264 = avcodec_find_encoder_by_name("libx264")) out.push_back(x264);
  void* it = nullptr;
  while (const AVCodec* c = av_codec_iterate(&it)) {
    if (!av_codec_is_encoder(c) || c->id != AV_CODEC_ID_H264) continue;
    if (std::string(c->name) == "libx264" || !supports_yuv420p(c)) continue;
    out.push_back(c);
  }
  return out;
}

CodecContextPtr open_encoder(const AVCodec* codec, int width, int height,
                             const VideoOptions& options, bool global_header, std::string* error) {
  CodecContextPtr ctx(avcodec_alloc_context3(codec));
  OMNI_CHECK(ctx != nullptr, FormatError, "video: out of memory allocating the encoder");
  ctx->width = width;
  ctx->height = height;
  ctx->pix_fmt = AV_PIX_FMT_YUV420P;
  ctx->time_base = AVRational{1, options.fps};
  ctx->framerate = AVRational{options.fps, 1};
  ctx->gop_size = std::max(1, options.fps);
  ctx->color_range = AVCOL_RANGE_MPEG;
  ctx->colorspace = AVCOL_SPC_BT709;
  ctx->color_primaries = AVCOL_PRI_BT709;
  ctx->color_trc = AVCOL_TRC_BT709;
  ctx->thread_count = 0;  // the encoder's choice
  if (global_header) ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  AVDictionary* opts = nullptr;
  if (std::string(codec->name) == "libx264") {
    av_dict_set(&opts, "crf", std::to_string(options.crf).c_str(), 0);
    av_dict_set(&opts, "preset", "medium", 0);
  } else {
    // No CRF outside x264: about 0.15 bits per pixel, ample for generated clips.
    ctx->bit_rate = std::max<std::int64_t>(
        500'000, static_cast<std::int64_t>(0.15 * width * height * options.fps));
  }
  const int rc = avcodec_open2(ctx.get(), codec, &opts);
  av_dict_free(&opts);
  if (rc < 0) {
    *error = std::string(codec->name) + ": " + av_error(rc);
    return nullptr;
  }
  return ctx;
}

// The first H.264 encoder that opens; FormatError naming each one tried.
CodecContextPtr open_h264_encoder(int width, int height, const VideoOptions& options,
                                  bool global_header) {
  std::string tried;
  if (avcodec_find_encoder_by_name("libx264") == nullptr)
    tried = "libx264: not in this FFmpeg build";
  for (const AVCodec* codec : h264_candidates()) {
    std::string error;
    if (auto ctx = open_encoder(codec, width, height, options, global_header, &error)) return ctx;
    tried += (tried.empty() ? "" : "; ") + error;
  }
  throw FormatError(detail::concat(
      "video: no usable H.264 encoder in this FFmpeg build (", tried.empty() ? "none found" : tried,
      "); install an FFmpeg whose libavcodec has libx264 (Debian: libavcodec59 with "
      "libx264-164), or write .png / a frames/%03d.png pattern instead"));
}

// Sends one frame (or nullptr to flush) and writes every packet that comes out.
void encode(AVCodecContext* codec, AVFormatContext* format, AVStream* stream, const AVFrame* frame,
            AVPacket* packet, const std::string& label) {
  int rc = avcodec_send_frame(codec, frame);
  OMNI_CHECK(rc >= 0, FormatError, label, ": encoding failed: ", av_error(rc));
  while (true) {
    rc = avcodec_receive_packet(codec, packet);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
    OMNI_CHECK(rc >= 0, FormatError, label, ": encoding failed: ", av_error(rc));
    av_packet_rescale_ts(packet, codec->time_base, stream->time_base);
    packet->stream_index = stream->index;
    rc = av_interleaved_write_frame(format, packet);  // takes the packet's reference
    OMNI_CHECK(rc >= 0, FormatError, label, ": write failed: ", av_error(rc));
  }
}

// libx264 and the muxer log statistics at INFO level on every file: keep
// FFmpeg to errors unless the application chose a level itself.
void quiet_ffmpeg_logs() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (av_log_get_level() == AV_LOG_INFO) av_log_set_level(AV_LOG_ERROR);
  });
}

fs::path temp_path_for(const fs::path& path) {
  static std::atomic<unsigned> counter{0};
  auto name = path.filename().string();
  name = "." + name + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  return path.parent_path() / name;
}

void encode_file(const fs::path& file, const std::string& label, const torch::Tensor& rgb,
                 const VideoOptions& options) {
  const int frames = static_cast<int>(rgb.size(0));
  const int height = static_cast<int>(rgb.size(1));
  const int width = static_cast<int>(rgb.size(2));
  // yuv420p subsamples chroma 2×2: pad odd sizes by one (see the header).
  const int out_width = width + (width % 2);
  const int out_height = height + (height % 2);

  AVFormatContext* raw_format = nullptr;
  int rc = avformat_alloc_output_context2(&raw_format, nullptr, "mp4", file.c_str());
  OMNI_CHECK(rc >= 0 && raw_format != nullptr, FormatError, label,
             ": cannot create an MP4 muxer: ", av_error(rc));
  std::unique_ptr<AVFormatContext, FormatContextDeleter> format(raw_format);

  auto codec = open_h264_encoder(out_width, out_height, options,
                                 (format->oformat->flags & AVFMT_GLOBALHEADER) != 0);
  AVStream* stream = avformat_new_stream(format.get(), nullptr);
  OMNI_CHECK(stream != nullptr, FormatError, label, ": cannot create the video stream");
  rc = avcodec_parameters_from_context(stream->codecpar, codec.get());
  OMNI_CHECK(rc >= 0, FormatError, label, ": cannot set stream parameters: ", av_error(rc));
  stream->time_base = codec->time_base;
  stream->avg_frame_rate = codec->framerate;
  stream->r_frame_rate = codec->framerate;

  rc = avio_open(&format->pb, file.c_str(), AVIO_FLAG_WRITE);
  OMNI_CHECK(rc >= 0, FormatError, label, ": cannot create file: ", av_error(rc));
  AVDictionary* muxer_options = nullptr;
  // The index (moov) goes in front so that players and browsers can start
  // before the whole file has arrived (the server streams these files).
  av_dict_set(&muxer_options, "movflags", "+faststart", 0);
  rc = avformat_write_header(format.get(), &muxer_options);
  av_dict_free(&muxer_options);
  OMNI_CHECK(rc >= 0, FormatError, label, ": cannot write the MP4 header: ", av_error(rc));

  std::unique_ptr<SwsContext, SwsDeleter> sws(sws_getContext(
      out_width, out_height, AV_PIX_FMT_RGB24, out_width, out_height, AV_PIX_FMT_YUV420P,
      SWS_BICUBIC | SWS_ACCURATE_RND, nullptr, nullptr, nullptr));
  OMNI_CHECK(sws != nullptr, FormatError, label, ": cannot create the RGB→YUV converter");
  // RGB is full range; the video is BT.709 limited range, as tagged above.
  const int* bt709 = sws_getCoefficients(SWS_CS_ITU709);
  sws_setColorspaceDetails(sws.get(), bt709, /*srcRange=*/1, bt709, /*dstRange=*/0, 0, 1 << 16,
                           1 << 16);

  std::unique_ptr<AVFrame, FrameDeleter> frame(av_frame_alloc());
  std::unique_ptr<AVPacket, PacketDeleter> packet(av_packet_alloc());
  OMNI_CHECK(frame && packet, FormatError, label, ": out of memory allocating frames");
  frame->format = AV_PIX_FMT_YUV420P;
  frame->width = out_width;
  frame->height = out_height;
  frame->color_range = AVCOL_RANGE_MPEG;
  frame->colorspace = AVCOL_SPC_BT709;
  frame->color_primaries = AVCOL_PRI_BT709;
  frame->color_trc = AVCOL_TRC_BT709;
  rc = av_frame_get_buffer(frame.get(), 0);
  OMNI_CHECK(rc >= 0, FormatError, label, ": cannot allocate a frame: ", av_error(rc));

  for (int i = 0; i < frames; ++i) {
    torch::Tensor image = rgb[i];
    if (out_width != width) image = torch::cat({image, image.narrow(1, width - 1, 1)}, 1);
    if (out_height != height) image = torch::cat({image, image.narrow(0, height - 1, 1)}, 0);
    image = image.contiguous();
    rc = av_frame_make_writable(frame.get());  // the encoder may still hold the last one
    OMNI_CHECK(rc >= 0, FormatError, label, ": cannot reuse a frame: ", av_error(rc));
    const std::uint8_t* src[1] = {image.data_ptr<std::uint8_t>()};
    const int src_stride[1] = {3 * out_width};
    sws_scale(sws.get(), src, src_stride, 0, out_height, frame->data, frame->linesize);
    frame->pts = i;
    encode(codec.get(), format.get(), stream, frame.get(), packet.get(), label);
  }
  encode(codec.get(), format.get(), stream, nullptr, packet.get(), label);
  rc = av_write_trailer(format.get());
  OMNI_CHECK(rc >= 0, FormatError, label, ": cannot finish the MP4 file: ", av_error(rc));
  rc = avio_closep(&format->pb);
  OMNI_CHECK(rc >= 0, FormatError, label, ": write failed: ", av_error(rc));
}

}  // namespace

bool video_supported() {
  return true;
}

std::string video_encoder_name() {
  quiet_ffmpeg_logs();
  for (const AVCodec* codec : h264_candidates()) {
    std::string error;
    if (open_encoder(codec, 64, 64, VideoOptions{}, false, &error)) return codec->name;
  }
  return "";
}

void write_video(const fs::path& path, const torch::Tensor& frames, const VideoOptions& options) {
  check_video_frames(frames, options);
  quiet_ffmpeg_logs();
  const std::string label = path.string();
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  const auto rgb = frames.to(torch::kCPU).contiguous();
  TempFile temp(temp_path_for(path));
  encode_file(temp.path(), label, rgb, options);
  std::error_code ec;
  fs::rename(temp.path(), path, ec);
  OMNI_CHECK(!ec, FormatError, label,
             ": cannot move the finished video into place: ", ec.message());
  temp.release();
}

#else  // !OMNI_WITH_VIDEO

bool video_supported() {
  return false;
}

std::string video_encoder_name() {
  return "";
}

void write_video(const fs::path& path, const torch::Tensor& frames, const VideoOptions& options) {
  check_video_frames(frames, options);
  throw FormatError(detail::concat(
      path.string(),
      ": this omni was built without video support (OMNI_WITH_VIDEO=OFF, no FFmpeg); "
      "rebuild with -DOMNI_WITH_VIDEO=ON or write .png / a frames/%03d.png pattern instead"));
}

#endif  // OMNI_WITH_VIDEO

}  // namespace omni::io
