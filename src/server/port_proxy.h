// Proxies one HTTP request to a server the caller has connected to already (a port a
// process in a sandbox listens on, reached by a surface of its own), and its answer back. Both bodies
// move as they arrive, never buffered whole; one upstream connection per request (the
// client's own connection stays kept alive with this server). A request that asks to
// upgrade (WebSocket) and is answered 101 turns the client's connection into a tunnel:
// after the 101, bytes move both ways until either side closes or nothing moves for
// the idle timeout, and the client's connection ends with the tunnel.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "server/http_server.h"

namespace sandboxd::server {

struct PortProxyOptions {
  // The longest time without a byte in either direction: waiting for the answer to
  // start, each piece of it, a tunnel's silence. Then the upstream connection closes.
  std::chrono::seconds idle_timeout{600};
  // Request fields never passed on (lower case), besides the hop-by-hop ones: the
  // credentials that admitted the request are this server's, not the upstream's.
  std::vector<std::string> drop_fields;
  // Held until the proxied exchange ends (the answer sent, the tunnel closed): a slot
  // of a connection bound.
  std::shared_ptr<void> hold;
  // What the upstream's failure to answer says (502): names what was proxied to.
  std::string no_answer_message = "The upstream server did not answer";
};

// Sends ctx's request, with `target` as its request target, on `upstream` (connected)
// and returns a response that streams the upstream's answer. An answer that never
// starts is a 502 with options.no_answer_message.
asio::awaitable<Result<Response>> proxy_request(RequestContext& ctx, tcp::socket upstream, std::string target,
                                                PortProxyOptions options);

}  // namespace sandboxd::server
