// Operations endpoints (/health, /ready, /metrics): liveness from memory, readiness from a real
// sandbox start (cached for 2 s), and the metrics in Prometheus text format.

#include <boost/json.hpp>
#include <mutex>

#include "api/routes.h"
#include "cluster/container_durability.h"
#include "kubernetes/peer_watch.h"
#include "ops/metrics.h"
#include "ops/owner_admission.h"
#include "service/store_call.h"

namespace sandboxd::api {
namespace {

constexpr auto kReadyCache = std::chrono::seconds(2);

struct ReadyCache {
  std::mutex mutex;
  std::chrono::steady_clock::time_point checked_at{};
  bool checked = false;
  std::string problem;
  // The last answer, the peers' part included (sandboxd_ready): -1 before the first.
  int last_ready = -1;
};

}  // namespace

void install_ops_routes(server::HttpServer& http, ApiContext& api) {
  http.route(
      http::verb::get, "/health", "ops.health",
      [&api](server::RequestContext&) -> asio::awaitable<Result<Response>> {
        boost::json::object body{{"status", "ok"}, {"sandboxes_running", api.containers.running_sandboxes()}};
        const auto check = api.health.status();
        boost::json::array problems;
        for (const auto& problem : check.problems) problems.emplace_back(problem);
        body["check"] = boost::json::object{{"seconds_since_run", check.seconds_since_run},
                                            {"event_loop_lag_seconds", check.event_loop_lag},
                                            {"data_free_bytes", check.data_free_bytes},
                                            {"problems", std::move(problems)}};
        if (check.running) co_return json_ok(body);
        body["status"] = "unavailable";
        body["reason"] = "the background health check has not run for " +
                         std::to_string(static_cast<int>(check.seconds_since_run)) + " s";
        co_return json_ok(body, http::status::service_unavailable);
      },
      {.authenticated = false});

  auto cache = std::make_shared<ReadyCache>();
  http.route(http::verb::get, "/ready", "ops.ready",
             [&api, cache](server::RequestContext&) -> asio::awaitable<Result<Response>> {
               std::string problem;
               bool fresh = false;
               {
                 std::lock_guard lock(cache->mutex);
                 if (cache->checked && std::chrono::steady_clock::now() - cache->checked_at < kReadyCache) {
                   problem = cache->problem;
                   fresh = true;
                 }
               }
               if (!fresh) {
                 problem = co_await api.containers.execution().probe();
                 // With storage.backend s3, no upload can be acknowledged while the bucket is away.
                 if (problem.empty() && api.durability) problem = co_await api.durability->bucket_problem();
                 std::lock_guard lock(cache->mutex);
                 cache->checked = true;
                 cache->checked_at = std::chrono::steady_clock::now();
                 cache->problem = problem;
               }
               // The NetworkPolicy peers: not ready before their first list (a sandbox would reach
               // none of them); after it, a lost watch keeps the last set, which /ready reports.
               std::optional<boost::json::object> peers;
               if (api.peer_watch) {
                 const auto status = api.peer_watch->status();
                 peers = boost::json::object{{"current", status.current},
                                             {"synced", status.synced},
                                             {"names", status.names},
                                             {"addresses", status.addresses}};
                 if (!status.current) {
                   (*peers)["reason"] = status.problem;
                   (*peers)["seconds_not_current"] = status.seconds_not_current;
                 }
                 if (problem.empty() && !status.synced)
                   problem = "the network peers have not been listed from the Kubernetes API yet: " +
                             status.problem;
               }
               {
                 std::lock_guard lock(cache->mutex);
                 cache->last_ready = problem.empty() ? 1 : 0;
               }
               boost::json::object body{{"status", problem.empty() ? "ready" : "not_ready"}};
               if (!problem.empty()) body["reason"] = problem;
               if (peers) body["network_peers"] = std::move(*peers);
               if (problem.empty()) co_return json_ok(body);
               auto res = json_ok(body, http::status::service_unavailable);
               res.set(http::field::retry_after, std::to_string(api.config()->capacity_retry_after_sec));
               co_return res;
             },
             {.authenticated = false});

  http.route(http::verb::get, "/metrics", "ops.metrics",
             [&api, &http, cache](server::RequestContext&) -> asio::awaitable<Result<Response>> {
               ops::Metrics::Gauges gauges;
               {
                 std::lock_guard lock(cache->mutex);
                 gauges.ready = cache->last_ready;
               }
               const auto& admission = api.containers.admission();
               gauges.executions_active = admission.active();
               gauges.executions_queued = admission.queued();
               gauges.executions_limit = admission.limit();
               gauges.sandboxes_running = api.containers.running_sandboxes();
               auto total = [&api] { return api.containers.metadata().total_bytes(); };
               gauges.files_bytes = co_await store_call(api, std::move(total));
               const auto settings = api.containers.settings();
               gauges.executions_owner_share = ops::owner_execution_cap(
                   settings->max_concurrent_executions_per_owner, settings->max_concurrent_executions);
               gauges.running_sandboxes_per_owner = settings->running_sandboxes_per_owner;
               gauges.containers_per_owner = settings->containers_per_owner;
               gauges.stored_bytes_per_owner = settings->stored_bytes_per_owner;
               gauges.threads_per_owner = settings->threads_per_owner;
               gauges.skills_per_owner = settings->skills_per_owner;
               gauges.skill_versions_per_owner = settings->skill_versions_per_owner;
               if (api.peer_watch) {
                 const auto status = api.peer_watch->status();
                 gauges.network_peers = true;
                 gauges.network_peers_current = status.current;
                 gauges.network_peers_synced = status.synced;
                 gauges.network_peers_seconds_not_current = status.seconds_not_current;
                 gauges.network_peers_names = status.names;
                 gauges.network_peers_addresses = status.addresses;
                 gauges.network_peers_relists = status.relists;
                 gauges.network_peers_reconnects = status.reconnects;
                 gauges.network_peers_updates = status.updates;
               }
               gauges.connections_open = http.connections().open();
               gauges.connections_unauthenticated = http.connections().unauthenticated();
               const auto refused = http.connections().refusals();
               gauges.connections_refused = {{"total", refused.total},
                                             {"address", refused.address},
                                             {"address_unauthenticated", refused.address_unauthenticated},
                                             {"owner", refused.owner}};
               if (api.durability) {
                 gauges.storage_bucket = true;
                 gauges.storage_pending_flush_bytes = api.durability->pending_flush_bytes();
               }
               server::StringResponse res{http::status::ok, 11};
               res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
               res.body() = ops::metrics().render(gauges);
               co_return res;
             },
             {.authenticated = false});
}

}  // namespace sandboxd::api
