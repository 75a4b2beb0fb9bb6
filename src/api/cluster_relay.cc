#include "api/cluster_relay.h"

#include <spdlog/spdlog.h>
#include <boost/json.hpp>

#include "base/blocking.h"
#include "server/http_relay.h"
#include "service/store_call.h"
#include "store/lease_store.h"

namespace sandboxd::api {
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
  // (The routing's own refusals, a takeover's pace or a holder out of reach, are
  // answered in the route's own error shape by the server: server::RouteOptions.)
  http.set_interceptor(
      [&api, &leases, pool](RequestContext& ctx,
                            const server::Handler& handler) -> asio::awaitable<Result<Response>> {
        co_return co_await route_request(api, leases, pool, ctx, handler);
      });
}

namespace {
asio::awaitable<Result<Response>> route_request(ApiContext& api, cluster::ContainerLeases& leases,
                                                const std::shared_ptr<server::UpstreamPool>& pool,
                                                RequestContext& ctx, const server::Handler& handler) {
  const auto& settings = leases.settings();
  // A sandbox's own requests come from this replica (it runs the sandbox): served here.
  std::string container_id;
  if (!ctx.origin && ctx.container_scope) container_id = co_await ctx.container_scope->container_of(ctx);
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
