#include "route_table.h"

#include "http_reply.h"
#include "http_server.h"
#include "request_body.h"

namespace omni::server {

RouteTable::RouteTable(httplib::Server& http, const std::string& api_key)
    : http_(http), api_key_(api_key) {}

void RouteTable::record(const std::string& method, const std::string& pattern,
                        const std::string& label, bool reads_body, Access access) {
  routes_.push_back({method, std::regex(pattern), label, reads_body, access});
}

void RouteTable::get(const std::string& pattern, const std::string& label, Access access,
                     Handler handler) {
  record("GET", pattern, label, false, access);
  http_.Get(pattern, [this, access, handler = std::move(handler)](const httplib::Request& req,
                                                                  httplib::Response& res) {
    answer_guarded(res, [&] {
      if (access == Access::api_key) check_api_key(api_key_, req);
      handler(req, res);
    });
  });
}

void RouteTable::post(const std::string& pattern, const std::string& label, Access access,
                      BodyHandler handler) {
  record("POST", pattern, label, true, access);
  http_.Post(pattern, [this, access, handler = std::move(handler)](
                          const httplib::Request& req, httplib::Response& res,
                          const httplib::ContentReader& reader) {
    // A body the handler never read (it failed first: a wrong key, a 501)
    // must not be parsed as the next request on this connection.
    bool read = false;
    const httplib::ContentReader tracked(
        [&](httplib::ContentReceiver receiver) {
          read = true;
          return reader(std::move(receiver));
        },
        [&](httplib::MultipartContentHeader header, httplib::ContentReceiver receiver) {
          read = true;
          return reader(std::move(header), std::move(receiver));
        });
    answer_guarded(res, [&] {
      if (access == Access::api_key) check_api_key(api_key_, req);
      handler(req, res, tracked);
    });
    if (!read && has_body(req))
      if (auto* connection = Connection::current()) connection->close_after_response();
  });
}

void RouteTable::del(const std::string& pattern, const std::string& label, Access access,
                     Handler handler) {
  record("DELETE", pattern, label, false, access);
  http_.Delete(pattern, [this, access, handler = std::move(handler)](
                            const httplib::Request& req, httplib::Response& res,
                            const httplib::ContentReader&) {
    answer_guarded(res, [&] {
      if (access == Access::api_key) check_api_key(api_key_, req);
      handler(req, res);
    });
  });
}

RouteTable::Match RouteTable::match(const std::string& method, const std::string& path) const {
  const std::string wanted = method == "HEAD" ? "GET" : method;
  Match m;
  m.label = "unmatched";
  for (const auto& r : routes_) {
    if (!std::regex_match(path, r.pattern)) continue;
    if (!m.path_known) m.label = r.label;
    m.path_known = true;
    if (r.method == wanted) {
      m.method_allowed = true;
      m.reads_body = r.reads_body;
      m.needs_key = r.access == Access::api_key;
      m.label = r.label;
    }
    if (m.allow.find(r.method) == std::string::npos)
      m.allow += (m.allow.empty() ? "" : ", ") + r.method;
  }
  return m;
}

}  // namespace omni::server
