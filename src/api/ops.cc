// Operations endpoints (SPEC §3.5): liveness, answered from memory.

#include <boost/json.hpp>

#include "api/routes.h"

namespace sandboxd::api {

void register_ops_routes(server::HttpServer& http, ApiContext& api) {
  http.route(
      server::http::verb::get, "/health", "ops.health",
      [&api](server::RequestContext&) -> asio::awaitable<server::Result<server::Response>> {
        co_return json_ok(boost::json::object{{"status", "ok"},
                                              {"sandboxes_running", api.containers.running_sandboxes()}});
      },
      {.authenticated = false});
}

}  // namespace sandboxd::api
