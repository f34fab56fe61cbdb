// RouteTable: which routes exist (private to src/server). It registers each
// route's handler with httplib, guarded (http_reply.h: API key, error
// translation), and answers what httplib cannot: whether a path is known
// under another method (405 with Allow) and the metrics label of a request.
#pragma once

#include <httplib.h>

#include <functional>
#include <regex>
#include <string>
#include <vector>

namespace omni::server {

enum class Access { open, api_key };

class RouteTable {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  // A route with a body reads it through the reader (request_body.h).
  using BodyHandler = std::function<void(const httplib::Request&, httplib::Response&,
                                         const httplib::ContentReader&)>;

  // `api_key` is checked for Access::api_key routes; it must outlive the table.
  RouteTable(httplib::Server& http, const std::string& api_key);

  // `pattern` is a regex over the path; `label` its name in metrics ("/v1/videos/{id}").
  void get(const std::string& pattern, const std::string& label, Access access, Handler handler);
  void post(const std::string& pattern, const std::string& label, Access access,
            BodyHandler handler);
  // DELETE takes no body; it is registered so that httplib never reads one.
  void del(const std::string& pattern, const std::string& label, Access access, Handler handler);

  struct Match {
    bool path_known = false;      // some route has this path
    bool method_allowed = false;  // … under this method (HEAD counts as GET)
    bool reads_body = false;      // its handler reads a body (POST)
    bool needs_key = false;       // its handler checks the API key (Access::api_key)
    std::string allow;            // the methods it has: "GET, DELETE"
    std::string label;            // "unmatched" unless path_known
  };
  Match match(const std::string& method, const std::string& path) const;

 private:
  struct Route {
    std::string method;
    std::regex pattern;
    std::string label;
    bool reads_body = false;
    Access access = Access::open;
  };
  void record(const std::string& method, const std::string& pattern, const std::string& label,
              bool reads_body, Access access);

  httplib::Server& http_;
  const std::string& api_key_;
  std::vector<Route> routes_;
};

}  // namespace omni::server
