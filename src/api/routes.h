// Registers each API surface's routes on the HTTP server (one file per surface).
#pragma once

#include <boost/json.hpp>

#include "model/upstream_client.h"
#include "ops/health_check.h"
#include "server/http_server.h"
#include "server/upstream_pool.h"
#include "service/services.h"
#include "store/thread_store.h"

namespace sandboxd::kubernetes {
class PeerWatch;
}
namespace sandboxd::service {
class DirectoryWatches;
class ToolTasks;
}  // namespace sandboxd::service

namespace sandboxd::cluster {
class ContainerDurability;
class ContainerLeases;
}  // namespace sandboxd::cluster

namespace sandboxd::api {

namespace asio = boost::asio;
// The service's names every surface uses.
using service::Container;
using service::ContainerService;

// The server names every surface uses.
namespace http = server::http;
using server::RequestContext;
using server::Response;

// The services, and what only the HTTP surfaces need beside them: those every server
// has, then those its configuration may leave out (null then). (E2B's surfaces reach
// theirs through a context of their own that extends this one: e2b/api/surfaces.h.)
struct ApiContext : service::Services {
  const ops::HealthCheck& health;                      // behind /health
  service::DirectoryWatches& directory_watches;        // MCP's subscriptions, envd's WatchDir
  service::ToolTasks& tool_tasks;                      // MCP's tasks (api/mcp.cc)
  std::shared_ptr<model::UpstreamClient> upstream;     // the /messages model client: none configured
  cluster::ContainerDurability* durability = nullptr;  // storage.backend s3: the sessions bucket
  cluster::ContainerLeases* leases = nullptr;          // cluster mode: this replica's leases
  // Cluster mode: kept-alive connections to the other replicas (api/cluster_relay.h).
  std::shared_ptr<server::UpstreamPool> replica_connections;
  // NetworkPolicy peers configured: their watch (its status is in /ready and /metrics).
  const kubernetes::PeerWatch* peer_watch = nullptr;
};

void install_container_routes(server::HttpServer& http, ApiContext& api);
void install_file_routes(server::HttpServer& http, ApiContext& api);
void install_thread_routes(server::HttpServer& http, ApiContext& api);
void install_ops_routes(server::HttpServer& http, ApiContext& api);
void install_messages_routes(server::HttpServer& http, ApiContext& api);
void install_admin_routes(server::HttpServer& http, ApiContext& api);
void install_skill_routes(server::HttpServer& http, ApiContext& api);
void install_mcp_routes(server::HttpServer& http, ApiContext& api);  // api/mcp.cc

// A route handler from a function of (ApiContext&, RequestContext&).
template <typename Fn>
server::Handler with_api(ApiContext& api, Fn fn) {
  return [&api, fn](server::RequestContext& ctx) { return fn(api, ctx); };
}

// Shared by the surfaces: a JSON response from a value.
server::StringResponse json_ok(const boost::json::value& body, HttpStatus status = HttpStatus::ok);
// The `limit` query parameter of a listing: 1-1000, default 20.
Result<size_t> page_limit(const server::RequestContext& ctx);

// Parses a JSON object body; 400 with the parser's reason otherwise.
Result<boost::json::object> parse_json_object(std::string_view body);

// The container a JSON object body names, as `pick` reads it from the object ("" for
// none); a body that cannot be read (past `limit`) or is not a JSON object names none (the
// handler's own read answers the error, wherever it runs). The body is kept for the handler.
// (`pick` by value: the coroutine outlives the caller's expression.)
using ContainerPick = std::function<std::string(const boost::json::object&)>;
asio::awaitable<std::string> container_named_in_json_body(RequestContext& ctx, size_t limit,
                                                          ContainerPick pick);

}  // namespace sandboxd::api
