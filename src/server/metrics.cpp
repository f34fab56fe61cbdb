#include "omni/server/metrics.h"

#include <algorithm>
#include <charconv>
#include <sstream>

namespace omni::server {

OffloadFigures OffloadFigures::from_report(const offload::OffloadReport& report) {
  OffloadFigures f;
  f.device = report.device;
  f.strategy = report.strategy;
  f.stand_in = report.stand_in;
  f.peak_resident_bytes = report.peak_resident_bytes;
  f.planned_peak_bytes = report.planned_peak_bytes;
  f.pinned_host_bytes = report.pinned_host_bytes;
  f.pageable_host_bytes = report.pageable_host_bytes;
  // Host→device totals come from the components' counters (the report lists
  // only the latest request's transfers); device→host from the transfers,
  // which model-level offload never makes.
  for (const auto& c : report.components) {
    f.components[c.name] = {std::string(offload::to_string(c.role)), c.bytes};
    auto& up = f.flows[{c.name, std::string(offload::to_string(offload::Direction::h2d))}];
    up.bytes = c.upload_bytes;
    up.seconds = c.upload_seconds;
    up.count = c.uploads;
    up.exposed_seconds = c.exposed_seconds;
    f.flows[{c.name, std::string(offload::to_string(offload::Direction::d2h))}];
  }
  for (const auto& t : report.transfers) {
    if (t.direction != offload::Direction::d2h) continue;
    auto& flow = f.flows[{t.component, std::string(offload::to_string(t.direction))}];
    flow.bytes += t.bytes;
    flow.seconds += t.seconds;
    ++flow.count;
  }
  return f;
}

void Metrics::observe_request(const std::string& endpoint, const std::string& method, int status,
                              double seconds) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, method, status}];
  auto& h = latency_[endpoint];
  const auto bucket = std::lower_bound(kBuckets.begin(), kBuckets.end(), seconds);
  if (bucket != kBuckets.end()) ++h.buckets[bucket - kBuckets.begin()];
  ++h.count;
  h.sum += seconds;
}

void Metrics::observe_generation(const std::string& kind, GenerationOutcome outcome,
                                 double seconds) {
  std::lock_guard lock(mutex_);
  auto& g = generations_[kind];
  switch (outcome) {
    case GenerationOutcome::ok:
      ++g.ok;
      break;
    case GenerationOutcome::error:
      ++g.error;
      break;
    case GenerationOutcome::cancelled:
      ++g.cancelled;
      break;
  }
  g.seconds += seconds;
}

void Metrics::publish_prompt_cache(const pipelines::PromptCacheStats& stats) {
  std::lock_guard lock(mutex_);
  prompt_cache_ = stats;
}

void Metrics::publish_offload(OffloadFigures figures) {
  std::lock_guard lock(mutex_);
  figures.peak_resident_bytes = std::max(figures.peak_resident_bytes, offload_.peak_resident_bytes);
  offload_ = std::move(figures);
}

std::uint64_t Metrics::requests(const std::string& endpoint, const std::string& method,
                                int status) const {
  std::lock_guard lock(mutex_);
  const auto it = requests_.find({endpoint, method, status});
  return it == requests_.end() ? 0 : it->second;
}

