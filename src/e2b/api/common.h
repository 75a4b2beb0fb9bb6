// What the E2B surfaces share (e2b/api/control_plane.cc; e2b/api/envd.cc, envd's process
// and filesystem RPCs and /files; e2b/api/interpreter.cc, the code interpreter's /execute
// and /contexts; e2b/api/ports.cc): E2B's error shape and the addressing of a sandbox by
// headers.
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
#include "e2b/api/surfaces.h"
#include "e2b/service/sandboxes.h"
#include "e2b/service/snapshots.h"

namespace sandboxd::e2b {

// The core surfaces' names E2B's surfaces use (api/routes.h).
namespace asio = boost::asio;
namespace http = server::http;
using api::json_ok;
using api::page_limit;
using api::parse_json_object;
using server::RequestContext;
using server::Response;
using service::Container;
using service::ContainerService;

// Each surface's routes (install_surfaces, e2b/api/surfaces.h, installs them all).
void install_control_plane_routes(server::HttpServer& http, ApiContext& api);  // e2b/api/control_plane.cc
void install_envd_routes(server::HttpServer& http, ApiContext& api,
                         std::vector<std::pair<std::string, std::string>> tokens);  // e2b/api/envd.cc
void install_interpreter_routes(server::HttpServer& http, ApiContext& api);         // e2b/api/interpreter.cc
void install_port_routes(server::HttpServer& http, ApiContext& api);                // e2b/api/ports.cc

// The headers E2B's SDKs present their token in besides x-api-key: X-Access-Token on
// every call to a sandbox (the envdAccessToken, see above), e2b-traffic-access-token on
// the code interpreter's context calls and a sandbox's ports (the same token).
inline constexpr std::string_view kAccessTokenHeader = "x-access-token";
inline constexpr std::string_view kTrafficTokenHeader = "e2b-traffic-access-token";

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

// E2B's error body as a route's error shape (server::RouteOptions::error_shape): every
// error of the route, answered before its handler ran too (authentication, the
// cluster's routing), in the shape its clients read. (envd's RPCs answer in Connect's:
// connect_rpc::unary_shape, stream_shape.)
inline Response e2b_error_shape(const ApiError& error) { return Response{e2b_error_response(error)}; }

// The options of a control-plane route: its errors in E2B's shape, its container where
// `container` says (none: a route for records only).
inline server::RouteOptions e2b_options(server::ContainerScope container = {}) {
  return {.container = std::move(container), .error_shape = e2b_error_shape};
}

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
// their container; their errors in `shape` (E2B's, or Connect's for envd's RPCs).
inline server::RouteOptions in_addressed_sandbox(server::ErrorShape shape = e2b_error_shape) {
  return {.container = server::ContainerScope::header(std::string(kSandboxIdHeader)),
          .error_shape = std::move(shape)};
}

// The sandbox a sandbox-addressed request names (E2b-Sandbox-Id), checked to be the
// caller's and the request to be for `port` (E2b-Sandbox-Port); its container opened.
struct AddressedSandbox {
  e2b::Sandbox sandbox;
  std::shared_ptr<Container> container;
};
// nullopt `port`: any port (the proxy to a sandbox's own ports, e2b/api/ports.cc).
asio::awaitable<Result<AddressedSandbox>> open_addressed_sandbox(ApiContext& api, RequestContext& ctx,
                                                                 std::optional<uint16_t> port);

// The sandbox's other ports (getHost(port)): the host router sends a request for
// PORT-SANDBOXID.<domain> below this path when PORT is neither envd's nor the code
// interpreter's, and e2b/api/ports.cc proxies it to that port in the sandbox.
inline constexpr std::string_view kPortsPath = "/e2b/ports";
// Requests being proxied and WebSockets open at once to one sandbox's ports (each holds
// a connection into the sandbox); past it a 429.
inline constexpr size_t kMaxProxiedConnectionsPerSandbox = 64;
// A proxied exchange with nothing moving either way this long is closed.
inline constexpr std::chrono::seconds kProxyIdleTimeout{600};

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

}  // namespace sandboxd::e2b
