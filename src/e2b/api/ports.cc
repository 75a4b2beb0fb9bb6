// E2B's sandbox ports from outside (the SDKs' getHost(port)): with e2b.sandboxDomain set,
// a request whose Host is PORT-SANDBOXID.<domain> for a port other than envd's and the
// code interpreter's is routed here (e2b/api/control_plane.cc's host router) and proxied to that
// port on the sandbox's own loopback, where a process in the sandbox listens: plain HTTP
// both ways as it streams, and a WebSocket after its upgrade (server/port_proxy.h).
//
// Who may: the sandbox's owner, by any of the owner's credentials, the traffic access
// token (E2B's e2b-traffic-access-token header) included, since the control plane
// answers the caller's own token as that token. Never anyone else: E2B's default lets
// whoever knows the URL in (allowPublicTraffic), which here would expose a sandbox to
// strangers, so a create request asking for public traffic is refused (e2b/api/control_plane.cc)
// and every request here is authenticated like the rest of E2B's API.
//
// The server reaches the port through the runtime (runtime::Sandbox::connect_inside): a
// connection to the sandbox's own loopback, made as one from within it would be on
// either tier, so nothing outside the sandbox is reachable by it.

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/string.hpp>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <mutex>

#include "e2b/api/common.h"
#include "server/auth.h"
#include "server/port_proxy.h"

namespace sandboxd::e2b {
namespace {

using tcp = asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// How long connecting to the port may take (the sandbox's loopback: at once, unless
// the process's accept queue is full).
constexpr auto kConnectTimeout = std::chrono::seconds(10);

// Connections of one sandbox: what the server holds for one request being proxied or
// one open WebSocket.
class ProxiedConnections : public std::enable_shared_from_this<ProxiedConnections> {
 public:
  class Slot {
   public:
    Slot(std::shared_ptr<ProxiedConnections> owner, std::string sandbox)
        : owner_(std::move(owner)), sandbox_(std::move(sandbox)) {}
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() { owner_->give_back(sandbox_); }

   private:
    std::shared_ptr<ProxiedConnections> owner_;
    std::string sandbox_;
  };
  // A slot for one more exchange of `sandbox`; null at the bound.
  std::shared_ptr<Slot> take(const std::string& sandbox) {
    {
      std::lock_guard lock(mutex_);
      size_t& count = open_[sandbox];
      if (count >= kMaxProxiedConnectionsPerSandbox) return nullptr;
      ++count;
    }
    return std::make_shared<Slot>(shared_from_this(), sandbox);
  }

 private:
  void give_back(const std::string& sandbox) {
    std::lock_guard lock(mutex_);
    if (auto it = open_.find(sandbox); it != open_.end() && --it->second == 0) open_.erase(it);
  }
  std::mutex mutex_;
  std::map<std::string, size_t> open_;
};

std::optional<uint16_t> port_number(std::string_view text) {
  unsigned value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value == 0 || value > 65535)
    return std::nullopt;
  return static_cast<uint16_t>(value);
}

// The request target for the upstream: what followed kPortsPath (a path, a query).
std::string upstream_target(std::string_view target) {
  target.remove_prefix(std::min(target.size(), kPortsPath.size()));
  if (target.empty() || target.front() != '/') return "/" + std::string(target);
  return std::string(target);
}

// A socket in the sandbox's network namespace, connected to its loopback's `port`.
asio::awaitable<Result<tcp::socket>> connect_inside(RequestContext& ctx, runtime::Sandbox& sandbox,
                                                    const std::string& id, uint16_t port) {
  const std::string where = "port " + std::to_string(port) + " of sandbox " + id;
  const ApiError nothing_listens = ApiError::upstream_failed(
      "Nothing listens on " + where + ": start a server in the sandbox on 0.0.0.0:" + std::to_string(port) +
      " (or 127.0.0.1)");
  // Made as a connection from within the sandbox would be (runtime::Sandbox::connect_inside:
  // through descriptors the sandbox holds, never a pid a later process could have taken).
  const int fd = co_await sandbox.connect_inside("127.0.0.1", port);
  if (fd == -ECONNREFUSED || fd == -ESRCH) co_return nothing_listens;  // (ESRCH: it stopped)
  if (fd < 0) {
    spdlog::error("{} proxy to {}: {}", ctx.request_id, where, std::strerror(-fd));
    co_return ApiError::upstream_failed("The server on " + where + " did not accept a connection (" +
                                        std::strerror(-fd) + ")");
  }
  tcp::socket socket(ctx.stream().get_executor());
  boost::system::error_code ec;
  socket.assign(tcp::v4(), fd, ec);
  if (ec) {
    ::close(fd);
    spdlog::error("{} proxy to {}: {}", ctx.request_id, where, ec.message());
    co_return ApiError::internal();
  }
  // Connected once writable (at once on loopback, or refused).
  asio::steady_timer limit(socket.get_executor(), kConnectTimeout);
  limit.async_wait([&socket](boost::system::error_code expired) {
    if (!expired) socket.cancel();
  });
  auto [wait_error] = co_await socket.async_wait(tcp::socket::wait_write, use_tuple);
  limit.cancel();
  int error = 0;
  socklen_t size = sizeof error;
  if (wait_error)
    error = ETIMEDOUT;
  else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0)
    error = errno;
  if (error == ECONNREFUSED) co_return nothing_listens;
  if (error)
    co_return ApiError::upstream_failed("The server on " + where + " did not accept a connection (" +
                                        std::strerror(error) + ")");
  co_return std::move(socket);
}

