// The operator's endpoints, behind auth.adminToken (not an owner's token): the running
// sandboxes (`sandboxd ps`) and stopping one (`sandboxd stop`), files kept.
//   GET  /admin/sandboxes
//   POST /admin/sandboxes/{container}/stop[?owner=OWNER]
//   POST /admin/drain   (the Kubernetes preStop: stop every sandbox, release every lease)

#include <boost/json.hpp>

#include "api/routes.h"
#include "server/auth.h"

namespace sandboxd::api {
namespace {

// Compares digests, so a wrong token takes as long as a right one.
Result<void> check_admin(const ApiContext& api, const RequestContext& ctx) {
  const std::string admin_token = api.config()->admin_token;
  if (admin_token.empty())
    return ApiError::permission("The admin endpoints are off: set auth.adminToken to use them");
  std::string_view presented = ctx.header_value(http::field::authorization);
  if (presented.starts_with("Bearer ")) presented.remove_prefix(7);
  else presented = ctx.header_value("x-api-key");
  if (presented.empty() || server::sha256_hex(presented) != server::sha256_hex(admin_token))
    return ApiError::authentication("An admin token is required");
  return {};
}

asio::awaitable<Result<Response>> list_sandboxes(ApiContext& api, RequestContext& ctx) {
  if (auto ok = check_admin(api, ctx); !ok) co_return ok.error();
  boost::json::array data;
  // (Not `for (… : co_await …)`: GCC 12 mishandles the temporary of a co_await there.)
  const std::vector<SandboxStatus> statuses = co_await api.containers.sandboxes();
  for (const auto& s : statuses)
    data.push_back(boost::json::object{{"container", s.container},
                                       {"owner", s.owner},
                                       {"pid", s.pid},
                                       {"age_seconds", s.age_seconds},
                                       {"memory_bytes", s.memory_bytes},
                                       {"executing", s.executing},
                                       {"last_used_at", ContainerService::format_time(s.last_used_at)}});
  co_return json_ok(boost::json::object{{"data", data}, {"prestarted", api.containers.prestarted_ready()}});
}

asio::awaitable<Result<Response>> stop_sandbox(ApiContext& api, RequestContext& ctx) {
  if (auto ok = check_admin(api, ctx); !ok) co_return ok.error();
  const std::string id = ctx.params["container"];
  auto owner = ctx.query_value("owner");
  std::vector<std::shared_ptr<Container>> matches;
  for (auto& container : api.containers.find_open_any_owner(id))
    if (!owner || container->owner == *owner) matches.push_back(container);
  if (matches.empty()) co_return ApiError::not_found("No open container '" + id + "'");
  if (matches.size() > 1)
    co_return ApiError::invalid_request("Several owners have a container '" + id + "': name the owner");
  co_await api.containers.stop(matches.front(), "admin");
  co_return json_ok(boost::json::object{{"container", id}, {"owner", matches.front()->owner}, {"state", "stopped"}});
}

// What SIGTERM does before the exit, without it: running commands get
// cluster.shutdownGraceSec (less a margin for the flushes) to finish, every sandbox
// stops, every container is flushed and its lease released; new containers are refused.
asio::awaitable<Result<Response>> drain(ApiContext& api, RequestContext& ctx) {
  if (auto ok = check_admin(api, ctx); !ok) co_return ok.error();
  const int grace = api.config()->cluster_shutdown_grace_sec;
  auto outcome = co_await api.containers.drain(std::chrono::seconds(std::max(1, grace * 2 / 3)));
  co_return json_ok(boost::json::object{{"drained", true}, {"released", outcome.released}, {"kept", outcome.kept}});
}

}  // namespace

void register_admin_routes(server::HttpServer& http, ApiContext& api) {
  http.route(http::verb::get, "/admin/sandboxes", "admin.sandboxes", with_api(api, list_sandboxes),
             {.authenticated = false});
  http.route(http::verb::post, "/admin/sandboxes/{container}/stop", "admin.stop", with_api(api, stop_sandbox),
             {.authenticated = false});
  http.route(http::verb::post, "/admin/drain", "admin.drain", with_api(api, drain), {.authenticated = false});
}

}  // namespace sandboxd::api
