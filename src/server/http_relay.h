// Relays one HTTP request to another sandboxd replica and streams its answer back (a
// cluster's replica relaying a request for a container that another replica serves).
// Both bodies move as they arrive: the request body straight from the client's socket
// to the holder's, the answer (SSE included) chunk by chunk back, never buffered
// whole. Headers pass through except the hop-by-hop ones; a marker header says the
// request was relayed, so it is relayed at most once. The holder authenticates the
// request itself (Authorization and x-api-key pass through).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <string>
#include <string_view>

#include "base/error.h"
#include "server/http_server.h"
#include "server/upstream_pool.h"

namespace sandboxd::server {

// The marker of a relayed request; its value is the relaying replica's id.
inline constexpr std::string_view kRelayedByHeader = "Sandboxd-Relayed-By";

struct RelayTarget {
  std::string host;
  std::string port;
};

// http://HOST[:PORT][/] (a replica's advertiseUrl); nullopt-like error otherwise.
Result<RelayTarget> parse_relay_target(std::string_view url);

struct RelayOptions {
  std::string via;  // this replica's id (the marker's value)
  std::chrono::seconds connect_timeout{5};
  // Longest wait for the holder's answer to start, and then for each piece of it (the
  // holder bounds its own work: a command's timeout, the model's).
  std::chrono::seconds answer_timeout{3600};
  int retry_after_sec = 1;  // on the 502/503 the relay answers when the holder cannot
  // Keep-alive connections to reuse (server/upstream_pool.h); none: one connection per
  // request, closed after its answer.
  std::shared_ptr<UpstreamPool> pool;
};

// Sends ctx's request (its body read from the client as it goes) to `target` and
// returns a response that streams the holder's answer. A holder that cannot be reached
// is a 503 overloaded_error, one that breaks off before answering a 502; both with
// Retry-After and no detail of why (that goes to the log).
asio::awaitable<Result<Response>> relay_request(RequestContext& ctx, const RelayTarget& target,
                                                const RelayOptions& options);

// Asks the replica at `target` one small question on ctx's behalf: GET `path` with the
// client's credentials (Authorization, x-api-key), the relay marker and `marker` (a
// header name, sent as "1"). The answer's status and body (at most `body_limit`
// bytes); 503/502 as relay_request when the replica cannot be reached or breaks off.
struct FetchedAnswer {
  unsigned status = 0;
  std::string body;
};
asio::awaitable<Result<FetchedAnswer>> fetch_from_replica(RequestContext& ctx, const RelayTarget& target,
                                                          const std::string& path, std::string_view marker,
                                                          const RelayOptions& options,
                                                          size_t body_limit = 1u << 20);

}  // namespace sandboxd::server