asio::awaitable<Result<Response>> proxy_port(ApiContext& api, ProxiedConnections& open, RequestContext& ctx) {
  const auto port = port_number(ctx.header_value("E2b-Sandbox-Port"));
  if (!port) co_return ApiError::invalid_request("'E2b-Sandbox-Port' must be a port number from 1 to 65535");
  auto addressed = co_await open_addressed_sandbox(api, ctx, std::nullopt);
  if (!addressed) co_return addressed.error();
  const std::string& id = addressed->sandbox.id;
  auto slot = open.take(id);
  if (!slot)
    co_return ApiError::rate_limited(
        "Sandbox " + id + " has " + std::to_string(kMaxProxiedConnectionsPerSandbox) +
            " proxied connections open (the most a sandbox may have); close some "
            "and try again",
        1);
  auto sandbox = addressed->container->live_sandbox.load();
  if (!sandbox || !sandbox->running())
    co_return ApiError::upstream_failed(
        "Nothing listens on port " + std::to_string(*port) + " of sandbox " + id +
        ": its processes have ended (start a server there with commands.run)");
  auto connected = co_await connect_inside(ctx, *sandbox, id, *port);
  if (!connected) co_return connected.error();

  server::PortProxyOptions options;
  options.idle_timeout = kProxyIdleTimeout;
  options.hold = std::move(slot);
  options.no_answer_message =
      "The server on port " + std::to_string(*port) + " of sandbox " + id + " did not answer";
  // The credentials that admitted the request are the owner's token: never handed to
  // the sandbox's code (which may be anybody's), nor the routing headers.
  options.drop_fields = {"e2b-sandbox-id", "e2b-sandbox-port", "x-api-key", "x-access-token",
                         "e2b-traffic-access-token"};
  const std::string_view authorization = ctx.header_value(http::field::authorization);
  if (authorization.size() > 7 && boost::beast::iequals(authorization.substr(0, 7), "Bearer ") &&
      authorization.substr(7) == server::presented_token(ctx))
    options.drop_fields.push_back("authorization");
  co_return co_await server::proxy_request(ctx, std::move(*connected), upstream_target(ctx.header().target()),
                                           std::move(options));
}

}  // namespace

void install_port_routes(server::HttpServer& http, ApiContext& api) {
  const server::RouteOptions sandbox = in_addressed_sandbox();
  auto open = std::make_shared<ProxiedConnections>();
  auto handler =
      e2b_route(api, [open](ApiContext& api, RequestContext& ctx) -> asio::awaitable<Result<Response>> {
        return proxy_port(api, *open, ctx);
      });
  const std::string base(kPortsPath);
  for (auto verb : {http::verb::get, http::verb::head, http::verb::post, http::verb::put, http::verb::patch,
                    http::verb::delete_, http::verb::options}) {
    http.route(verb, base, "e2b.ports", handler, sandbox);
    http.route(verb, base + "/{path+}", "e2b.ports", handler, sandbox);
  }
}

}  // namespace sandboxd::e2b
