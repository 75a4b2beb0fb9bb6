// The operator's endpoints, behind auth.adminToken (not an owner's token): the running
// sandboxes (`sandboxd ps`) and stopping one (`sandboxd stop`), files kept.
//   GET  /admin/sandboxes
//   POST /admin/sandboxes/{container}/stop[?owner=OWNER]
//   POST /admin/drain   (the Kubernetes preStop: stop every sandbox, release every lease)
// Test builds only (cmake -DSANDBOXD_TEST_HOOKS=ON), cluster mode:
//   POST /admin/test/leases  {"prefix": "bench-a-", "first": 0, "count": 10000}: this
//        replica claims the leases of storages prefix{first} .. prefix{first+count-1}
//        without containers or sandboxes (what the cluster benchmark holds), one after
//        another, answered with how many it held and how many were refused; with
//        "as_requests": true all at once, each as the request for its container would be
//        (a takeover waits its turn, cluster/takeover_pacer.h; refused past the wait)
//   GET  /admin/test/leases  how many it holds, and its incarnation

#include <algorithm>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>

#include "api/routes.h"
#include "base/blocking.h"
#include "cluster/container_leases.h"
#include "server/auth.h"
#include "service/store_call.h"

namespace sandboxd::api {

using service::SandboxStatus;
namespace {

// Compares digests, so a wrong token takes as long as a right one.
Result<void> check_admin(const ApiContext& api, const RequestContext& ctx) {
  const std::string admin_token = api.config()->admin_token;
  if (admin_token.empty())
    return ApiError::permission("The admin endpoints are off: set auth.adminToken to use them");
  std::string_view presented = ctx.header_value(http::field::authorization);
  if (presented.starts_with("Bearer "))
    presented.remove_prefix(7);
  else
    presented = ctx.header_value("x-api-key");
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
  for (auto& container : api.containers.lifecycle().find_open_any_owner(id))
    if (!owner || container->owner == *owner) matches.push_back(container);
  if (matches.empty()) co_return ApiError::not_found("No open container '" + id + "'");
  if (matches.size() > 1)
    co_return ApiError::invalid_request("Several owners have a container '" + id + "': name the owner");
  co_await api.containers.lifecycle().stop(matches.front(), "admin");
  co_return json_ok(
      boost::json::object{{"container", id}, {"owner", matches.front()->owner}, {"state", "stopped"}});
}

// What SIGTERM does before the exit, without it: running commands get
// cluster.shutdownGraceSec (less a margin for the flushes) to finish, every sandbox
// stops, every container is flushed and its lease released; new containers are refused.
asio::awaitable<Result<Response>> drain(ApiContext& api, RequestContext& ctx) {
  if (auto ok = check_admin(api, ctx); !ok) co_return ok.error();
  const int grace = api.config()->cluster_shutdown_grace_sec;
  auto outcome = co_await api.containers.lifecycle().drain(std::chrono::seconds(std::max(1, grace * 2 / 3)));
  co_return json_ok(
      boost::json::object{{"drained", true}, {"released", outcome.released}, {"kept", outcome.kept}});
}

#ifdef SANDBOXD_TEST_HOOKS
// Each storage as a request for its container arriving all at once would be: its lease
// read on the store pool, a takeover waiting its turn (refused past the wait, as the
// cluster routing answers 503), then the claim on the store pool.
asio::awaitable<cluster::ContainerLeases::ClaimTally> claim_as_requests(cluster::ContainerLeases& leases,
                                                                        std::vector<std::string> storages) {
  struct Shared {  // the claims may end on any I/O thread
    std::atomic<size_t> left{0}, held{0}, refused{0};
  };
  auto executor = co_await asio::this_coro::executor;
  auto shared = std::make_shared<Shared>();
  shared->left = storages.size();
  for (auto& storage : storages) {
    auto one = [](cluster::ContainerLeases& leases, std::shared_ptr<Shared> shared,
                  std::string storage) -> asio::awaitable<void> {
      bool held = false;
      try {
        auto look_up = [&leases, &storage] { return leases.holder_of(storage); };
        auto holder = co_await run_on(service::store_pool(), std::move(look_up));
        if (!holder.elsewhere && (!holder.takeover || co_await leases.takeover_turn())) {
          auto claim = [&leases, &storage] { return static_cast<bool>(leases.claim(storage, false)); };
          held = co_await run_on(service::store_pool(), std::move(claim));
        }
      } catch (const std::exception&) {
      }
      ++(held ? shared->held : shared->refused);
      --shared->left;
    };
    asio::co_spawn(executor, one(leases, shared, std::move(storage)), asio::detached);
  }
  asio::steady_timer poll(executor);
  while (shared->left > 0) {
    poll.expires_after(std::chrono::milliseconds(10));
    co_await poll.async_wait(asio::use_awaitable);
  }
  co_return cluster::ContainerLeases::ClaimTally{shared->held.load(), shared->refused.load()};
}

asio::awaitable<Result<Response>> hold_test_leases(ApiContext& api, RequestContext& ctx) {
  if (auto ok = check_admin(api, ctx); !ok) co_return ok.error();
  if (!api.leases) co_return ApiError::invalid_request("Not in cluster mode: there are no leases to hold");
  auto body = co_await ctx.read_body(4096);
  if (!body) co_return body.error();
  auto object = parse_json_object(*body);
  if (!object) co_return object.error();
  std::string prefix;
  int64_t first = 0, count = -1;
  bool as_requests = false;
  for (const auto& [key, value] : *object) {
    if (key == "as_requests" && value.is_bool())
      as_requests = value.as_bool();
    else if (key == "prefix" && value.is_string())
      prefix = std::string(value.as_string());
    else if (key == "first" && value.is_int64())
      first = value.as_int64();
    else if (key == "count" && value.is_int64())
      count = value.as_int64();
    else
      co_return ApiError::invalid_request(
          "Expected {\"prefix\": string, \"first\": integer, \"count\": integer, \"as_requests\": boolean}; "
          "'" +
          std::string(key) + "' is not that");
  }
  const bool prefix_ok =
      !prefix.empty() && prefix.size() <= 64 && std::all_of(prefix.begin(), prefix.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
      });
  if (!prefix_ok) co_return ApiError::invalid_request("'prefix' must be 1 to 64 of a-z, 0-9 and '-'");
  if (count < 1 || count > 100000) co_return ApiError::invalid_request("'count' must be from 1 to 100000");
  if (first < 0 || first > 1000000000)
    co_return ApiError::invalid_request("'first' must be from 0 to 1000000000");
  std::vector<std::string> storages;
  storages.reserve(static_cast<size_t>(count));
  for (int64_t i = first; i < first + count; ++i) storages.push_back(prefix + std::to_string(i));
  const auto started = std::chrono::steady_clock::now();
  cluster::ContainerLeases::ClaimTally tally;
  if (as_requests) {
    tally = co_await claim_as_requests(*api.leases, std::move(storages));
  } else {
    auto claim_all = [leases = api.leases, storages = std::move(storages)] {
      return leases->claim_each(storages);
    };
    tally = co_await run_blocking(std::move(claim_all));
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  co_return json_ok(boost::json::object{{"held", tally.held}, {"refused", tally.refused}, {"ms", ms}});
}

asio::awaitable<Result<Response>> test_leases(ApiContext& api, RequestContext& ctx) {
  if (auto ok = check_admin(api, ctx); !ok) co_return ok.error();
  if (!api.leases) co_return ApiError::invalid_request("Not in cluster mode: there are no leases");
  co_return json_ok(
      boost::json::object{{"held", api.leases->held().size()}, {"incarnation", api.leases->incarnation()}});
}
#endif

}  // namespace

void install_admin_routes(server::HttpServer& http, ApiContext& api) {
  http.route(http::verb::get, "/admin/sandboxes", "admin.sandboxes", with_api(api, list_sandboxes),
             {.authenticated = false});
  http.route(http::verb::post, "/admin/sandboxes/{container}/stop", "admin.stop", with_api(api, stop_sandbox),
             {.authenticated = false});
  http.route(http::verb::post, "/admin/drain", "admin.drain", with_api(api, drain), {.authenticated = false});
#ifdef SANDBOXD_TEST_HOOKS
  http.route(http::verb::post, "/admin/test/leases", "admin.test_leases", with_api(api, hold_test_leases),
             {.authenticated = false});
  http.route(http::verb::get, "/admin/test/leases", "admin.test_leases", with_api(api, test_leases),
             {.authenticated = false});
#endif
}

}  // namespace sandboxd::api
