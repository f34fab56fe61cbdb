// POST /v1/images/generations.
#include "engine_jobs.h"
#include "generation.h"
#include "http_reply.h"
#include "omni/io/image_writer.h"
#include "omni/random_seed.h"
#include "request_body.h"
#include "router.h"
#include "service.h"
#include "unix_time.h"

namespace omni::server {

void add_image_routes(RouteTable& routes, Service& s) {
  routes.post(
      "/v1/images/generations", "/v1/images/generations", Access::api_key,
      [&s](const httplib::Request& req, httplib::Response& res,
           const httplib::ContentReader& reader) {
        const auto body = read_request_body(req, reader, s.options.max_body_bytes);
        auto parsed =
            body.is_form ? parse_image_request(body.fields) : parse_image_request(body.json);
        check_model(s, parsed.model);
        if (parsed.random_seed) parsed.request.seed = random_seed();
        parsed.request = s.pipeline->resolve(parsed.request);
        check_limits(parsed.request, s.limits, parsed.n);
        // One image joins other requests of its shape (Note [Phase-batched
        // scheduling]); n images batch among themselves.
        const auto pngs =
            parsed.n == 1
                ? std::vector<std::string>{run_generation_on_engine<std::string>(
                      s, "image", parsed.request,
                      [](const GenerateResult& r) { return io::encode_png(r.frames[0]); })}
                : run_on_engine<std::vector<std::string>>(
                      s, "image",
                      [parsed, max_batch = s.options.max_batch](
                          Omni& engine, const pipelines::ProgressFn& progress) {
                        return generate_images(engine, parsed, progress, max_batch);
                      });
        nlohmann::json data = nlohmann::json::array();
        for (std::size_t i = 0; i < pngs.size(); ++i)
          data.push_back({{"b64_json", base64_encode(pngs[i])}, {"seed", parsed.request.seed + i}});
        reply_json(res, 200, {{"created", unix_now()}, {"data", std::move(data)}});
      });
}

}  // namespace omni::server
