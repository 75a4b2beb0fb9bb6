#include "api/sandbox_network.h"

#include <openssl/crypto.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "base/unique_fd.h"
#include "server/relay.h"

namespace sandboxd::api {
namespace {

using tcp = asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// The API and every service are listeners of the sandbox.
static_assert(ops::kMaxInternalServices + 1 <= runtime::kMaxListeners);
constexpr const char* kApiAddress = "127.0.2.1";
constexpr uint16_t kApiPort = 80;
constexpr auto kConnectTimeout = std::chrono::seconds(10);

// Service i is 127.0.3.(i+1): a distinct address per name, so each service keeps its
// own port and two services may share one.
std::string service_address(size_t index) { return "127.0.3." + std::to_string(index + 1); }

// Closes with a reset, so the client in the sandbox sees ECONNRESET at once rather than
// a connection that seemed to work and then ended.
template <typename Socket>
void refuse(Socket& socket) {
  boost::system::error_code ignored;
  socket.set_option(asio::socket_base::linger(true, 0), ignored);
  socket.close(ignored);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

const SandboxCaller* sandbox_caller(const server::RequestContext& ctx) {
  return dynamic_cast<const SandboxCaller*>(ctx.caller.get());
}

void SandboxLink::bind(const std::shared_ptr<Container>& container) {
  std::lock_guard lock(mutex_);
  container_ = container;
}

std::shared_ptr<Container> SandboxLink::container() const {
  std::lock_guard lock(mutex_);
  return container_.lock();
}

SandboxNetwork::SandboxNetwork(asio::io_context& io, server::HttpServer& http, const ops::Config& config,
                               const std::vector<std::pair<std::string, std::string>>& tokens)
    : io_(io), http_(http), owners_(tokens), max_connections_(config.max_connections_per_sandbox) {
  targets_.push_back({ops::kApiHostName, "", kApiPort});
  for (const auto& service : config.internal_services) targets_.push_back({service.name, service.host, service.port});
}

void SandboxNetwork::plan(runtime::SandboxOptions& options) const {
  options.hosts_entries.clear();
  options.listeners.clear();
  for (size_t i = 0; i < targets_.size(); ++i) {
    std::string address = i == 0 ? kApiAddress : service_address(i - 1);
    options.hosts_entries.push_back(address + "\t" + targets_[i].name);
    options.listeners.push_back({address, targets_[i].port});
  }
}

std::shared_ptr<service::NetworkLink> SandboxNetwork::attach(const std::shared_ptr<runtime::Sandbox>& sandbox) {
  auto link = std::make_shared<SandboxLink>(io_);
  std::vector<int> fds = sandbox->take_listeners();
  if (fds.size() != targets_.size()) {
    spdlog::error("sandbox {} reported {} listener(s), expected {}; its network stays closed", sandbox->name(),
                  fds.size(), targets_.size());
    for (int fd : fds) close(fd);
    return link;
  }
  for (int fd : fds) {
    auto acceptor = std::make_unique<tcp::acceptor>(link->strand_);
    boost::system::error_code ec;
    acceptor->assign(tcp::v4(), fd, ec);
    if (ec) {
      close(fd);
      spdlog::error("sandbox {}: taking a listener: {}", sandbox->name(), ec.message());
    }
    link->acceptors_.push_back(std::move(acceptor));
  }
  for (size_t i = 0; i < link->acceptors_.size(); ++i)
    if (link->acceptors_[i]->is_open()) asio::co_spawn(link->strand_, accept_loop(this, link, i), asio::detached);
  sandbox->on_stopped([link] { close_link(link); });
  return link;
}

void SandboxNetwork::close_link(std::shared_ptr<SandboxLink> link) {
  asio::post(link->strand_, [link] {
    link->closed_ = true;
    boost::system::error_code ignored;
    for (auto& acceptor : link->acceptors_) acceptor->close(ignored);
  });
}

asio::awaitable<void> SandboxNetwork::accept_loop(SandboxNetwork* self, std::shared_ptr<SandboxLink> link,
                                                  size_t index) {
  tcp::acceptor& acceptor = *link->acceptors_[index];
  while (!link->closed_) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::make_strand(self->io_), use_tuple);
    if (ec) {
      if (link->closed_ || ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
      // Out of descriptors or similar: back off instead of spinning.
      asio::steady_timer pause(link->strand_, std::chrono::milliseconds(50));
      co_await pause.async_wait(use_tuple);
      continue;
    }
    // Over the sandbox's limit: closed at once (the client sees its connection end).
    if (link->connections_.load() >= self->max_connections_) {
      spdlog::warn("sandbox connection limit ({}) reached; a connection to {} was refused", self->max_connections_,
                   self->targets_[index].name);
      refuse(socket);
      continue;
    }
    ++link->connections_;
    if (index == 0) {
      self->http_.serve_connection(std::move(socket), link, [link] { --link->connections_; });
    } else {
      auto executor = socket.get_executor();
      asio::co_spawn(executor, relay_to(link, std::move(socket), self->targets_[index]), asio::detached);
    }
  }
}

asio::awaitable<void> SandboxNetwork::relay_to(std::shared_ptr<SandboxLink> link, tcp::socket inside,
                                               Target target) {
  struct Count {
    std::shared_ptr<SandboxLink> link;
    ~Count() { --link->connections_; }
  } count{link};
  tcp::resolver resolver(inside.get_executor());
  auto [resolve_error, endpoints] = co_await resolver.async_resolve(target.host, std::to_string(target.port), use_tuple);
  if (resolve_error) {
    spdlog::warn("service {}: resolving {}: {}", target.name, target.host, resolve_error.message());
    refuse(inside);
    co_return;
  }
  boost::beast::tcp_stream outside(inside.get_executor());
  outside.expires_after(kConnectTimeout);
  auto [connect_error, endpoint] = co_await outside.async_connect(endpoints, use_tuple);
  if (connect_error) {
    spdlog::warn("service {}: connecting to {}:{}: {}", target.name, target.host, target.port, connect_error.message());
    refuse(inside);
    co_return;
  }
  outside.expires_never();
  boost::system::error_code ignored;
  outside.socket().set_option(tcp::no_delay(true), ignored);
  inside.set_option(tcp::no_delay(true), ignored);
  co_await server::relay(std::move(inside), outside.release_socket());
}

Result<void> SandboxNetwork::authenticate(server::RequestContext& ctx) const {
  const std::string_view token = server::presented_token(ctx);
  const auto* link = dynamic_cast<const SandboxLink*>(ctx.origin.get());
  if (!link) {
    if (token.starts_with(service::kScopedTokenPrefix))
      return ApiError::authentication("This token belongs to a sandbox and is accepted only from inside it");
    return owners_.authenticate(ctx);
  }
  if (token.empty())
    return ApiError::authentication("Missing API token: send $ANTHROPIC_AUTH_TOKEN as 'Authorization: Bearer <token>'");
  auto container = link->container();
  if (!container || container->deleted) return ApiError::authentication("This sandbox's container no longer exists");
  const int depth = service::scoped_token_depth(token);
  if (depth < 0 || !constant_time_equal(token, service::scoped_token(*container, depth)))
    return ApiError::authentication("Invalid API token");
  if (ctx.route_name != "messages.create" && ctx.route_name != "messages.validate")
    return ApiError::permission("From inside a sandbox only the messages endpoints can be used (" +
                                std::string(ops::kApiHostName) + "/api/gpt/v1/messages)");
  ctx.owner = container->owner;
  auto caller = std::make_shared<SandboxCaller>();
  caller->nesting_depth = depth;
  caller->container = container->id;
  ctx.caller = std::move(caller);
  return {};
}

}  // namespace sandboxd::api
