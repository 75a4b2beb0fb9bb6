// envd, E2B's agent inside each sandbox, as E2B's SDKs reach it with E2B_SANDBOX_URL set
// to http://HOST:PORT/e2b/sandbox (docs/e2b.md): the sandbox and the port are named by
// headers (api/e2b_common.h), the process and filesystem services are Connect RPC with
// the JSON codec (api/connect_rpc.h), and /files moves file bodies over plain HTTP.

#include <boost/json.hpp>

#include "api/e2b_common.h"

namespace sandboxd::api {
namespace {

// GET /health: 204 while the sandbox runs (or can run: it starts on the next call), 502
// once it is gone or paused, as E2B's proxy answers.
asio::awaitable<Result<Response>> health(ApiContext& api, RequestContext& ctx) {
  auto sandbox = co_await open_addressed_sandbox(api, ctx, kEnvdPort);
  if (!sandbox) co_return sandbox.error();
  co_return server::StringResponse{HttpStatus::no_content, 11};
}

}  // namespace

void register_e2b_envd_routes(server::HttpServer& http, ApiContext& api) {
  if (!api.e2b_sandboxes) return;
  const std::string base = "/e2b/sandbox";
  http.route(http::verb::get, base + "/health", "e2b.envd.health", e2b_route(api, health));
}

}  // namespace sandboxd::api
