// VideoJobStore: the records behind the asynchronous video API
// (POST /v1/videos, GET /v1/videos[/{id}[/content]], DELETE /v1/videos/{id}).
//
// A record lives from submission until it is deleted or, once finished
// (completed or failed), until it is older than --job-ttl or more than
// --max-jobs finished records exist (the oldest go first). Queued and running
// records are bounded by the job queue. Every method is thread-safe; the
// worker thread updates a record while HTTP threads read it.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace omni::server {

enum class JobStatus { queued, in_progress, completed, failed };
std::string_view to_string(JobStatus status);

struct VideoJob {
  std::string id;
  std::string model;
  JobStatus status = JobStatus::queued;
  int progress = 0;               // percent, 0..100
  std::int64_t created_at = 0;    // unix seconds
  std::int64_t completed_at = 0;  // unix seconds; 0 while unfinished
  std::string prompt;
  std::string size;  // "WxH"
  int num_frames = 0;
  int fps = 0;
  int steps = 0;
  std::uint64_t seed = 0;
  std::string error_code;                  // failed only
  std::string error_message;               // failed only
  std::shared_ptr<const std::string> mp4;  // completed only

  // OpenAI's video object: id, object "video", model, status, progress,
  // created_at, completed_at, expires_at, size, seconds (the clip's length,
  // num_frames / fps, as text), prompt, remixed_from_video_id, error; and
  // what was used: num_frames, fps, num_inference_steps, seed.
  nlohmann::json to_json(std::int64_t ttl_seconds) const;
};

class VideoJobStore {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // ttl: how long a finished record is kept; max_finished: how many.
  VideoJobStore(std::chrono::seconds ttl, std::size_t max_finished, Clock clock = {});

  // Stores a queued record and returns its new id ("video_" + 32 hex digits).
  std::string create(VideoJob job);
  std::optional<VideoJob> get(const std::string& id);
  // Newest first.
  std::vector<VideoJob> list();
  // Removes a record whatever its state; false when unknown.
  bool erase(const std::string& id);

  // Transitions, from the worker. Each returns false when the record is gone
  // (deleted meanwhile): the worker then abandons the job.
  bool start(const std::string& id);
  bool set_progress(const std::string& id, int percent);
  bool complete(const std::string& id, std::string mp4);
  bool fail(const std::string& id, std::string code, std::string message);

  std::size_t size();
  std::int64_t ttl_seconds() const { return ttl_.count(); }

  // Note [Jobs finished while draining]
  // A job that finishes while the server drains on SIGTERM would be lost
  // when the process exits right after: its client polls, sees "completed"
  // and finds the server gone before it downloads. So the drain (server.cpp)
  // calls begin_drain, and once the queue is idle it keeps serving while
  // awaiting_fetch() > 0, until --shutdown-timeout's deadline. A record is
  // fetched when its content was served (completed) or its error was
  // (failed: GET /v1/videos/{id} or its /content); deleting or evicting it
  // counts too. Records that finished before the drain are not waited for:
  // their clients had the chance.
  void begin_drain();
  void mark_fetched(const std::string& id);
  // Records that finished since begin_drain and are not fetched yet.
  std::size_t awaiting_fetch();

 private:
  struct Entry {
    VideoJob job;
    std::uint64_t sequence = 0;  // creation order
    std::chrono::steady_clock::time_point finished{};
    bool fetched = false;
  };
  void evict_locked();
  std::string new_id_locked();

  const std::chrono::seconds ttl_;
  const std::size_t max_finished_;
  Clock clock_;
  std::mutex mutex_;
  std::map<std::string, Entry> jobs_;
  std::uint64_t next_sequence_ = 0;
  std::optional<std::chrono::steady_clock::time_point> drain_started_;
  std::mt19937_64 rng_;
};

}  // namespace omni::server
