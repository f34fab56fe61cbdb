// HTTP routing: every route of the server, its error translation (Note [HTTP
// error translation]), authentication, the access log and request metrics
// (private to src/server).
#pragma once

namespace httplib {
class Server;
}

namespace omni::server {

struct Service;

// Installs the routes, error handler and logger on `http`. `service` must
// outlive every request `http` serves.
void install_routes(httplib::Server& http, Service& service);

}  // namespace omni::server
