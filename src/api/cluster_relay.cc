#include "api/cluster_relay.h"

#include <spdlog/spdlog.h>
#include <boost/json.hpp>

#include "api/e2b_common.h"
#include "api/mcp_tools.h"
#include "base/blocking.h"
#include "server/http_relay.h"
#include "service/store_call.h"
#include "store/lease_store.h"

namespace sandboxd::api {
namespace {

constexpr size_t kMessagesBodyLimit = 32u << 20;  // as messages.cc reads it
constexpr size_t kCreateBodyLimit = 64u << 10;    // as containers.cc reads it

bool route_in(std::string_view route, std::initializer_list<std::string_view> names) {
  for (auto name : names)
    if (route == name) return true;
  return false;
}

// The body's `container`: a string, or an object with a string `id`; the default
// container when there is none. "" when the body is not a JSON object (the handler
// then answers the 400, wherever it runs).
std::string container_of_messages_body(std::string_view body) {
  boost::system::error_code ec;
  auto value = boost::json::parse(body, ec);
  if (ec || !value.is_object()) return "";
  const auto* container = value.as_object().if_contains("container");
  if (!container || container->is_null()) return ContainerService::default_id();
  if (container->is_object()) container = container->as_object().if_contains("id");
  if (!container || !container->is_string()) return "";
  return std::string(container->as_string());
}

// The body's `id` when it is a string ("" otherwise: a new id, or the handler's 400).
std::string container_of_create_body(std::string_view body) {
  boost::system::error_code ec;
  auto value = boost::json::parse(body, ec);
  if (ec || !value.is_object()) return "";
  const auto* id = value.as_object().if_contains("id");
  return id && id->is_string() ? std::string(id->as_string()) : std::string();
}

}  // namespace

asio::awaitable<std::string> container_of_request(RequestContext& ctx) {
  const std::string& route = ctx.route_name;
  if (route_in(route, {"containers.get", "containers.delete", "containers.stop", "containers.tool"}))
    co_return ctx.params["id"];
  if (route.starts_with("files.")) co_return ctx.query_value("scope_id").value_or("");
  // E2B: a sandbox is a container of the same id; the calls to a sandbox name it in a
  // header (the SDKs' E2B_SANDBOX_URL), the control plane's in the path. Those that work
  // on the container run on its holder; the others (get, list, timeout) only on records.
  if (route.starts_with("e2b.envd.") || route == "e2b.execute" || route.starts_with("e2b.contexts.") ||
      route == "e2b.ports")
    co_return std::string(ctx.header_value("E2b-Sandbox-Id"));
  if (route_in(route, {"e2b.sandboxes.kill", "e2b.sandboxes.pause", "e2b.sandboxes.connect",
                       "e2b.sandboxes.metrics"}))
    co_return ctx.params["id"];
  if (route_in(route, {"threads.upload_file", "threads.put_file", "threads.download_file", "threads.message",
                       "threads.delete", "threads.artifacts"}))
    co_return ctx.params["thread_id"];
  if (route == "containers.create") {  // an id of the client's may be a container another replica holds
    auto body = co_await ctx.read_body(kCreateBodyLimit);
    if (!body) co_return "";  // the handler's own read answers the error
    std::string container = container_of_create_body(*body);
    ctx.keep_body(std::move(*body));
    co_return container;
  }
  if (route == "mcp.post") {
    // MCP's stateless revision (2026-07-28) names its method in a header: a tool call or
    // a read for a container runs on the container's holder like the HTTP API's calls.
    // The earlier revisions' sessions live on the replica that made them: served there.
    // A task (tasks/get, tasks/cancel, tasks/update) is kept where its command runs, on
    // its container's holder; its id names the container.
    const std::string method(ctx.header_value("Mcp-Method"));
    // A subscriptions/listen watches its container's files where the commands write them.
    if (method != "tools/call" && method != "resources/read" && method != "subscriptions/listen" &&
        !method.starts_with("tasks/"))
      co_return "";
    if (!ctx.header_value("Mcp-Session-Id").empty() &&
        ctx.header_value("MCP-Protocol-Version") != "2026-07-28")
      co_return "";
    auto body = co_await ctx.read_body(kMessagesBodyLimit);
    if (!body) co_return "";  // the handler's own read answers the error
    std::string container;
    boost::system::error_code ec;
    auto value = boost::json::parse(*body, ec);
    if (!ec && value.is_object())
      if (auto* params = value.as_object().if_contains("params"); params && params->is_object())
        container = mcp_container_of_request(method, params->as_object());
    ctx.keep_body(std::move(*body));
    co_return container;
  }
  if (route == "messages.create") {
    auto body = co_await ctx.read_body(kMessagesBodyLimit);
    if (!body) co_return "";  // the handler's own read answers the error
    std::string container = container_of_messages_body(*body);
    ctx.keep_body(std::move(*body));
    co_return container;
  }
  co_return "";
}

asio::awaitable<std::map<std::string, boost::json::object>> describe_held_elsewhere(
    ApiContext& api, RequestContext& ctx, const std::vector<store::ContainerRecord>& records) {
  std::map<std::string, boost::json::object> described;
  cluster::ContainerLeases* leases = api.leases;
  if (!leases || records.empty()) co_return described;
  // The leases (the database) off the I/O thread; the holders are asked one by one.
  auto look_up = [leases, &records] {
    std::vector<std::pair<const store::ContainerRecord*, cluster::ContainerLeases::Holder>> held;
    try {
      for (const auto& record : records)
        if (auto holder = leases->holder_of(record.storage); holder.elsewhere)
          held.emplace_back(&record, holder);
    } catch (const store::db::TimeoutError& e) {
      // The leases table is locked by another session: the rest are listed from the
      // index (one wait of lockTimeoutSec, not one a container).
      spdlog::warn("the containers' holders are not known (listed from the index): {}", e.what());
    }
    return held;
  };
  const auto held = co_await run_blocking(std::move(look_up));
  server::RelayOptions options;
  options.via = leases->settings().replica_id;
  options.retry_after_sec = leases->settings().retry_after_sec;
  options.answer_timeout = std::chrono::seconds(10);
  options.pool = api.replica_connections;
  for (const auto& [record, holder] : held) {
    auto target = server::parse_relay_target(holder.holder_url);
    if (!target) continue;
    auto answer = co_await server::fetch_from_replica(ctx, *target, "/api/gpt/v1/containers/" + record->id,
                                                      kDescribeOnlyHeader, options);
    if (!answer || answer->status != 200) {
      spdlog::warn("{}: replica {} did not describe container {} (it is listed from the index)",
                   ctx.request_id, holder.holder, record->id);
      continue;
    }
    boost::system::error_code ec;
    auto value = boost::json::parse(answer->body, ec);
    if (!ec && value.is_object() && value.as_object().if_contains("id") &&
        value.as_object().at("id") == boost::json::value(record->id))
      described[record->id] = std::move(value.as_object());
  }
  co_return described;
}

namespace {
// A request for a container: relayed to the replica that holds it, or served here (a
// takeover waiting for its turn first).
asio::awaitable<Result<Response>> route_request(ApiContext& api, cluster::ContainerLeases& leases,
                                                const std::shared_ptr<server::UpstreamPool>& pool,
                                                RequestContext& ctx, const server::Handler& handler);
}  // namespace

void install_cluster_routing(server::HttpServer& http, ApiContext& api, cluster::ContainerLeases& leases) {
  // Kept-alive connections to the other replicas, shared by every relayed request; an
  // idle one closes before a peer's server.headerTimeoutSec would close it.
  const auto header_timeout = std::chrono::seconds(api.config()->header_timeout_sec);
  server::UpstreamPool::Limits limits;
  limits.idle_timeout = std::min<std::chrono::milliseconds>(std::chrono::seconds(10), header_timeout * 2 / 3);
  auto pool = server::UpstreamPool::make(http.io_context().get_executor(), limits);
  api.replica_connections = pool;
  http.set_interceptor(
      [&api, &leases, pool](RequestContext& ctx,
                            const server::Handler& handler) -> asio::awaitable<Result<Response>> {
        Result<Response> result = co_await route_request(api, leases, pool, ctx, handler);
        // The routing's own refusals (a takeover's pace, a holder out of reach) in the
        // shape the route's clients read: E2B's SDKs raise their own errors only on theirs.
        if (!result)
          if (auto shaped = e2b_error_for_route(ctx.route_name, result.error())) co_return std::move(*shaped);
        co_return result;
      });
}

namespace {
asio::awaitable<Result<Response>> route_request(ApiContext& api, cluster::ContainerLeases& leases,
                                                const std::shared_ptr<server::UpstreamPool>& pool,
                                                RequestContext& ctx, const server::Handler& handler) {
  const auto& settings = leases.settings();
  // A sandbox's own requests come from this replica (it runs the sandbox): served here.
  std::string container_id;
  if (!ctx.origin) container_id = co_await container_of_request(ctx);
  if (!container_id.empty() && ContainerService::valid_id(container_id)) {
    // Two reads (the container, its lease) before the request is served or relayed; the
    // lease's from memory when this replica holds it (ContainerLeases::holder_of).
    struct Lookup {
      std::optional<cluster::ContainerLeases::Holder> holder;
      std::string timed_out;  // the database's refusal when it waited too long for a lock
    };
    auto lookup = [&api, &leases, &ctx, &container_id]() -> Lookup {
      try {
        auto record = api.containers.metadata().find_container(ctx.owner, container_id);
        if (!record) return {};
        return {leases.holder_of(record->storage), {}};
      } catch (const store::db::TimeoutError& e) {
        return {std::nullopt, e.what()};
      }
    };
    auto found = co_await store_call(api, std::move(lookup));
    if (!found.timed_out.empty()) {
      // The leases table (or the container's row) is locked by another session (a
      // migration, a VACUUM FULL, an operator's transaction): this request is refused,
      // to be retried; those for containers held here are served meanwhile.
      spdlog::warn("{}: the database did not answer in time: {}", ctx.request_id, found.timed_out);
      co_return ApiError::overloaded("The container's lease is held up in the database; try again shortly",
                                     settings.retry_after_sec);
    }
    if (auto& holder = found.holder) {
      // A container of a replica whose heartbeat ran out: served here once its turn
      // comes, so that a burst of them is taken over at the pace the database was sized
      // for while this replica's own requests go on (the wait holds no thread).
      if (holder->takeover && !co_await leases.takeover_turn())
        co_return ApiError::overloaded("This replica is taking over many containers; try again shortly",
                                       settings.retry_after_sec);
      if (holder->elsewhere) {
        // Relayed once at most: a relayed request that finds the container moved on
        // again is answered here, and the client's retry finds the new holder.
        if (!ctx.header_value(server::kRelayedByHeader).empty())
          co_return ApiError::overloaded("The container is moving between replicas; try again shortly",
                                         settings.retry_after_sec);
        auto target = server::parse_relay_target(holder->holder_url);
        if (!target) {
          spdlog::error("{}: replica {} advertises an unusable URL", ctx.request_id, holder->holder);
          co_return ApiError::overloaded(
              "The replica serving this container cannot be reached; try again shortly",
              settings.retry_after_sec);
        }
        server::RelayOptions options;
        options.via = settings.replica_id;
        options.retry_after_sec = settings.retry_after_sec;
        options.pool = pool;
        co_return co_await server::relay_request(ctx, *target, options);
      }
    }
  }
  try {
    co_return co_await handler(ctx);
  } catch (const store::FencedError& fenced) {
    // Another replica took the container over (or deleted it) while this one was
    // paused or cut off: nothing was written; the lease is forgotten so the retry is
    // relayed to the new holder (or finds the container gone).
    spdlog::warn("{}: a write met the fence", ctx.request_id);
    leases.fenced(fenced);
    co_return ApiError::overloaded("The container moved to another replica; try again",
                                   settings.retry_after_sec);
  } catch (const store::db::TimeoutError& e) {
    // A row this request needs is held by another session (bounded by the database's
    // lock and statement timeouts): this request alone is refused, to be retried.
    spdlog::warn("{}: the database did not answer in time: {}", ctx.request_id, e.what());
    co_return ApiError::overloaded("The container is busy in the database; try again shortly",
                                   settings.retry_after_sec);
  }
}
}  // namespace

}  // namespace sandboxd::api
