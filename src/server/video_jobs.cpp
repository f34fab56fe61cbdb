#include "omni/server/video_jobs.h"

#include <algorithm>
#include <cstdio>

#include "unix_time.h"

namespace omni::server {

std::string_view to_string(JobStatus status) {
  switch (status) {
    case JobStatus::queued:
      return "queued";
    case JobStatus::in_progress:
      return "in_progress";
    case JobStatus::completed:
      return "completed";
    case JobStatus::failed:
      return "failed";
  }
  return "failed";
}

nlohmann::json VideoJob::to_json(std::int64_t ttl_seconds) const {
  const bool finished = status == JobStatus::completed || status == JobStatus::failed;
  nlohmann::json j = {{"id", id},
                      {"object", "video"},
                      {"model", model},
                      {"status", to_string(status)},
                      {"progress", progress},
                      {"created_at", created_at},
                      {"size", size},
                      {"prompt", prompt},
                      {"remixed_from_video_id", nullptr},
                      {"num_frames", num_frames},
                      {"fps", fps},
                      {"num_inference_steps", steps},
                      {"seed", seed}};
  j["completed_at"] = finished ? nlohmann::json(completed_at) : nlohmann::json(nullptr);
  j["expires_at"] = finished ? nlohmann::json(completed_at + ttl_seconds) : nlohmann::json(nullptr);
  char seconds[32] = "0";
  if (fps > 0)
    std::snprintf(seconds, sizeof seconds, "%.6g", static_cast<double>(num_frames) / fps);
  j["seconds"] = seconds;
  j["error"] = status == JobStatus::failed
                   ? nlohmann::json({{"code", error_code}, {"message", error_message}})
                   : nlohmann::json(nullptr);
  return j;
}

VideoJobStore::VideoJobStore(std::chrono::seconds ttl, std::size_t max_finished, Clock clock)
    : ttl_(ttl),
      max_finished_(max_finished),
      clock_(clock ? std::move(clock) : Clock([] { return std::chrono::steady_clock::now(); })),
      rng_(std::random_device{}()) {}

std::string VideoJobStore::new_id_locked() {
  for (;;) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "video_%016llx%016llx", static_cast<unsigned long long>(rng_()),
                  static_cast<unsigned long long>(rng_()));
    if (!jobs_.count(buf)) return buf;
  }
}

void VideoJobStore::evict_locked() {
  const auto now = clock_();
  std::vector<std::map<std::string, Entry>::iterator> finished;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const auto s = it->second.job.status;
    if (s == JobStatus::completed || s == JobStatus::failed) {
      if (now - it->second.finished >= ttl_) {
        it = jobs_.erase(it);
        continue;
      }
      finished.push_back(it);
    }
    ++it;
  }
  if (finished.size() <= max_finished_) return;
  std::sort(finished.begin(), finished.end(), [](const auto& a, const auto& b) {
    return a->second.finished != b->second.finished ? a->second.finished < b->second.finished
                                                    : a->second.sequence < b->second.sequence;
  });
  const std::size_t excess = finished.size() - max_finished_;
  for (std::size_t i = 0; i < excess; ++i) jobs_.erase(finished[i]);
}

std::string VideoJobStore::create(VideoJob job) {
  std::lock_guard lock(mutex_);
  evict_locked();
  job.id = new_id_locked();
  job.status = JobStatus::queued;
  job.progress = 0;
  job.created_at = unix_now();
  const std::string id = job.id;
  jobs_.emplace(id, Entry{std::move(job), next_sequence_++, {}});
  return id;
}

std::optional<VideoJob> VideoJobStore::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  evict_locked();
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  return it->second.job;
}

std::vector<VideoJob> VideoJobStore::list() {
  std::lock_guard lock(mutex_);
  evict_locked();
  std::vector<const Entry*> entries;
  for (const auto& [id, e] : jobs_) entries.push_back(&e);
  std::sort(entries.begin(), entries.end(),
            [](const Entry* a, const Entry* b) { return a->sequence > b->sequence; });
  std::vector<VideoJob> out;
  for (const Entry* e : entries) {
    out.push_back(e->job);
    out.back().mp4.reset();  // listings never carry content
  }
  return out;
}

bool VideoJobStore::erase(const std::string& id) {
  std::lock_guard lock(mutex_);
  return jobs_.erase(id) > 0;
}

bool VideoJobStore::start(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return false;
  it->second.job.status = JobStatus::in_progress;
  return true;
}

bool VideoJobStore::set_progress(const std::string& id, int percent) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return false;
  it->second.job.progress = std::clamp(percent, 0, 100);
  return true;
}

bool VideoJobStore::complete(const std::string& id, std::string mp4) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return false;
  auto& e = it->second;
  e.job.status = JobStatus::completed;
  e.job.progress = 100;
  e.job.completed_at = unix_now();
  e.job.mp4 = std::make_shared<const std::string>(std::move(mp4));
  e.finished = clock_();
  evict_locked();
  return true;
}

bool VideoJobStore::fail(const std::string& id, std::string code, std::string message) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return false;
  auto& e = it->second;
  e.job.status = JobStatus::failed;
  e.job.completed_at = unix_now();
  e.job.error_code = std::move(code);
  e.job.error_message = std::move(message);
  e.finished = clock_();
  evict_locked();
  return true;
}

void VideoJobStore::begin_drain() {
  std::lock_guard lock(mutex_);
  if (!drain_started_) drain_started_ = clock_();
}

void VideoJobStore::mark_fetched(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it != jobs_.end()) it->second.fetched = true;
}

std::size_t VideoJobStore::awaiting_fetch() {
  std::lock_guard lock(mutex_);
  if (!drain_started_) return 0;
  evict_locked();
  return static_cast<std::size_t>(std::count_if(jobs_.begin(), jobs_.end(), [&](const auto& kv) {
    const auto& e = kv.second;
    const bool finished = e.job.status == JobStatus::completed || e.job.status == JobStatus::failed;
    return finished && !e.fetched && e.finished >= *drain_started_;
  }));
}

std::size_t VideoJobStore::size() {
  std::lock_guard lock(mutex_);
  evict_locked();
  return jobs_.size();
}

}  // namespace omni::server
