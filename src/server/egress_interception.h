// TLS interception for the egress header rules (docs/network.md#header-rules): where a
// rule names an outside host, the server terminates the sandbox's TLS to that host with a
// certificate of its own CA, connects to the host with TLS verified against the host's
// trust store, and relays HTTP/1.1 requests, setting the rule's headers on each. Nowhere
// else: a connection to a host without a rule is relayed end to end, untouched.
//
// The CA is per installation: made once (an ECDSA P-256 key and a self-signed certificate
// valid for ten years) into a folder of the data dir that only root reads (0700, the key
// 0600), and loaded from there at every start after, so that the sandboxes' trust in it
// lasts. Its certificate is public (the sandboxes trust it); its key never leaves that
// folder and the server's memory. A leaf certificate is made per host name on its first
// interception (one key for all of them, made at start), valid for 30 days, and kept
// (at most kMaxLeaves; renewed a day before it expires).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "server/relay.h"

namespace sandboxd::server {

namespace asio = boost::asio;

class InterceptionCa {
 public:
  // Leaf certificates kept at once; past it the oldest made goes (made again when needed).
  static constexpr size_t kMaxLeaves = 1024;

  // Loads `dir`/ca.pem and `dir`/ca.key, or makes them when neither exists. Throws
  // std::runtime_error naming the call and path that failed (a key without its
  // certificate, or one that does not match it, is an error: never silently replaced).
  static std::shared_ptr<InterceptionCa> load_or_create(const std::string& dir);
  ~InterceptionCa();
  InterceptionCa(const InterceptionCa&) = delete;
  InterceptionCa& operator=(const InterceptionCa&) = delete;

  // The CA's certificate (PEM), for the sandboxes' trust stores.
  const std::string& certificate_pem() const { return certificate_pem_; }
  // A server context presenting a certificate for `host` (a normalized DNS name), signed
  // by the CA, that offers HTTP/1.1 only (ALPN). Thread-safe.
  std::shared_ptr<asio::ssl::context> server_context(const std::string& host);

 private:
  struct Keys;
  explicit InterceptionCa(std::unique_ptr<Keys> keys, std::string certificate_pem);
  struct Leaf {
    std::shared_ptr<asio::ssl::context> context;
    std::chrono::system_clock::time_point renew_at;
    uint64_t made = 0;
  };
  std::unique_ptr<Keys> keys_;
  std::string certificate_pem_;
  std::mutex mutex_;
  std::map<std::string, Leaf> leaves_;
  uint64_t made_ = 0;
};

// The client context for the intercepted hosts: the host's trust store (OpenSSL's
// default paths) plus, when given, the PEM file `extra_ca_file`. Throws std::runtime_error
// when that file cannot be loaded.
std::shared_ptr<asio::ssl::context> upstream_tls_context(const std::string& extra_ca_file);

using TlsStream = asio::ssl::stream<asio::ip::tcp::socket>;
using HeaderList = std::vector<std::pair<std::string, std::string>>;

// Relays HTTP/1.1 from `inside` (the sandbox's side, its handshake done) to `outside`
// (the host's, verified) and the answers back, one exchange at a time, setting `headers`
// on every request (replacing a header of the same name the request carries). Ends when
// either side ends its connection, a message is not HTTP/1.1 the relay can read, or a
// connection upgrade is asked for (refused: the headers could not be set on what
// follows). `bytes` counts the bytes of the messages each way (a_to_b: to the host).
asio::awaitable<void> relay_http_setting_headers(TlsStream& inside, TlsStream& outside,
                                                 const HeaderList& headers, RelayBytes& bytes);

}  // namespace sandboxd::server
