#include "api/sandbox_network.h"

#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <array>

#include "base/blocking.h"
#include "base/unique_fd.h"
#include "ops/egress_metrics.h"
#include "ops/logging.h"
#include "ops/metrics.h"
#include "runtime/net.h"
#include "runtime/netns.h"
#include "runtime/syscall_error.h"
#include "server/destination_peek.h"
#include "server/dns_client.h"
#include "server/dns_message.h"
#include "server/relay.h"
#include "service/egress_options.h"

namespace sandboxd::api {
namespace {

using tcp = asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// The API and every service are listeners of the sandbox.
static_assert(ops::kMaxInternalServices + 1 <= runtime::kMaxListeners);
constexpr const char* kApiAddress = "127.0.2.1";
constexpr uint16_t kApiPort = 80;
constexpr auto kConnectTimeout = std::chrono::seconds(10);
// The DNS server of a sandbox with NetworkPolicy peers (its resolv.conf names it).
constexpr const char* kNameserverAddress = "127.0.2.53";
constexpr uint16_t kNameserverPort = 53;
constexpr auto kDnsTcpIdle = std::chrono::seconds(10);
// A sandbox's listeners for the peers at most: each is a descriptor of the server's
// per sandbox; past it the rest of the set is not reachable (logged), never more.
constexpr size_t kMaxPeerListeners = 64;

// Service i is 127.0.3.(i+1): a distinct address per name, so each service keeps its
// own port and two services may share one.
std::string service_address(size_t index) { return "127.0.3." + std::to_string(index + 1); }

// Egress (network.egress): the outside name the sandbox's resolver answered i-th has the
// address 198.18.0.(i+1) in the sandbox (RFC 2544's benchmarking block, which no real
// destination uses), so a connection's local address says which name it is for. Its
// listeners: HTTP, HTTPS and the ports the policy names for it.
constexpr uint32_t kEgressAddresses = 0xC6120000;  // 198.18.0.0
uint32_t egress_address_of(size_t index) { return kEgressAddresses + static_cast<uint32_t>(index) + 1; }
constexpr uint16_t kHttpPort = 80, kHttpsPort = 443;
// Names per sandbox (each costs the server two or more listening descriptors); past it a
// name does not resolve, and the server logs it.
constexpr size_t kMaxEgressNames = 32;
constexpr size_t kMaxEgressPortsPerName = 8;
// How long the server waits for a ClientHello or a request head, and for the DNS servers.
constexpr auto kPeekTimeout = std::chrono::seconds(10);
constexpr auto kResolveTimeout = std::chrono::milliseconds(2000);

// Addresses an allowed name may not lead to unless an allow CIDR names them: the
// server's own host (loopback, "this network") and link-local (cloud metadata services).
// The server connects from the host, so without this an allowed name that resolves to
// 127.0.0.1 would reach the host's own services.
bool host_only_address(uint32_t address) {
  const uint8_t first = static_cast<uint8_t>(address >> 24);
  return first == 127 || first == 0 || (address & 0xFFFF0000) == 0xA9FE0000;
}

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

SandboxNetwork::SandboxNetwork(asio::io_context& io, server::HttpServer& http, const ops::LiveConfig& live,
                               const std::vector<std::pair<std::string, std::string>>& tokens,
                               std::shared_ptr<server::InterceptionCa> interception_ca,
                               std::shared_ptr<kubernetes::PeerWatch> peers)
    : io_(io),
      http_(http),
      config_(live),
      host_resolvers_(server::resolv_conf_nameservers()),
      owners_(tokens),
      max_connections_(live.get()->max_connections_per_sandbox),
      peers_(std::move(peers)) {
  const auto config = live.get();
  targets_.push_back({ops::kApiHostName, "", kApiPort});
  for (const auto& service : config->internal_services)
    targets_.push_back({service.name, service.host, service.port});
  for (const auto& target : targets_) fixed_ports_.insert(target.port);
  interception_ca_ = std::move(interception_ca);
  // A CA file that cannot be read is a configuration error: the start fails with it.
  upstream_tls_ = server::upstream_tls_context(config->egress_upstream_ca_file);
  if (peers_) {
    change_target_->network = this;
    peers_->on_change([target = change_target_] {
      std::lock_guard lock(target->mutex);
      if (target->network) target->network->peers_changed();
    });
  }
}

SandboxNetwork::~SandboxNetwork() {
  std::lock_guard lock(change_target_->mutex);
  change_target_->network = nullptr;
}

void SandboxNetwork::plan(runtime::SandboxOptions& options) const {
  options.hosts_entries.clear();
  options.listeners.clear();
  for (size_t i = 0; i < targets_.size(); ++i) {
    std::string address = i == 0 ? kApiAddress : service_address(i - 1);
    options.hosts_entries.push_back(address + "\t" + targets_[i].name);
    options.listeners.push_back({address, targets_[i].port});
  }
  options.nameserver = nameserver();
}

std::string SandboxNetwork::nameserver() const { return gives_resolver() ? kNameserverAddress : ""; }

bool SandboxNetwork::gives_resolver() const { return peers_ || !config_.get()->egress_policy().closed(); }

asio::awaitable<std::shared_ptr<service::NetworkLink>> SandboxNetwork::attach(
    const std::shared_ptr<runtime::Sandbox>& sandbox) {
  auto link = std::make_shared<SandboxLink>(io_);
  link->sandbox_ = sandbox;
  std::vector<int> fds = sandbox->take_listeners();
  if (fds.size() != targets_.size()) {
    spdlog::error("sandbox {} reported {} listener(s), expected {}; its network stays closed",
                  sandbox->name(), fds.size(), targets_.size());
    for (int fd : fds) close(fd);
    co_return link;
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
    if (link->acceptors_[i]->is_open())
      asio::co_spawn(link->strand_, accept_loop(this, link, i), asio::detached);
  sandbox->on_stopped([link] { close_link(link); });
  // A resolver where the sandbox's /etc/resolv.conf names one: its plan (plan(), made
  // before its start) decides, whatever a reload changed since.
  if (sandbox->nameserver().empty()) co_return link;
  link->name_ = sandbox->name();
  try {
    link->netns_ = runtime::open_network_namespace(sandbox->pid());
  } catch (const runtime::SyscallError& e) {
    spdlog::error("sandbox {}: its network peers stay closed: {}", sandbox->name(), e.what());
    co_return link;
  }
  {
    std::lock_guard lock(links_mutex_);
    std::erase_if(links_, [](const std::weak_ptr<SandboxLink>& weak) { return weak.expired(); });
    links_.push_back(link);
  }
  // Awaited, not spawned: the sandbox is handed out (and runs its first command) only
  // once its resolver answers and its peers' listeners are open. Listening sockets queue
  // connections before their accept loops run, so nothing arriving after this is lost.
  try {
    co_await asio::co_spawn(link->strand_, start_resolver(this, link), asio::use_awaitable);
  } catch (const std::exception& e) {
    spdlog::error("sandbox {}: opening its network peers: {}", link->name_, e.what());
  }
  co_return link;
}

void SandboxNetwork::close_link(std::shared_ptr<SandboxLink> link) {
  asio::post(link->strand_, [link] {
    link->closed_ = true;
    boost::system::error_code ignored;
    for (auto& acceptor : link->acceptors_) acceptor->close(ignored);
    for (auto& [address, acceptor] : link->peer_acceptors_) acceptor->close(ignored);
    link->peer_acceptors_.clear();
    for (auto& acceptor : link->egress_acceptors_) acceptor->close(ignored);
    link->egress_acceptors_.clear();
    for (auto& [port, acceptor] : link->egress_port_acceptors_) acceptor->close(ignored);
    link->egress_port_acceptors_.clear();
    if (link->proxy_acceptor_) link->proxy_acceptor_->close(ignored);
    link->proxy_acceptor_.reset();
    if (link->dns_) link->dns_->close(ignored);
    if (link->dns_tcp_) link->dns_tcp_->close(ignored);
  });
}

void SandboxNetwork::peers_changed() {
  std::lock_guard lock(links_mutex_);
  std::erase_if(links_, [](const std::weak_ptr<SandboxLink>& weak) { return weak.expired(); });
  for (const auto& weak : links_)
    if (auto link = weak.lock()) asio::co_spawn(link->strand_, reconcile(this, link), asio::detached);
}

asio::awaitable<void> SandboxNetwork::start_resolver(SandboxNetwork* self,
                                                     std::shared_ptr<SandboxLink> link) {
  // In the sandbox's namespace: every address local (so a peer's address reaches a
  // listener here, or is refused here) and the DNS socket its resolv.conf names.
  const int netns = link->netns_.get();
  // (Named before co_await: GCC 12 frees a closure with captured strings twice when it
  // is a temporary of the co_await expression.)
  auto setup = [netns, name = link->name_] {
    int fd = -1, tcp_fd = -1;
    try {
      runtime::in_network_namespace(netns, [&] {
        runtime::route_every_address_locally();
        fd = runtime::open_udp_socket(kNameserverAddress, kNameserverPort);
        tcp_fd = runtime::open_listener(kNameserverAddress, kNameserverPort);
      });
    } catch (const runtime::SyscallError& e) {
      spdlog::error("sandbox {}: its network peers stay closed: {}", name, e.what());
      if (fd >= 0) close(fd);
      if (tcp_fd >= 0) close(tcp_fd);
      fd = tcp_fd = -1;
    }
    return std::pair{fd, tcp_fd};
  };
  const auto [dns_fd, dns_tcp_fd] = co_await run_blocking(std::move(setup));
  if (dns_fd < 0) co_return;
  if (link->closed_) {
    close(dns_fd);
    close(dns_tcp_fd);
    co_return;
  }
  if (auto sandbox = link->sandbox_.lock()) sandbox->every_address_local_inside();
  link->dns_tcp_ = std::make_shared<tcp::acceptor>(link->strand_);
  {
    boost::system::error_code ec;
    link->dns_tcp_->assign(tcp::v4(), dns_tcp_fd, ec);
    if (ec) {
      close(dns_tcp_fd);
    } else {
      asio::co_spawn(link->strand_, serve_dns_tcp(self, link), asio::detached);
      if (auto sandbox = link->sandbox_.lock()) sandbox->listen_inside(kNameserverAddress, kNameserverPort);
    }
  }
  link->dns_ = std::make_unique<asio::ip::udp::socket>(link->strand_);
  boost::system::error_code ec;
  link->dns_->assign(asio::ip::udp::v4(), dns_fd, ec);
  if (ec) {
    close(dns_fd);
    link->dns_.reset();
    co_return;
  }
  asio::co_spawn(link->strand_, serve_dns(self, link), asio::detached);
  co_await reconcile_egress(self, link);
  if (self->peers_) co_await reconcile(self, link);
}

asio::awaitable<void> SandboxNetwork::serve_dns(SandboxNetwork* self, std::shared_ptr<SandboxLink> link) {
  std::array<char, 1500> buffer;
  asio::ip::udp::endpoint from;
  while (!link->closed_) {
    auto [ec, size] = co_await link->dns_->async_receive_from(asio::buffer(buffer), from, use_tuple);
    if (ec) {
      if (link->closed_ || ec == asio::error::operation_aborted) co_return;
      continue;
    }
    auto reply = co_await dns_reply(self, link, std::string(buffer.data(), size));
    if (!reply) continue;
    co_await link->dns_->async_send_to(asio::buffer(*reply), from, use_tuple);
  }
}

asio::awaitable<std::optional<std::string>> SandboxNetwork::dns_reply(SandboxNetwork* self,
                                                                      std::shared_ptr<SandboxLink> link,
                                                                      std::string query) {
  const auto parsed = server::parse_dns_query(query);
  std::optional<std::string> reply;
  switch (parsed.outcome) {
    case server::DnsParse::Outcome::Drop:
      co_return std::nullopt;
    case server::DnsParse::Outcome::FormatError:
      reply = server::dns_error_reply(query, 1);
      break;
    case server::DnsParse::Outcome::NotImplemented:
      reply = server::dns_error_reply(query, 4);
      break;
    case server::DnsParse::Outcome::Question: {
      // The peers' names first (the cluster's own), then the egress policy's.
      const std::string& name = parsed.question.name;
      std::optional<std::vector<uint32_t>> addresses;
      if (self->peers_)
        if (auto found = self->peers_->peers()->resolve(name); !found.empty()) addresses = std::move(found);
      // The container's own options (E2B's network) narrow the operator's policy.
      std::shared_ptr<const ops::SandboxEgress> own;
      if (auto container = link->container()) own = service::egress_options(*container);
      if (!addresses && self->config_.get()->egress_policy().allows_name_on_any_port(name) &&
          (!own || own->may_resolve(name))) {
        // An allowed name the outside does not know is "no such name" here too; one the
        // resolvers could not answer for is a server failure (the client asks again).
        auto answer = co_await egress_address(self, link, name);
        if (!answer.error.empty()) {
          reply = server::dns_error_reply(query, 2);
          break;
        }
        if (answer.address) addresses = std::vector<uint32_t>{*answer.address};
      }
      reply = server::dns_answer_reply(query, parsed, addresses);
      break;
    }
  }
  co_return reply;
}

asio::awaitable<void> SandboxNetwork::serve_dns_tcp(SandboxNetwork* self, std::shared_ptr<SandboxLink> link) {
  auto acceptor = link->dns_tcp_;
  for (;;) {
    auto socket = co_await accept_within_limit(self, link, acceptor, "the DNS resolver");
    if (!socket) co_return;
    ++link->connections_;
    auto executor = socket->get_executor();
    asio::co_spawn(executor, dns_tcp_connection(self, link, std::move(*socket)), asio::detached);
  }
}

asio::awaitable<void> SandboxNetwork::dns_tcp_connection(SandboxNetwork* self,
                                                         std::shared_ptr<SandboxLink> link,
                                                         tcp::socket socket) {
  struct Count {
    std::shared_ptr<SandboxLink> link;
    ~Count() { --link->connections_; }
  } count{link};
  // A resolver asks and closes; one that keeps the connection idle past this is closed
  // (RFC 7766 suggests seconds), so a connection is never held for nothing.
  asio::steady_timer idle(socket.get_executor());
  for (;;) {
    idle.expires_after(kDnsTcpIdle);
    idle.async_wait([&socket](boost::system::error_code ec) {
      if (!ec) {
        boost::system::error_code ignored;
        socket.close(ignored);
      }
    });
    std::array<unsigned char, 2> length{};
    auto [ec, n] = co_await asio::async_read(socket, asio::buffer(length), use_tuple);
    if (ec) break;
    std::string query(static_cast<size_t>(length[0]) << 8 | length[1], '\0');
    if (query.empty()) break;
    std::tie(ec, n) = co_await asio::async_read(socket, asio::buffer(query), use_tuple);
    idle.cancel();
    if (ec) break;
    auto reply =
        co_await asio::co_spawn(link->strand_, dns_reply(self, link, std::move(query)), asio::use_awaitable);
    if (!reply) continue;
    if (reply->size() > 0xFFFF) break;
    std::string framed;
    framed.push_back(static_cast<char>(reply->size() >> 8));
    framed.push_back(static_cast<char>(reply->size() & 0xFF));
    framed += *reply;
    std::tie(ec, n) = co_await asio::async_write(socket, asio::buffer(framed), use_tuple);
    if (ec) break;
  }
  idle.cancel();
}

asio::awaitable<void> SandboxNetwork::reconcile(SandboxNetwork* self, std::shared_ptr<SandboxLink> link) {
  if (!link->dns_) co_return;  // start_peers has not finished: it reconciles when it does
  if (link->reconciling_) {
    link->reconcile_again_ = true;
    co_return;
  }
  link->reconciling_ = true;
  do {
    link->reconcile_again_ = false;
    if (link->closed_) break;
    size_t dropped = 0;
    std::set<kubernetes::ListenAddress> wanted;
    for (const auto& address : self->peers_->peers()->listeners(kMaxPeerListeners, &dropped)) {
      // Every address on a port the API or a named service listens on would collide
      // with that listener: those ports are reached only on the peers' own addresses.
      if (address.address == 0 && self->fixed_ports_.count(address.port)) continue;
      wanted.insert(address);
    }
    if (dropped)
      spdlog::warn(
          "sandbox {}: the network peers need {} listeners more than the {} a sandbox has; those are not "
          "reachable",
          link->name_, dropped, kMaxPeerListeners);
    boost::system::error_code ignored;
    for (auto it = link->peer_acceptors_.begin(); it != link->peer_acceptors_.end();) {
      if (wanted.count(it->first)) {
        ++it;
        continue;
      }
      it->second->close(ignored);
      it = link->peer_acceptors_.erase(it);
    }
    std::vector<kubernetes::ListenAddress> to_open;
    for (const auto& address : wanted)
      if (!link->peer_acceptors_.count(address)) to_open.push_back(address);
    if (to_open.empty()) continue;
    auto fds = co_await open_listeners_in(link, to_open, "a network peer's listener");
    for (size_t i = 0; i < to_open.size(); ++i) {
      if (fds[i] < 0) continue;
      if (link->closed_ || link->peer_acceptors_.count(to_open[i])) {
        close(fds[i]);
        continue;
      }
      auto acceptor = std::make_shared<tcp::acceptor>(link->strand_);
      boost::system::error_code ec;
      acceptor->assign(tcp::v4(), fds[i], ec);
      if (ec) {
        close(fds[i]);
        continue;
      }
      link->peer_acceptors_[to_open[i]] = acceptor;
      asio::co_spawn(link->strand_, peer_accept_loop(self, link, to_open[i]), asio::detached);
    }
    // A change while the listeners were made set reconcile_again_: look again then.
  } while (link->reconcile_again_ && !link->closed_);
  link->reconciling_ = false;
}

asio::awaitable<void> SandboxNetwork::peer_accept_loop(SandboxNetwork* self,
                                                       std::shared_ptr<SandboxLink> link,
                                                       kubernetes::ListenAddress address) {
  std::shared_ptr<tcp::acceptor> acceptor = link->peer_acceptors_.at(address);
  for (;;) {
    auto accepted = co_await accept_within_limit(self, link, acceptor, "a network peer");
    if (!accepted) co_return;
    tcp::socket& socket = *accepted;
    // Decided now, from the set in force now: a peer that left is refused from here on.
    boost::system::error_code local_error;
    const auto local = socket.local_endpoint(local_error);
    if (local_error || !local.address().is_v4()) {
      refuse(socket);
      continue;
    }
    const kubernetes::Endpoint destination{local.address().to_v4().to_uint(), local.port()};
    const auto route = self->peers_->peers()->route(destination, link->picks_++);
    if (!route) {
      refuse(socket);
      continue;
    }
    ++link->connections_;
    Target target{ops::format_ipv4(destination.address) + ":" + std::to_string(destination.port),
                  ops::format_ipv4(route->address), route->port};
    auto executor = socket.get_executor();
    asio::co_spawn(executor, relay_to(link, std::move(socket), std::move(target)), asio::detached);
  }
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
      spdlog::warn("sandbox connection limit ({}) reached; a connection to {} was refused",
                   self->max_connections_, self->targets_[index].name);
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
  auto [resolve_error, endpoints] =
      co_await resolver.async_resolve(target.host, std::to_string(target.port), use_tuple);
  if (resolve_error) {
    spdlog::warn("service {}: resolving {}: {}", target.name, target.host, resolve_error.message());
    refuse(inside);
    co_return;
  }
  boost::beast::tcp_stream outside(inside.get_executor());
  outside.expires_after(kConnectTimeout);
  auto [connect_error, endpoint] = co_await outside.async_connect(endpoints, use_tuple);
  if (connect_error) {
    spdlog::warn("service {}: connecting to {}:{}: {}", target.name, target.host, target.port,
                 connect_error.message());
    refuse(inside);
    co_return;
  }
  outside.expires_never();
  boost::system::error_code ignored;
  outside.socket().set_option(tcp::no_delay(true), ignored);
  inside.set_option(tcp::no_delay(true), ignored);
  co_await server::relay(std::move(inside), outside.release_socket());
}

asio::awaitable<std::vector<int>> SandboxNetwork::open_listeners_in(
    std::shared_ptr<SandboxLink> link, std::vector<kubernetes::ListenAddress> addresses, const char* what) {
  const int netns = link->netns_.get();
  auto open = [netns, addresses, what, name = link->name_] {
    std::vector<int> fds(addresses.size(), -1);
    try {
      runtime::in_network_namespace(netns, [&] {
        for (size_t i = 0; i < addresses.size(); ++i) {
          try {
            fds[i] = runtime::open_listener(ops::format_ipv4(addresses[i].address), addresses[i].port);
          } catch (const runtime::SyscallError& e) {
            // Code in the sandbox may hold the port itself: then only it loses.
            spdlog::warn("sandbox {}: {}: {}", name, what, e.what());
          }
        }
      });
    } catch (const runtime::SyscallError& e) {
      spdlog::warn("sandbox {}: entering its network namespace: {}", name, e.what());
    }
    return fds;
  };
  auto fds = co_await run_blocking(std::move(open));
  if (auto sandbox = link->sandbox_.lock())
    for (size_t i = 0; i < addresses.size(); ++i)
      if (fds[i] >= 0) sandbox->listen_inside(ops::format_ipv4(addresses[i].address), addresses[i].port);
  co_return fds;
}

asio::awaitable<SandboxNetwork::EgressAnswer> SandboxNetwork::egress_address(
    SandboxNetwork* self, std::shared_ptr<SandboxLink> link, std::string name) {
  if (auto it = std::ranges::find(link->egress_names_, name); it != link->egress_names_.end())
    co_return EgressAnswer{egress_address_of(static_cast<size_t>(it - link->egress_names_.begin())), {}};
  if (link->egress_names_.size() >= kMaxEgressNames) {
    spdlog::warn(
        "sandbox {}: {} outside names resolved already (the most a sandbox has); '{}' does not resolve",
        link->name_, kMaxEgressNames, name);
    co_return EgressAnswer{};
  }
  // Asked outside first: a name that does not exist there does not exist here.
  const auto config = self->config_.get();
  const auto& resolvers = config->egress_resolvers.empty() ? self->host_resolvers_ : config->egress_resolvers;
  auto lookup = co_await server::resolve_ipv4(link->strand_, resolvers, name, kResolveTimeout);
  if (lookup.addresses.empty()) {
    if (lookup.error == "no such name" || lookup.error == "no IPv4 address") co_return EgressAnswer{};
    spdlog::warn("sandbox {}: resolving the allowed name {}: {}", link->name_, name, lookup.error);
    co_return EgressAnswer{std::nullopt, lookup.error};
  }
  // Another query for the same name may have been answered meanwhile.
  if (auto it = std::ranges::find(link->egress_names_, name); it != link->egress_names_.end())
    co_return EgressAnswer{egress_address_of(static_cast<size_t>(it - link->egress_names_.begin())), {}};
  if (link->egress_names_.size() >= kMaxEgressNames) co_return EgressAnswer{};
  const uint32_t address = egress_address_of(link->egress_names_.size());
  link->egress_names_.push_back(name);
  std::vector<kubernetes::ListenAddress> listeners{{address, kHttpPort}, {address, kHttpsPort}};
  for (uint16_t port : config->egress_policy().named_ports(name))
    if (port != kHttpPort && port != kHttpsPort && listeners.size() < 2 + kMaxEgressPortsPerName)
      listeners.push_back({address, port});
  auto fds = co_await open_listeners_in(link, listeners, "an egress listener");
  for (int fd : fds)
    if (auto acceptor = serve_egress_listener(self, link, fd, name))
      link->egress_acceptors_.push_back(acceptor);
  co_return EgressAnswer{address, {}};
}

asio::awaitable<void> SandboxNetwork::reconcile_egress(SandboxNetwork* self,
                                                       std::shared_ptr<SandboxLink> link) {
  // What the policy in force wants: raw TCP to the allowed CIDRs, one listener per port on
  // every address (each is local in the sandbox; whether an address is allowed is decided
  // per connection), and the HTTP proxy's listener where the policy allows anything. The
  // ports the API, the services and the names' listeners use are reached by name only.
  struct Wanted {
    std::set<uint16_t> ports;
    bool proxy = false;
  };
  auto wanted_now = [self] {
    const auto policy = self->config_.get()->egress_policy();
    Wanted wanted{.proxy = !policy.closed()};
    for (const auto* rule : policy.network_rules()) {
      const uint16_t port = rule->port;
      if (port != 0 && port != kHttpPort && port != kHttpsPort && !self->fixed_ports_.count(port))
        wanted.ports.insert(port);
    }
    return wanted;
  };
  Wanted wanted = wanted_now();
  // What it no longer wants is closed (the connections relayed already go on).
  boost::system::error_code ignored;
  std::erase_if(link->egress_port_acceptors_, [&](const auto& entry) {
    if (wanted.ports.count(entry.first)) return false;
    entry.second->close(ignored);
    return true;
  });
  if (!wanted.proxy && link->proxy_acceptor_) {
    link->proxy_acceptor_->close(ignored);
    link->proxy_acceptor_.reset();
  }
  const uint32_t proxy_address = *ops::parse_ipv4(std::string(service::kEgressProxyAddress));
  std::vector<kubernetes::ListenAddress> to_open;
  for (uint16_t port : wanted.ports)
    if (!link->egress_port_acceptors_.count(port)) to_open.push_back({0, port});
  if (wanted.proxy && !link->proxy_acceptor_) to_open.push_back({proxy_address, service::kEgressProxyPort});
  if (to_open.empty() || link->closed_) co_return;
  auto fds = co_await open_listeners_in(link, to_open, "an egress listener");
  // A reload meanwhile (its own pass runs beside this one) may want less, or have opened
  // the same listeners: those of these are closed again.
  wanted = wanted_now();
  for (size_t i = 0; i < to_open.size(); ++i) {
    if (fds[i] < 0) continue;
    const bool proxy = to_open[i].address == proxy_address;
    const uint16_t port = to_open[i].port;
    const bool still_wanted = proxy ? wanted.proxy && !link->proxy_acceptor_
                                    : wanted.ports.count(port) && !link->egress_port_acceptors_.count(port);
    if (!still_wanted) {
      close(fds[i]);
      continue;
    }
    auto acceptor = serve_egress_listener(self, link, fds[i], "", proxy);
    if (!acceptor) continue;
    if (proxy)
      link->proxy_acceptor_ = acceptor;
    else
      link->egress_port_acceptors_[port] = acceptor;
  }
}

asio::awaitable<void> SandboxNetwork::egress_policy_reloaded() {
  std::vector<std::shared_ptr<SandboxLink>> links;
  {
    std::lock_guard lock(links_mutex_);
    std::erase_if(links_, [](const std::weak_ptr<SandboxLink>& weak) { return weak.expired(); });
    for (const auto& weak : links_)
      if (auto link = weak.lock()) links.push_back(std::move(link));
  }
  for (const auto& link : links) {
    try {
      auto pass = reconcile_egress(this, link);
      co_await asio::co_spawn(link->strand_, std::move(pass), asio::use_awaitable);
    } catch (const std::exception& e) {
      spdlog::error("sandbox {}: its egress listeners after the reload: {}", link->name_, e.what());
    }
  }
}

std::shared_ptr<tcp::acceptor> SandboxNetwork::serve_egress_listener(SandboxNetwork* self,
                                                                     std::shared_ptr<SandboxLink> link,
                                                                     int fd, const std::string& name,
                                                                     bool proxy) {
  if (fd < 0) return nullptr;
  // The sandbox stopped while it was opened: nothing will accept on it.
  if (link->closed_) {
    close(fd);
    return nullptr;
  }
  auto acceptor = std::make_shared<tcp::acceptor>(link->strand_);
  boost::system::error_code ec;
  acceptor->assign(tcp::v4(), fd, ec);
  if (ec) {
    close(fd);
    return nullptr;
  }
  asio::co_spawn(link->strand_, egress_accept_loop(self, link, acceptor, name, proxy), asio::detached);
  return acceptor;
}

asio::awaitable<void> SandboxNetwork::egress_accept_loop(SandboxNetwork* self,
                                                         std::shared_ptr<SandboxLink> link,
                                                         std::shared_ptr<tcp::acceptor> acceptor,
                                                         std::string name, bool proxy) {
  for (;;) {
    auto socket = co_await accept_within_limit(self, link, acceptor, "an outside destination");
    if (!socket) co_return;
    ++link->connections_;
    auto executor = socket->get_executor();
    asio::co_spawn(executor, egress_relay(self, link, std::move(*socket), name, proxy), asio::detached);
  }
}

asio::awaitable<std::optional<tcp::socket>> SandboxNetwork::accept_within_limit(
    SandboxNetwork* self, std::shared_ptr<SandboxLink> link, std::shared_ptr<tcp::acceptor> acceptor,
    const char* what) {
  while (!link->closed_ && acceptor->is_open()) {
    auto [ec, socket] = co_await acceptor->async_accept(asio::make_strand(self->io_), use_tuple);
    if (ec) {
      if (link->closed_ || ec == asio::error::operation_aborted || !acceptor->is_open()) break;
      // Out of descriptors or similar: back off instead of spinning.
      asio::steady_timer pause(link->strand_, std::chrono::milliseconds(50));
      co_await pause.async_wait(use_tuple);
      continue;
    }
    // Over the sandbox's limit: closed at once (the client sees its connection end).
    if (link->connections_.load() >= self->max_connections_) {
      spdlog::warn("sandbox connection limit ({}) reached; a connection to {} was refused",
                   self->max_connections_, what);
      refuse(socket);
      continue;
    }
    co_return std::move(socket);
  }
  co_return std::nullopt;
}

namespace {

// What one outside connection was, for the audit log and the metrics.
struct EgressRecord {
  std::string owner, container, destination, address, refused;
  std::string reason;  // a refusal's kind, for the metric: policy, invalid, resolve, connect, *_limit
  uint16_t port = 0;
  server::RelayBytes bytes;

  void finish() const {
    ops::metrics().egress_connection(refused.empty(), bytes.a_to_b, bytes.b_to_a);
    if (!refused.empty()) ops::count_egress_refusal(reason);
    if (!refused.empty())
      spdlog::info("sandbox of container {}: an outside connection to {}:{} was refused: {}", container,
                   destination, port, refused);
    if (auto* log = ops::audit())
      log->record("egress", {{"owner", owner},
                             {"container", container},
                             {"destination", destination},
                             {"port", int64_t{port}},
                             {"address", address},
                             {"bytes_out", static_cast<int64_t>(bytes.a_to_b)},
                             {"bytes_in", static_cast<int64_t>(bytes.b_to_a)},
                             {"result", refused.empty() ? "allowed" : "refused"},
                             {"reason", refused}});
  }
};

// Reads the first bytes of `inside` until `peek` decides, the peek bound or the timeout.
template <typename Peek>
asio::awaitable<server::PeekedDestination> read_destination(tcp::socket& inside, std::string& peeked,
                                                            Peek peek) {
  using namespace asio::experimental::awaitable_operators;
  server::PeekedDestination found;
  auto read = [&]() -> asio::awaitable<void> {
    std::array<char, 4096> chunk;
    while (peeked.size() < server::kMaxPeekBytes) {
      auto [ec, n] = co_await inside.async_read_some(asio::buffer(chunk), use_tuple);
      if (ec) co_return;
      peeked.append(chunk.data(), n);
      found = peek(std::string_view(peeked));
      if (found.state != server::PeekedDestination::State::NeedMore) co_return;
    }
  };
  asio::steady_timer deadline(inside.get_executor(), kPeekTimeout);
  co_await (read() || deadline.async_wait(use_tuple));
  // Cut short by the timeout, the bound or an error: not a destination to go to.
  if (found.state == server::PeekedDestination::State::NeedMore)
    found.state = server::PeekedDestination::State::Invalid;
  co_return found;
}

// Reads a proxy request's head from `inside` (into `head`, with what followed it) until
// it is complete, the peek bound or the timeout.
asio::awaitable<server::ProxyRequest> read_proxy_request(tcp::socket& inside, std::string& head) {
  using namespace asio::experimental::awaitable_operators;
  server::ProxyRequest found;
  auto read = [&]() -> asio::awaitable<void> {
    std::array<char, 4096> chunk;
    for (;;) {
      auto [ec, n] = co_await inside.async_read_some(asio::buffer(chunk), use_tuple);
      if (ec) co_return;
      head.append(chunk.data(), n);
      found = server::proxy_request(head);
      if (found.state != server::ProxyRequest::State::NeedMore) co_return;
    }
  };
  asio::steady_timer deadline(inside.get_executor(), kPeekTimeout);
  co_await (read() || deadline.async_wait(use_tuple));
  co_return found;
}

// Runs `handshake` (an SSL stream's) within kConnectTimeout: past it the stream's socket
// is closed, which ends the handshake with an error.
template <typename Stream, typename Handshake>
asio::awaitable<boost::system::error_code> handshake_within(Stream& stream, Handshake handshake) {
  asio::steady_timer deadline(stream.get_executor(), kConnectTimeout);
  deadline.async_wait([&stream](boost::system::error_code ec) {
    if (ec) return;
    boost::system::error_code ignored;
    stream.lowest_layer().close(ignored);
  });
  auto error = co_await handshake();
  deadline.cancel();
  co_return error;
}

// A connection a header rule applies to (docs/network.md#header-rules): TLS to the
// destination first, its certificate verified against the host's trust store (and
// network.egress.upstreamCaFile) for `name`; then the sandbox's handshake (its
// ClientHello is `first_bytes`, already read) answered with the installation CA's
// certificate for `name`; then HTTP/1.1 relayed with `headers` set on every request.
// The headers exist only here and on the connection to the destination: never in the
// sandbox, nor in the audit log (which has the destination and the bytes, as for any).
asio::awaitable<void> intercept(std::shared_ptr<server::InterceptionCa> ca,
                                std::shared_ptr<asio::ssl::context> upstream_context, tcp::socket inside,
                                tcp::socket outside, std::string name, std::string first_bytes,
                                server::HeaderList headers, EgressRecord record) {
  boost::system::error_code endpoint_error;
  record.address = outside.remote_endpoint(endpoint_error).address().to_string();
  auto refused = [&](const char* reason, std::string why, tcp::socket& socket) {
    record.reason = reason;
    record.refused = std::move(why);
    record.finish();
    refuse(socket);
  };
  if (!ca) {
    refused("connect",
            "a header rule applies to " + name +
                " and the TLS interception it needs has no CA (see the server's log)",
            inside);
    co_return;
  }
  server::TlsStream upstream(std::move(outside), *upstream_context);
  // SNI, and the name the certificate must carry (RFC 6125 through X509_VERIFY_PARAM).
  if (!SSL_set_tlsext_host_name(upstream.native_handle(), name.c_str()) ||
      !SSL_set1_host(upstream.native_handle(), name.c_str())) {
    refused("connect", "setting the TLS server name " + name, inside);
    co_return;
  }
  auto up_error = co_await handshake_within(upstream, [&]() -> asio::awaitable<boost::system::error_code> {
    auto [error] = co_await upstream.async_handshake(asio::ssl::stream_base::client, use_tuple);
    co_return error;
  });
  if (up_error) {
    const long verify = SSL_get_verify_result(upstream.native_handle());
    refused("connect",
            "TLS to " + name + ": " +
                (verify != X509_V_OK ? std::string("its certificate is not trusted (") +
                                           X509_verify_cert_error_string(verify) + ")"
                                     : up_error.message()),
            inside);
    co_return;
  }
  // (Held for as long as the stream: the kept leaves may be renewed meanwhile.)
  std::shared_ptr<asio::ssl::context> leaf_context;
  try {
    leaf_context = ca->server_context(name);
  } catch (const std::exception& e) {
    refused("connect", e.what(), inside);
    boost::system::error_code ignored;
    upstream.lowest_layer().close(ignored);
    co_return;
  }
  server::TlsStream downstream(std::move(inside), *leaf_context);
  auto down_error =
      co_await handshake_within(downstream, [&]() -> asio::awaitable<boost::system::error_code> {
        auto [error, used] = co_await downstream.async_handshake(asio::ssl::stream_base::server,
                                                                 asio::buffer(first_bytes), use_tuple);
        co_return error;
      });
  if (down_error) {
    // (The sandbox's client did not accept the installation CA, most often.)
    refused("invalid", "TLS from the sandbox for " + name + ": " + down_error.message(),
            downstream.next_layer());
    boost::system::error_code ignored;
    upstream.lowest_layer().close(ignored);
    co_return;
  }
  boost::system::error_code ignored;
  upstream.lowest_layer().set_option(tcp::no_delay(true), ignored);
  downstream.lowest_layer().set_option(tcp::no_delay(true), ignored);
  co_await server::relay_http_setting_headers(downstream, upstream, headers, record.bytes);
  record.finish();
}

}  // namespace

asio::awaitable<void> SandboxNetwork::egress_relay(SandboxNetwork* self, std::shared_ptr<SandboxLink> link,
                                                   tcp::socket inside, std::string name, bool proxy) {
  struct Count {
    std::shared_ptr<SandboxLink> link;
    ~Count() { --link->connections_; }
  } count{link};
  // The policy in force when the connection arrives: a reload applies to new connections.
  const auto config = self->config_.get();
  const auto policy = config->egress_policy();
  EgressRecord record;
  // The container's own options (E2B's network), as they are now: they narrow the
  // operator's policy, never widen it (both are checked).
  std::shared_ptr<const ops::SandboxEgress> own;
  if (auto container = link->container()) {
    record.owner = container->owner;
    record.container = container->id;
    own = service::egress_options(*container);
  }
  boost::system::error_code ec;
  const auto local = inside.local_endpoint(ec);
  if (ec || !local.address().is_v4()) co_return refuse(inside);
  record.port = local.port();
  uint32_t destination_address = local.address().to_v4().to_uint();
  // A refusal: a reset at once, or on the proxy an HTTP answer that says why (403 for a
  // destination the policy refuses, 400 for a request it cannot read, 502 for one it
  // could not reach), then the connection closed.
  bool proxy_answered = false;
  std::string refusal_answer;
  auto refuse_for = [&](const char* reason, std::string why) {
    record.reason = reason;
    record.refused = std::move(why);
    record.finish();
    if (!proxy || proxy_answered) return refuse(inside);
    const std::string_view kind = reason;
    const char* status = kind == "invalid"                        ? "400 Bad Request"
                         : kind == "resolve" || kind == "connect" ? "502 Bad Gateway"
                                                                  : "403 Forbidden";
    const std::string body = "sandboxd egress: " + record.refused + "\n";
    refusal_answer = std::string("HTTP/1.1 ") + status +
                     "\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  // Sends the proxy's refusal (when there is one) and closes.
  auto answer_refusal = [&]() -> asio::awaitable<void> {
    if (!refusal_answer.empty()) {
      co_await asio::async_write(inside, asio::buffer(refusal_answer), use_tuple);
      boost::system::error_code ignored;
      inside.shutdown(tcp::socket::shutdown_send, ignored);
      inside.close(ignored);
    }
  };
  // The caps on outside connections open at once, first (a refusal costs nothing more):
  // per sandbox, then per owner (all its sandboxes on this server).
  struct Held {
    SandboxNetwork* self;
    std::shared_ptr<SandboxLink> link;
    std::string owner;
    bool by_owner = false;
    ~Held() {
      --link->egress_connections_;
      if (by_owner) self->release_owner_egress(owner);
    }
  } held{self, link, record.owner};
  // (network.egress.maxConnectionsPerSandbox and maxConnectionsPerOwner as they are
  // now: a reload applies to the next connection.)
  const int sandbox_cap = config->egress_max_connections_per_sandbox;
  const int owner_cap = config->egress_max_connections_per_owner;
  if (++link->egress_connections_ > sandbox_cap) {
    refuse_for("sandbox_limit", "the sandbox has " + std::to_string(sandbox_cap) +
                                    " outside connections open (network.egress.maxConnectionsPerSandbox)");
    co_return co_await answer_refusal();
  }
  if (!self->hold_owner_egress(record.owner, owner_cap)) {
    refuse_for("owner_limit", "the owner's sandboxes have " + std::to_string(owner_cap) +
                                  " outside connections open (network.egress.maxConnectionsPerOwner)");
    co_return co_await answer_refusal();
  }
  held.by_owner = true;

  // What the code sent that goes out first: the peeked ClientHello or request head, or
  // on the proxy what followed its request (a plain request's head, rewritten).
  std::string first_bytes;
  bool connect_request = false;
  if (proxy) {
    // The destination is what the request names (checked below as any other).
    std::string head;
    auto request = co_await read_proxy_request(inside, head);
    if (request.state != server::ProxyRequest::State::Connect &&
        request.state != server::ProxyRequest::State::Forward) {
      refuse_for("invalid", request.error.empty() ? "no complete proxy request" : request.error);
      co_return co_await answer_refusal();
    }
    connect_request = request.state == server::ProxyRequest::State::Connect;
    record.port = request.port;
    first_bytes = connect_request ? head.substr(request.head_size)
                                  : request.forward_head + head.substr(request.head_size);
    if (auto literal = ops::parse_ipv4(request.host)) {
      // An address: allowed only by a CIDR entry that names this very port (as the
      // sandbox's own raw TCP listeners are), never a name's HTTP and HTTPS.
      destination_address = *literal;
      const auto rules = policy.network_rules();
      const bool port_named = std::ranges::any_of(rules, [&](const ops::EgressRule* rule) {
        return rule->port == record.port && ops::network_contains(rule->network, *literal);
      });
      if (!port_named) {
        record.destination = request.host;
        refuse_for("policy", "the address is not allowed by network.egress.allow on this port");
        co_return co_await answer_refusal();
      }
    } else {
      name = request.host;
      // A name through the proxy is reached on the ports it is reached on directly.
      const auto ports = policy.named_ports(name);
      if (record.port != kHttpPort && record.port != kHttpsPort &&
          std::ranges::find(ports, record.port) == ports.end()) {
        record.destination = name;
        refuse_for("policy", "port " + std::to_string(record.port) + " is not allowed for " + name +
                                 " (network.egress.allow names 80 and 443, and the ports an entry gives it)");
        co_return co_await answer_refusal();
      }
    }
  }

  std::vector<uint32_t> addresses;
  if (name.empty()) {
    // A CIDR entry's port (or an address named to the proxy): the address is the destination.
    record.destination = ops::format_ipv4(destination_address);
    if (!policy.allows_address(destination_address, record.port)) {
      refuse_for("policy", "the address is not allowed by network.egress.allow on this port");
      co_return co_await answer_refusal();
    }
    if (own && !own->allows_address(destination_address, record.port)) {
      refuse_for("policy", "the address is denied by the sandbox's own network options (denyOut)");
      co_return co_await answer_refusal();
    }
    addresses.push_back(destination_address);
  } else {
    record.destination = name;
    if (!policy.allows_name(name, record.port)) {
      refuse_for("policy", policy.why_refused(name, record.port));
      co_return co_await answer_refusal();
    }
    // A name the sandbox's allowOut lists goes wherever it resolves (E2B: allow wins over
    // deny); any other is subject to its denyOut, address by address.
    const bool listed_by_own = own && own->lists_name(name, record.port);
    if (own && !listed_by_own && own->denies_everything()) {
      refuse_for("policy", "not in the sandbox's own network options (allowOut)");
      co_return co_await answer_refusal();
    }
    // HTTPS and HTTP name their host: it must be the name this address was resolved
    // for. (The connection goes to that name whatever it says; a mismatch is refused so
    // that what the client asked for and what it reaches never differ.) The proxy's
    // requests name it in their request line.
    if (!proxy && (record.port == kHttpsPort || record.port == kHttpPort)) {
      const bool tls = record.port == kHttpsPort;
      auto found =
          co_await read_destination(inside, first_bytes, tls ? server::tls_server_name : server::http_host);
      using State = server::PeekedDestination::State;
      if (found.state == State::Invalid)
        co_return refuse_for("invalid", tls ? "not a TLS ClientHello" : "not an HTTP request");
      if (found.state == State::Found && found.host != name)
        co_return refuse_for("policy", std::string(tls ? "the TLS server name '" : "the Host '") +
                                           found.host + "' is not the name this connection was resolved for");
    }
    const auto& resolvers =
        config->egress_resolvers.empty() ? self->host_resolvers_ : config->egress_resolvers;
    auto lookup = co_await server::resolve_ipv4(inside.get_executor(), resolvers, name, kResolveTimeout);
    if (lookup.addresses.empty()) {
      refuse_for("resolve", "resolving " + name + ": " + lookup.error);
      co_return co_await answer_refusal();
    }
    for (uint32_t address : lookup.addresses) {
      if (policy.denies_address(address, record.port)) continue;
      if (host_only_address(address) && !policy.allows_address(address, record.port)) continue;
      if (own && !listed_by_own && !own->allows_address(address, record.port)) continue;
      addresses.push_back(address);
    }
    if (addresses.empty()) {
      refuse_for("policy", name + " resolves only to addresses the policy does not allow (" +
                               ops::format_ipv4(lookup.addresses.front()) + ")");
      co_return co_await answer_refusal();
    }
  }

  boost::beast::tcp_stream outside(inside.get_executor());
  std::vector<tcp::endpoint> endpoints;
  for (uint32_t address : addresses) endpoints.emplace_back(asio::ip::address_v4(address), record.port);
  outside.expires_after(kConnectTimeout);
  auto [connect_error, endpoint] = co_await outside.async_connect(endpoints, use_tuple);
  if (connect_error) {
    refuse_for("connect", "connecting: " + connect_error.message());
    co_return co_await answer_refusal();
  }
  record.address = endpoint.address().to_string();
  if (connect_request) {
    static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection established\r\n\r\n";
    auto [answer_error, answered] = co_await asio::async_write(inside, asio::buffer(kEstablished), use_tuple);
    proxy_answered = true;
    if (answer_error) co_return refuse_for("connect", "answering the CONNECT: " + answer_error.message());
  }
  // HTTPS to a host a header rule names (the sandbox's own, then the operator's, whose
  // headers win): TLS terminated here, the rule's headers set on each request. Only
  // there: any other connection goes on end to end, untouched.
  if (!name.empty() && record.port == kHttpsPort) {
    const ops::HeaderRule* own_rule = own ? ops::match_header_rule(own->header_rules, name) : nullptr;
    const ops::HeaderRule* operator_rule = ops::match_header_rule(config->egress_header_rules, name);
    if (own_rule || operator_rule) {
      server::HeaderList headers;
      for (const auto* rule : {own_rule, operator_rule})
        if (rule) headers.insert(headers.end(), rule->headers.begin(), rule->headers.end());
      co_return co_await intercept(self->interception_ca_, self->upstream_tls_, std::move(inside),
                                   outside.release_socket(), name, std::move(first_bytes), std::move(headers),
                                   std::move(record));
    }
  }
  if (!first_bytes.empty()) {
    auto [write_error, written] = co_await asio::async_write(outside, asio::buffer(first_bytes), use_tuple);
    if (write_error) {
      refuse_for("connect", "sending the first bytes: " + write_error.message());
      co_return co_await answer_refusal();
    }
  }
  outside.expires_never();
  record.bytes.a_to_b = first_bytes.size();
  boost::system::error_code ignored;
  outside.socket().set_option(tcp::no_delay(true), ignored);
  inside.set_option(tcp::no_delay(true), ignored);
  server::RelayBytes moved;
  co_await server::relay(std::move(inside), outside.release_socket(), &moved);
  record.bytes.a_to_b += moved.a_to_b;
  record.bytes.b_to_a = moved.b_to_a;
  record.finish();
}

bool SandboxNetwork::hold_owner_egress(const std::string& owner, int cap) {
  std::lock_guard lock(egress_owners_mutex_);
  int& open = egress_by_owner_[owner];
  if (open >= cap) {
    if (open == 0) egress_by_owner_.erase(owner);
    return false;
  }
  ++open;
  return true;
}

void SandboxNetwork::release_owner_egress(const std::string& owner) {
  std::lock_guard lock(egress_owners_mutex_);
  auto it = egress_by_owner_.find(owner);
  if (it != egress_by_owner_.end() && --it->second <= 0) egress_by_owner_.erase(it);
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
    return ApiError::authentication(
        "Missing API token: send $ANTHROPIC_AUTH_TOKEN as 'Authorization: Bearer <token>'");
  auto container = link->container();
  if (!container || container->deleted)
    return ApiError::authentication("This sandbox's container no longer exists");
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
