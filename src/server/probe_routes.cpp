// GET /health, GET /metrics (no API key: probes and scrapers) and GET /v1/models.
#include "http_reply.h"
#include "http_server.h"
#include "router.h"
#include "service.h"

namespace omni::server {

void add_probe_routes(RouteTable& routes, Service& s) {
  routes.get(
      "/health", "/health", Access::open, [&s](const httplib::Request&, httplib::Response& res) {
        const auto q = s.queue->stats();
        // Draining on shutdown, the server takes no new work: a load balancer
        // reads the status, not the body, so it is 503 rather than 200.
        reply_json(
            res, q.stopping ? 503 : 200,
            {{"status", q.stopping ? "stopping" : "ok"},
             {"model", s.model_id},
             {"device", s.device_name},
             {"stand_in", s.stand_in},
             {"video", s.video_supported},
             {"queue", {{"queued", q.queued}, {"capacity", q.capacity}, {"running", q.running}}}});
      });

  routes.get(
      "/metrics", "/metrics", Access::open, [&s](const httplib::Request&, httplib::Response& res) {
        const auto q = s.queue->stats();
        QueueGauges gauges{q.queued, q.capacity, q.running_jobs, s.videos.size()};
        if (s.http != nullptr) {
          gauges.connections_open = s.http->open_connections();
          gauges.connections_max = s.options.max_connections;
          gauges.connections_refused = s.http->refused_connections();
        }
        res.status = 200;
        res.set_content(s.metrics.render(gauges), "text/plain; version=0.0.4; charset=utf-8");
      });

  routes.get("/v1/models", "/v1/models", Access::api_key,
             [&s](const httplib::Request&, httplib::Response& res) {
               reply_json(res, 200,
                          {{"object", "list"},
                           {"data", nlohmann::json::array({{{"id", s.model_id},
                                                            {"object", "model"},
                                                            {"created", s.started_at},
                                                            {"owned_by", "omni"}}})}});
             });
}

}  // namespace omni::server
