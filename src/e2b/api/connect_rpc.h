// The Connect protocol (connectrpc.com/docs/protocol), as E2B's SDKs speak it to envd:
// the JSON codec only. A unary call is a POST of one JSON message (application/json)
// answered by one, or by an error with the HTTP status of its code; a server-streaming
// call sends one enveloped message (application/connect+json: a flags byte, a 4-byte
// big-endian length, the JSON) and is answered with 200 and enveloped messages, the last
// one flagged end-of-stream and carrying the error, if any.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "e2b/api/common.h"
#include "e2b/api/connect_envelope.h"  // parse_envelope, parse_message, the flags

namespace sandboxd::e2b::connect_rpc {

// The largest request message of most calls (a pid, a path, a signal: small by
// nature); a call that needs more says so (a process's start, a stdin write).
inline constexpr size_t kSmallMessage = 64 * 1024;

// The Connect code of an error ("not_found", "invalid_argument", ...).
std::string code_of(const ApiError& error);
// {"code": "...", "message": "..."}
boost::json::object error_object(const ApiError& error);

// A unary call's error: the code's HTTP status and the error object.
server::StringResponse unary_error(const ApiError& error);
server::StringResponse unary_ok(const boost::json::object& message);
// unary_error and stream_error as a route's error shape (server::RouteOptions): an error
// answered before the handler ran (authentication, the cluster's routing) reads as one
// of the RPC's own.
inline server::Response unary_shape(const ApiError& error) { return server::Response{unary_error(error)}; }
server::Response stream_shape(const ApiError& error);

// A unary call's request message: the body, as JSON (415 for another codec), at most
// `limit` bytes (413 beyond: resource_exhausted) and kMaxJsonValues values (400,
// checked before it is parsed).
asio::awaitable<Result<boost::json::object>> read_unary(RequestContext& ctx, size_t limit = kSmallMessage);
// A server-streaming call's one request message, from its envelope (the same bounds).
asio::awaitable<Result<boost::json::object>> read_stream_request(RequestContext& ctx,
                                                                 size_t limit = kSmallMessage);

// An enveloped message (`end_stream` flags the last).
std::string envelope(std::string_view json, bool end_stream = false);
// The end of a stream: {} or {"error": {...}}.
std::string end_of_stream(const ApiError* error);

// The header of a streaming answer (200, application/connect+json).
http::response<http::empty_body> stream_header();
// A streaming call that fails before its stream begins: 200 and only the end of stream.
server::StringResponse stream_error(const ApiError& error);

// Connect-Timeout-Ms, when the client sent one (0: none).
std::chrono::milliseconds timeout_of(const RequestContext& ctx);

// A unary route whose errors answer in Connect's shape.
template <typename Fn>
server::Handler unary_route(ApiContext& api, Fn fn) {
  return [&api, fn](server::RequestContext& ctx) -> asio::awaitable<Result<Response>> {
    Result<Response> result = co_await fn(api, ctx);
    if (!result) co_return Response{unary_error(result.error())};
    co_return result;
  };
}

// A streaming route whose errors before the stream answer as an end of stream.
template <typename Fn>
server::Handler stream_route(ApiContext& api, Fn fn) {
  return [&api, fn](server::RequestContext& ctx) -> asio::awaitable<Result<Response>> {
    Result<Response> result = co_await fn(api, ctx);
    if (!result) co_return Response{stream_error(result.error())};
    co_return result;
  };
}

}  // namespace sandboxd::e2b::connect_rpc
