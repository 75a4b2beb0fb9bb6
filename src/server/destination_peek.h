// Where a client says it is going, from the first bytes it sends: the server name of a
// TLS ClientHello (SNI), or the Host header of an HTTP/1 request. The egress path reads
// it before connecting out, to refuse a connection that names another host than the one
// its address was resolved for. The bytes come from code in a sandbox: lengths are
// checked against what was received, never trusted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sandboxd::server {

struct PeekedDestination {
  enum class State {
    NeedMore,  // the ClientHello or the request head is not complete yet
    Found,     // `host`: the name it carries (lower-case, no port, no trailing dot)
    None,      // complete, and it names no host (a ClientHello without SNI, no Host)
    Invalid    // not TLS / not HTTP, or malformed
  } state = State::NeedMore;
  std::string host;
};

// The SNI host_name of a TLS ClientHello at the start of `data` (one record).
PeekedDestination tls_server_name(std::string_view data);

// The Host of the HTTP/1 request head at the start of `data` (or the authority of an
// absolute-form target).
PeekedDestination http_host(std::string_view data);

// The most either one needs before it must decide.
inline constexpr size_t kMaxPeekBytes = 16 * 1024 + 5;

// A request to a sandbox's HTTP proxy (the HTTP_PROXY/HTTPS_PROXY tools use): `CONNECT
// host:port`, or a plain request whose target is an absolute http:// URL, at the start
// of `data`. The destination is what the request line names; a plain request whose Host
// header names another host is refused (what the client asked for and what it reaches
// never differ), and its head is passed on with the target in origin form and without
// the Proxy-* headers (they are for this hop).
struct ProxyRequest {
  enum class State {
    NeedMore,  // the head is not complete yet
    Connect,   // CONNECT: answer 200 and relay
    Forward,   // a plain request: send `forward_head` and relay
    Invalid    // `error` says why (the proxy answers 400)
  } state = State::NeedMore;
  std::string host;  // lower-case, no trailing dot: a name or an IPv4 literal
  uint16_t port = 0;
  size_t head_size = 0;  // the request head's bytes, its blank line included
  std::string forward_head;
  std::string error;
};
ProxyRequest proxy_request(std::string_view data);

}  // namespace sandboxd::server