namespace {

// Label values escape backslash, double quote and newline.
std::string escape(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// The shortest text that reads back as the same double.
std::string number(double v) {
  char buf[64];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  return std::string(buf, end);
}

class Writer {
 public:
  void family(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  template <typename V>
  void sample(const std::string& name,
              const std::vector<std::pair<std::string, std::string>>& labels, V value) {
    out_ << name;
    if (!labels.empty()) {
      out_ << "{";
      for (std::size_t i = 0; i < labels.size(); ++i)
        out_ << (i ? "," : "") << labels[i].first << "=\"" << escape(labels[i].second) << "\"";
      out_ << "}";
    }
    if constexpr (std::is_floating_point_v<V>)
      out_ << " " << number(value) << "\n";
    else
      out_ << " " << value << "\n";
  }
  // A family of one unlabelled sample.
  template <typename V>
  void scalar(const char* name, const char* type, const char* help, V value) {
    family(name, type, help);
    sample(name, {}, value);
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

}  // namespace

std::string Metrics::render(const QueueGauges& queue) const {
  std::lock_guard lock(mutex_);
  Writer w;
  w.family("omni_http_requests_total", "counter", "HTTP requests by endpoint, method and status.");
  for (const auto& [key, count] : requests_) {
    const auto& [endpoint, method, status] = key;
    w.sample("omni_http_requests_total",
             {{"endpoint", endpoint}, {"method", method}, {"status", std::to_string(status)}},
             count);
  }
  w.family("omni_http_request_duration_seconds", "histogram",
           "HTTP request latency, from routing until the response is ready to send.");
  for (const auto& [endpoint, h] : latency_) {
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < kBuckets.size(); ++i) {
      cumulative += h.buckets[i];
      w.sample("omni_http_request_duration_seconds_bucket",
               {{"endpoint", endpoint}, {"le", number(kBuckets[i])}}, cumulative);
    }
    w.sample("omni_http_request_duration_seconds_bucket", {{"endpoint", endpoint}, {"le", "+Inf"}},
             h.count);
    w.sample("omni_http_request_duration_seconds_sum", {{"endpoint", endpoint}}, h.sum);
    w.sample("omni_http_request_duration_seconds_count", {{"endpoint", endpoint}}, h.count);
  }

  w.scalar("omni_queue_depth", "gauge",
           "Jobs waiting for the engine (not counting the running one).", queue.queued);
  w.scalar("omni_queue_capacity", "gauge", "Most jobs that may wait (--max-queue).",
           queue.capacity);
  w.scalar("omni_jobs_running", "gauge",
           "Jobs the engine is running (more than 1 while a batch runs).", queue.running);
  w.scalar("omni_video_jobs", "gauge", "Video job records held (queued, running and finished).",
           queue.video_jobs);
  w.scalar("omni_http_connections_open", "gauge", "HTTP connections being served.",
           queue.connections_open);
  w.scalar("omni_http_connections_max", "gauge",
           "Most HTTP connections served at once (--max-connections).", queue.connections_max);
  w.scalar("omni_http_connections_refused_total", "counter",
           "HTTP connections answered 503 because --max-connections were open.",
           queue.connections_refused);

  w.scalar("omni_prompt_cache_hits_total", "counter",
           "Prompt encodings taken from the prompt cache (the text encoder did not run).",
           prompt_cache_.hits);
  w.scalar("omni_prompt_cache_misses_total", "counter",
           "Prompt encodings the text encoder ran (not in the prompt cache).",
           prompt_cache_.misses);
  w.scalar("omni_prompt_cache_bytes", "gauge", "Bytes the prompt cache holds.",
           prompt_cache_.bytes);
  w.scalar("omni_prompt_cache_capacity_bytes", "gauge",
           "The prompt cache's bound (--prompt-cache).", prompt_cache_.capacity_bytes);

  w.family("omni_generations_total", "counter", "Generations run by the engine, by outcome.");
  for (const auto& [kind, g] : generations_) {
    w.sample("omni_generations_total", {{"kind", kind}, {"outcome", "ok"}}, g.ok);
    w.sample("omni_generations_total", {{"kind", kind}, {"outcome", "error"}}, g.error);
    w.sample("omni_generations_total", {{"kind", kind}, {"outcome", "cancelled"}}, g.cancelled);
  }
  w.family("omni_generation_seconds_total", "counter", "Engine time spent generating.");
  for (const auto& [kind, g] : generations_)
    w.sample("omni_generation_seconds_total", {{"kind", kind}}, g.seconds);

  const auto& o = offload_;
  w.family("omni_device_info", "gauge",
           "The device and offload strategy (stand_in=\"true\": figures are simulated).");
  w.sample(
      "omni_device_info",
      {{"device", o.device}, {"strategy", o.strategy}, {"stand_in", o.stand_in ? "true" : "false"}},
      1);
  w.family("omni_offload_transfer_bytes_total", "counter",
           "Bytes moved per component and direction since load.");
  for (const auto& [key, flow] : o.flows)
    w.sample("omni_offload_transfer_bytes_total",
             {{"component", key.first}, {"direction", key.second}}, flow.bytes);
  w.family("omni_offload_transfer_seconds_total", "counter",
           "Seconds spent moving weights per component and direction since load.");
  for (const auto& [key, flow] : o.flows)
    w.sample("omni_offload_transfer_seconds_total",
             {{"component", key.first}, {"direction", key.second}}, flow.seconds);
  // Note [Exposed and hidden transfer]: the split of the seconds above.
  w.family("omni_offload_exposed_transfer_seconds_total", "counter",
           "Of the transfer seconds, those compute waited for, per component.");
  for (const auto& [key, flow] : o.flows)
    if (key.second == "h2d")
      w.sample("omni_offload_exposed_transfer_seconds_total", {{"component", key.first}},
               flow.exposed_seconds);
  w.family("omni_offload_hidden_transfer_seconds_total", "counter",
           "Of the transfer seconds, those that ran beside compute, per component.");
  for (const auto& [key, flow] : o.flows)
    if (key.second == "h2d")
      w.sample("omni_offload_hidden_transfer_seconds_total", {{"component", key.first}},
               std::max(0.0, flow.seconds - flow.exposed_seconds));
  w.family("omni_offload_transfers_total", "counter",
           "Transfers per component and direction since load.");
  for (const auto& [key, flow] : o.flows)
    w.sample("omni_offload_transfers_total", {{"component", key.first}, {"direction", key.second}},
             flow.count);
  // Note [Phase-batched scheduling]: a batch makes each component resident
  // once for all its requests; this is the figure that shows it.
  w.family("omni_component_uploads_total", "counter",
           "Times each component became resident on the device since load (its upload "
           "began; the VAE and resident modules once, at load).");
  for (const auto& [key, flow] : o.flows)
    if (key.second == offload::to_string(offload::Direction::h2d))
      w.sample("omni_component_uploads_total", {{"component", key.first}}, flow.count);
  w.family("omni_offload_component_bytes", "gauge", "Weight bytes of each component.");
  for (const auto& [name, rb] : o.components)
    w.sample("omni_offload_component_bytes", {{"component", name}, {"role", rb.first}}, rb.second);
  w.scalar("omni_offload_peak_resident_bytes", "gauge",
           "Largest device bytes held by resident weights during any request.",
           o.peak_resident_bytes);
  w.scalar("omni_offload_planned_peak_bytes", "gauge", "Planned peak resident bytes.",
           o.planned_peak_bytes);
  w.scalar("omni_offload_pinned_host_bytes", "gauge", "Page-locked host bytes holding weights.",
           o.pinned_host_bytes);
  w.scalar("omni_offload_pageable_host_bytes", "gauge",
           "Pageable host bytes holding weights (pinning refused).", o.pageable_host_bytes);
  return w.str();
}

}  // namespace omni::server
