// The sandbox's network, seen from the server. A sandbox has no route anywhere: what it
// can reach are listeners that its PID 1 opened on the sandbox's own loopback (see
// runtime::Spec::listeners), whose connections the server takes:
//   - the sandboxd API, as `sandboxd.internal` (port 80): served by the HTTP server
//     itself, each request tagged with the sandbox it came from;
//   - each allow-listed service of external.opensandbox.codeExecution.internal.services,
//     by its name, on its port: relayed (splice) to the service's host and port.
//   - with Kubernetes NetworkPolicy peers in that list, what the peers select now
//     (kubernetes/peer_watch.h): their Service names answered by a DNS server the
//     server runs on the sandbox's loopback (127.0.2.53), and listeners for their
//     Service, pod and ipBlock addresses and ports, opened and closed as the set
//     changes (every address is local in such a sandbox, runtime/netns.h). Whether a
//     new connection is relayed, and where, is decided when it arrives, from the set
//     in force then.
// Names resolve through the sandbox's /etc/hosts, one loopback address per name (and
// for the peers through that DNS server); any other address or port is refused at
// once by the sandbox's own kernel, or by the server with a reset.
//
// Code in a sandbox calls the model with ANTHROPIC_BASE_URL and ANTHROPIC_AUTH_TOKEN
// (service/sandbox_credentials.h). The token is bound to the container (and the nesting depth) in where and
// how long it is accepted: only by the messages endpoints, only on connections from that container's sandbox,
// only while the container exists. What a call may do is the owner's (the contract: "with the permissions of
// the user who sent the request"): it acts as the container's owner, so it may name any of the owner's
// containers; with no container named, code execution runs in the container the call came from. The token is
// derived from a per-container secret that never leaves the server, so it cannot be turned into the owner's
// token or used from anywhere else.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/ip/udp.hpp>
#include <map>
#include <set>
#include "base/unique_fd.h"
#include "kubernetes/peer_watch.h"
#include "ops/config.h"
#include "ops/live_config.h"
#include "runtime/runtime.h"
#include "server/auth.h"
#include "server/egress_interception.h"
#include "server/http_server.h"
#include "service/container_service.h"
#include "service/sandbox_credentials.h"
#include "service/sandbox_networking.h"

namespace sandboxd::api {

namespace asio = boost::asio;
using service::Container;

// What the authenticator learned of a request made from inside a sandbox: its nesting
// depth (0 would be a user's own request; n for a request made by code that a request
// of depth n-1 runs) and its container (the request's default container).
struct SandboxCaller : server::CallerDetails {
  int nesting_depth = 0;
  std::string container;
};
// The request's SandboxCaller, or null for a user's own request.
const SandboxCaller* sandbox_caller(const server::RequestContext& ctx);

// One running sandbox's listeners and the container it serves now (a pre-started
// sandbox gets one when claimed). The origin of the API requests it makes.
class SandboxLink : public server::ConnectionOrigin,
                    public service::NetworkLink,
                    public std::enable_shared_from_this<SandboxLink> {
 public:
  explicit SandboxLink(asio::io_context& io) : strand_(asio::make_strand(io)) {}

  void bind(const std::shared_ptr<Container>& container) override;
  std::shared_ptr<Container> container() const;
  int connections() const { return connections_.load(); }

 private:
  friend class SandboxNetwork;
  asio::strand<asio::io_context::executor_type> strand_;
  mutable std::mutex mutex_;
  std::weak_ptr<Container> container_;
  std::vector<std::unique_ptr<asio::ip::tcp::acceptor>> acceptors_;  // on strand_
  std::atomic<int> connections_{0};
  bool closed_ = false;  // on strand_
  // The NetworkPolicy peers' part (on strand_): the sandbox's network namespace, its
  // DNS socket and the listeners the current set needs.
  std::string name_;
  UniqueFd netns_;
  std::unique_ptr<asio::ip::udp::socket> dns_;
  std::shared_ptr<asio::ip::tcp::acceptor> dns_tcp_;  // DNS over TCP, same address
  // The sandbox, to listen inside it where the server listens in its namespace (the
  // gvisor tier relays the network from there: runtime::Sandbox::listen_inside).
  std::weak_ptr<runtime::Sandbox> sandbox_;
  std::map<kubernetes::ListenAddress, std::shared_ptr<asio::ip::tcp::acceptor>> peer_acceptors_;
  bool reconciling_ = false, reconcile_again_ = false;
  size_t picks_ = 0;
  // The egress part (on strand_): each outside name the sandbox's resolver answered, with
  // an address of its own in the sandbox (egress_address(index)) and its listeners; the
  // listeners for the allowed CIDRs' ports and the HTTP proxy's, as the policy in force
  // wants them (reconcile_egress).
  std::vector<std::string> egress_names_;
  std::vector<std::shared_ptr<asio::ip::tcp::acceptor>> egress_acceptors_;
  std::map<uint16_t, std::shared_ptr<asio::ip::tcp::acceptor>> egress_port_acceptors_;
  std::shared_ptr<asio::ip::tcp::acceptor> proxy_acceptor_;
  std::atomic<int> egress_connections_{0};  // outside connections open (network.egress caps)
};

class SandboxNetwork : public service::SandboxNetworking {
 public:
  // `tokens`: the owners' (token, owner) pairs, for the public listener.
  // `interception_ca`: the installation's CA for the header rules, or null when it could
  // not be loaded (an HTTPS connection a rule applies to is then refused).
  // `peers`: the watched NetworkPolicy peers, or null when the list has none.
  SandboxNetwork(asio::io_context& io, server::HttpServer& http, const ops::LiveConfig& config,
                 const std::vector<std::pair<std::string, std::string>>& tokens,
                 std::shared_ptr<server::InterceptionCa> interception_ca,
                 std::shared_ptr<kubernetes::PeerWatch> peers = nullptr);
  ~SandboxNetwork() override;

