#include "e2b/api/connect_rpc.h"

#include <boost/json.hpp>
#include <charconv>

#include "e2b/api/common.h"

namespace sandboxd::e2b::connect_rpc {
namespace {

namespace json = boost::json;

bool media_type_is(std::string_view content_type, std::string_view expected) {
  const size_t semicolon = content_type.find(';');
  std::string_view type = content_type.substr(0, semicolon);
  while (!type.empty() && type.back() == ' ') type.remove_suffix(1);
  return boost::beast::iequals(type, expected);
}

ApiError unsupported_codec(std::string_view content_type, std::string_view expected) {
  return ApiError::unsupported_media_type(
      "This server speaks Connect with the JSON codec only (Content-Type: " + std::string(expected) +
      "), not '" + std::string(content_type.substr(0, 100)) + "'");
}

}  // namespace

// Connect's code of each kind (connectrpc.com/docs/protocol#error-codes); the HTTP
// status is E2B's (e2b/api/common.h). A switch over every kind: a new kind left out is
// a -Wswitch warning.
std::string code_of(const ApiError& error) {
  switch (error.kind) {
    case ErrorKind::invalid:
    case ErrorKind::unsupported_media_type:
      return "invalid_argument";
    case ErrorKind::unauthenticated:
      return "unauthenticated";
    case ErrorKind::forbidden:
      return "permission_denied";
    case ErrorKind::not_found:
      return "not_found";
    case ErrorKind::conflict:
      return "already_exists";
    case ErrorKind::too_large:
    case ErrorKind::rate_limited:
    case ErrorKind::insufficient_storage:
      return "resource_exhausted";
    case ErrorKind::not_implemented:
      return "unimplemented";
    case ErrorKind::upstream_failed:
    case ErrorKind::unavailable:
    case ErrorKind::overloaded:
      return "unavailable";
    case ErrorKind::billing:
    case ErrorKind::range_not_satisfiable:
    case ErrorKind::method_not_allowed:
    case ErrorKind::headers_too_large:
    case ErrorKind::upstream_overloaded:
    case ErrorKind::internal:
      return "internal";
  }
  return "internal";
}

json::object error_object(const ApiError& error) {
  return json::object{{"code", code_of(error)}, {"message", error.message}};
}

server::StringResponse unary_error(const ApiError& error) {
  auto res = server::json_response(e2b_status_of(error.kind), json::serialize(error_object(error)));
  if (error.retry_after) res.set(http::field::retry_after, std::to_string(*error.retry_after));
  return res;
}

server::StringResponse unary_ok(const json::object& message) {
  return server::json_response(HttpStatus::ok, json::serialize(message));
}

asio::awaitable<Result<json::object>> read_unary(RequestContext& ctx, size_t limit) {
  const auto content_type = ctx.header_value(http::field::content_type);
  if (!media_type_is(content_type, "application/json"))
    co_return unsupported_codec(content_type, "application/json");
  auto body = co_await ctx.read_body(limit);
  if (!body) co_return body.error();
  if (body->empty()) co_return json::object{};
  // Counted before it is parsed: a message of many small values costs many times its size.
  if (auto counted = check_json_values(*body); !counted) co_return counted.error();
  co_return parse_message(*body);
}

asio::awaitable<Result<json::object>> read_stream_request(RequestContext& ctx, size_t limit) {
  const auto content_type = ctx.header_value(http::field::content_type);
  if (!media_type_is(content_type, "application/connect+json"))
    co_return unsupported_codec(content_type, "application/connect+json");
  auto body = co_await ctx.read_body(limit + 5);
  if (!body) co_return body.error();
  if (body->size() > 5)
    if (auto counted = check_json_values(std::string_view(*body).substr(5)); !counted)
      co_return counted.error();
  co_return parse_envelope(*body);
}

std::string envelope(std::string_view json_text, bool end_stream) {
  std::string out;
  out.reserve(json_text.size() + 5);
  const auto length = static_cast<uint32_t>(json_text.size());
  out.push_back(static_cast<char>(end_stream ? kEndStreamFlag : 0));
  out.push_back(static_cast<char>(length >> 24));
  out.push_back(static_cast<char>(length >> 16));
  out.push_back(static_cast<char>(length >> 8));
  out.push_back(static_cast<char>(length));
  out.append(json_text);
  return out;
}

std::string end_of_stream(const ApiError* error) {
  json::object end;
  if (error) end["error"] = error_object(*error);
  return envelope(json::serialize(end), /*end_stream=*/true);
}

http::response<http::empty_body> stream_header() {
  http::response<http::empty_body> header{HttpStatus::ok, 11};
  header.set(http::field::content_type, "application/connect+json");
  return header;
}

server::StringResponse stream_error(const ApiError& error) {
  server::StringResponse res{HttpStatus::ok, 11};
  res.set(http::field::content_type, "application/connect+json");
  res.body() = end_of_stream(&error);
  res.prepare_payload();
  return res;
}

server::Response stream_shape(const ApiError& error) { return server::Response{stream_error(error)}; }

std::chrono::milliseconds timeout_of(const RequestContext& ctx) {
  const auto text = ctx.header_value("connect-timeout-ms");
  int64_t value = 0;
  // At most 10 digits, as the protocol says; anything else is as if none was sent.
  if (text.empty() || text.size() > 10) return std::chrono::milliseconds(0);
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(value);
}

}  // namespace sandboxd::e2b::connect_rpc
