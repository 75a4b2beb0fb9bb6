// What the E2B surfaces share (api/e2b_api.cc, the control plane; api/e2b_envd.cc,
// envd's process and filesystem RPCs and /files; the code interpreter's /execute and
// /contexts): E2B's error shape and the addressing of a sandbox by headers.
//
// With E2B_SANDBOX_URL set, E2B's SDKs send every call meant for a sandbox to that one
// URL and name the sandbox and the port inside it in two headers (E2b-Sandbox-Id,
// E2b-Sandbox-Port: 49983 for envd, 49999 for the code interpreter). They authenticate
// with X-Access-Token: the envdAccessToken the control plane answered with, which here
// is the caller's own sandboxd token (so a sandbox is reached as its owner, and another
// owner's sandbox is not found).
#pragma once

#include <boost/json/object.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "api/routes.h"
#include "e2b/service/sandboxes.h"
#include "e2b/service/snapshots.h"

namespace sandboxd::api {

inline constexpr uint16_t kEnvdPort = 49983;
inline constexpr uint16_t kCodeInterpreterPort = 49999;
// The envd version the control plane reports: the SDKs turn features on by it (stdin
// close, raw uploads, file metadata, entries in watch events), so it names the newest
// behaviour this server implements: everything the SDKs gate on up to 0.6.4.
inline constexpr std::string_view kEnvdVersion = "0.6.4";

// The HTTP status of each kind of error on E2B's surfaces (the control plane, envd, the
// code interpreter, the port proxy; Connect's RPCs answer with it too). A switch over
// every kind: a new kind left out is a -Wswitch warning.
HttpStatus e2b_status_of(ErrorKind kind);

// E2B's error body, {"code": <HTTP status>, "message": "..."}, with Retry-After for
// 429 and 503 (the SDKs map 401, 404, 429 and 503 to their own exception types).
server::StringResponse e2b_error_response(const ApiError& error);

// An error of an E2B route answered before its handler ran (the cluster's routing), in
// the shape the route's handler answers with: Connect's for envd's RPCs, E2B's for the
// rest. nullopt for a route that is not E2B's.
std::optional<Response> e2b_error_for_route(std::string_view route, const ApiError& error);

// A route handler whose errors answer in E2B's shape instead of sandboxd's own.
template <typename Fn>
server::Handler e2b_route(ApiContext& api, Fn fn) {
  return [&api, fn](server::RequestContext& ctx) -> asio::awaitable<Result<Response>> {
    Result<Response> result = co_await fn(api, ctx);
    if (!result) co_return Response{e2b_error_response(result.error())};
    co_return result;
  };
}

// The header that names a sandbox-addressed request's sandbox (the SDKs' E2B_SANDBOX_URL,
// or the host router from PORT-SANDBOXID.<domain>); the sandbox is a container of that id.
inline constexpr std::string_view kSandboxIdHeader = "E2b-Sandbox-Id";
// Where the sandbox-addressed routes (envd's, the code interpreter's, the ports') find
// their container.
inline server::RouteOptions in_addressed_sandbox() {
  return {.container = server::ContainerScope::header(std::string(kSandboxIdHeader))};
}

// The sandbox a sandbox-addressed request names (E2b-Sandbox-Id), checked to be the
// caller's and the request to be for `port` (E2b-Sandbox-Port); its container opened.
struct AddressedSandbox {
  service::E2bSandbox sandbox;
  std::shared_ptr<Container> container;
};
// nullopt `port`: any port (the proxy to a sandbox's own ports, api/e2b_ports.cc).
asio::awaitable<Result<AddressedSandbox>> open_addressed_sandbox(ApiContext& api, RequestContext& ctx,
                                                                 std::optional<uint16_t> port);

// The sandbox's other ports (getHost(port)): the host router sends a request for
// PORT-SANDBOXID.<domain> below this path when PORT is neither envd's nor the code
// interpreter's, and api/e2b_ports.cc proxies it to that port in the sandbox.
inline constexpr std::string_view kPortsPath = "/e2b/ports";
// Requests being proxied and WebSockets open at once to one sandbox's ports (each holds
// a connection into the sandbox); past it a 429.
inline constexpr size_t kMaxProxiedConnectionsPerSandbox = 64;
// A proxied exchange with nothing moving either way this long is closed.
inline constexpr std::chrono::seconds kProxyIdleTimeout{600};
void install_e2b_port_routes(server::HttpServer& http, ApiContext& api);

// What an E2B request body may hold. A parsed JSON value costs far more than its text
// (a value of 16 bytes or more for each `0,` in an array, an allocation for each object
// or array): the count of values is checked on the text before anything is parsed, so
// that parsing a body of the surface's size limit costs about its size again, never
// tens of times it. Every E2B message is a few fields, a command's arguments and
// variables, metadata: far fewer values than this.
inline constexpr size_t kMaxJsonValues = 16 * 1024;

// At least how many values the JSON text `text` holds (counted without parsing: each
// comma, colon, '[' and '{' outside strings), or a 400 beyond `max_values`.
Result<void> check_json_values(std::string_view text, size_t max_values = kMaxJsonValues);
// A JSON object body, checked by check_json_values first.
Result<boost::json::object> parse_e2b_object(std::string_view body);

// Unix milliseconds as RFC 3339 (UTC, milliseconds): E2B's date-time fields.
std::string e2b_time(int64_t unix_ms);
// An RFC 3339 date-time (what the SDKs send: toISOString()) as Unix milliseconds;
// nullopt when it is not one.
std::optional<int64_t> parse_e2b_time(std::string_view text);

}  // namespace sandboxd::api