  // The /etc/hosts lines and listeners every sandbox is started with.
  void plan(runtime::SandboxOptions& options) const override;
  std::string nameserver() const override;

  // Takes the started sandbox's listeners and serves them until it stops.
  asio::awaitable<std::shared_ptr<service::NetworkLink>> attach(
      const std::shared_ptr<runtime::Sandbox>& sandbox) override;

  // After a reload: every running sandbox (and every waiting spare) gets the listeners the
  // policy now names (a CIDR entry's port, the HTTP proxy) and loses those it no longer
  // names. Completes once they are open.
  asio::awaitable<void> egress_policy_reloaded();

  // Authenticates every request: a sandbox's connections with its scoped token (messages
  // endpoints only), the public listener with the owners' tokens.
  Result<void> authenticate(server::RequestContext& ctx) const;

  // The CA the header rules' interception signs with (PEM; empty when there is none), for
  // the sandboxes' trust stores.
  std::string interception_ca_certificate() const {
    return interception_ca_ ? interception_ca_->certificate_pem() : std::string();
  }

 private:
  struct Target {
    std::string name, host;
    uint16_t port = 0;
  };
  static asio::awaitable<void> accept_loop(SandboxNetwork* self, std::shared_ptr<SandboxLink> link,
                                           size_t index);
  static asio::awaitable<void> relay_to(std::shared_ptr<SandboxLink> link, asio::ip::tcp::socket inside,
                                        Target target);
  static void close_link(std::shared_ptr<SandboxLink> link);
  // The resolver of a link (for the peers, the egress policy or both), the listeners of
  // the peers' current set.
  static asio::awaitable<void> start_resolver(SandboxNetwork* self, std::shared_ptr<SandboxLink> link);
  static asio::awaitable<void> reconcile(SandboxNetwork* self, std::shared_ptr<SandboxLink> link);
  static asio::awaitable<void> serve_dns(SandboxNetwork* self, std::shared_ptr<SandboxLink> link);
  // DNS over TCP (RFC 7766: each message after its two-byte length), for resolvers that
  // ask that way (`options use-vc`, a truncated answer): the same answers.
  static asio::awaitable<void> serve_dns_tcp(SandboxNetwork* self, std::shared_ptr<SandboxLink> link);
  static asio::awaitable<void> dns_tcp_connection(SandboxNetwork* self, std::shared_ptr<SandboxLink> link,
                                                  asio::ip::tcp::socket socket);
  // The answer to one query (nullopt: dropped, as a malformed one is).
  static asio::awaitable<std::optional<std::string>> dns_reply(SandboxNetwork* self,
                                                               std::shared_ptr<SandboxLink> link,
                                                               std::string query);
  static asio::awaitable<void> peer_accept_loop(SandboxNetwork* self, std::shared_ptr<SandboxLink> link,
                                                kubernetes::ListenAddress address);
  void peers_changed();
  // The egress part (network.egress, docs/network.md): whether a sandbox started now gets
  // the resolver; a name's address in `link` (its listeners opened first), nullopt past the
  // per-sandbox bound; the listeners of the CIDR entries' ports; each connection's check,
  // connection out and relay.
  bool gives_resolver() const;
  struct EgressAnswer {
    std::optional<uint32_t> address;  // none: the name does not resolve
    std::string error;                // the resolvers failed (not "no such name")
  };
  static asio::awaitable<EgressAnswer> egress_address(SandboxNetwork* self, std::shared_ptr<SandboxLink> link,
                                                      std::string name);
  static asio::awaitable<void> reconcile_egress(SandboxNetwork* self, std::shared_ptr<SandboxLink> link);
  // The next connection on a peer's or an egress listener that the sandbox's connection
  // limit lets in (others are refused and logged as to `what`); none once it closes.
  static asio::awaitable<std::optional<asio::ip::tcp::socket>> accept_within_limit(
      SandboxNetwork* self, std::shared_ptr<SandboxLink> link,
      std::shared_ptr<asio::ip::tcp::acceptor> acceptor, const char* what);
  // Accepts on an opened listener (-1: none) for `name` ("" for a CIDR port: the address
  // connected to is the destination), or as the HTTP proxy (`proxy`: each request names
  // its destination); null when there is nothing to accept on.
  static std::shared_ptr<asio::ip::tcp::acceptor> serve_egress_listener(SandboxNetwork* self,
                                                                        std::shared_ptr<SandboxLink> link,
                                                                        int fd, const std::string& name,
                                                                        bool proxy = false);
  static asio::awaitable<void> egress_accept_loop(SandboxNetwork* self, std::shared_ptr<SandboxLink> link,
                                                  std::shared_ptr<asio::ip::tcp::acceptor> acceptor,
                                                  std::string name, bool proxy);
  static asio::awaitable<void> egress_relay(SandboxNetwork* self, std::shared_ptr<SandboxLink> link,
                                            asio::ip::tcp::socket inside, std::string name, bool proxy);
  // Listeners on `addresses` in the link's namespace (the blocking pool's work); -1 for
  // each that could not be opened (logged as `what`).
  static asio::awaitable<std::vector<int>> open_listeners_in(std::shared_ptr<SandboxLink> link,
                                                             std::vector<kubernetes::ListenAddress> addresses,
                                                             const char* what);

