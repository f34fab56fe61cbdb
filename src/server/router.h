// HTTP routing (private to src/server): the route table, the checks every
// request passes before its handler (Note [Request framing]), the access log,
// request metrics, and the routes themselves in three groups.
#pragma once

#include <memory>
#include <string>

#include "route_table.h"

namespace omni::server {

struct Service;

// Installs the routes, checks, error handler and logger on `http`. The table
// it returns, and `service`, must outlive every request `http` serves.
std::unique_ptr<RouteTable> install_routes(httplib::Server& http, Service& service);

// The route groups (probe_routes.cpp, image_routes.cpp, video_routes.cpp).
void add_probe_routes(RouteTable& routes, Service& s);
void add_image_routes(RouteTable& routes, Service& s);
void add_video_routes(RouteTable& routes, Service& s);

// ApiError not_found unless `model` is empty or names the served model.
void check_model(const Service& s, const std::string& model);

}  // namespace omni::server