  // The per-owner cap on outside connections open at once: takes one of `owner`'s
  // (false when it has `cap` open already), gives it back.
  bool hold_owner_egress(const std::string& owner, int cap);
  void release_owner_egress(const std::string& owner);

  asio::io_context& io_;
  server::HttpServer& http_;
  const ops::LiveConfig& config_;
  std::vector<std::string> host_resolvers_;  // the host's, when network.egress.resolvers is empty
  server::TokenAuth owners_;
  std::vector<Target> targets_;  // [0] is the API
  int max_connections_;
  std::shared_ptr<kubernetes::PeerWatch> peers_;
  std::set<uint16_t> fixed_ports_;  // held by the API's and the services' listeners
  std::mutex links_mutex_;
  std::vector<std::weak_ptr<SandboxLink>> links_;  // the links with a resolver (peers, egress)
  std::mutex egress_owners_mutex_;
  std::map<std::string, int> egress_by_owner_;  // outside connections open, by owner
  // The header rules' TLS interception (server/egress_interception.h): the installation's
  // CA (null when it could not be loaded or made: a connection a rule applies to is then
  // refused, never relayed without its headers) and the context upstreams are verified
  // with (network.egress.upstreamCaFile, read at start).
  std::shared_ptr<server::InterceptionCa> interception_ca_;
  std::shared_ptr<asio::ssl::context> upstream_tls_;
  // The watch outlives this object (others share it) and calls back from its own
  // strand: the callback reaches this object only through here, cleared (under the
  // lock) when it goes, so a change arriving during shutdown finds nobody to call.
  struct ChangeTarget {
    std::mutex mutex;
    SandboxNetwork* network = nullptr;
  };
  std::shared_ptr<ChangeTarget> change_target_ = std::make_shared<ChangeTarget>();
};

}  // namespace sandboxd::api
