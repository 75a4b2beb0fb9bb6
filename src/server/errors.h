// API errors in the Anthropic shape (SPEC §3):
//   {"type":"error","error":{"type":"not_found_error","message":"..."}}
// Expected failures travel as values (ApiError in a Result); only the unexpected is
// thrown, and its details never reach a client.
#pragma once

#include <ostream>  // boost/core/detail/string_view.hpp in 1.81 needs it first
#include <boost/beast/http/status.hpp>
#include <boost/system/result.hpp>
#include <optional>
#include <string>

namespace sandboxd::server {

namespace http = boost::beast::http;

struct ApiError {
  http::status status = http::status::internal_server_error;
  std::string type = "api_error";
  std::string message = "Internal server error";
  std::optional<int> retry_after;  // seconds, for 429 and 503

  static ApiError invalid_request(std::string message);
  static ApiError authentication(std::string message);
  static ApiError permission(std::string message);
  static ApiError not_found(std::string message);
  static ApiError too_large(std::string message);
  static ApiError rate_limited(std::string message, int retry_after);
  static ApiError overloaded(std::string message, int retry_after);
  static ApiError internal();
};

// The JSON body of an error response.
std::string error_body(const ApiError& error);

template <typename T>
using Result = boost::system::result<T, ApiError>;

// Lets Result<T>::value() throw; handlers use has_value()/error() instead.
[[noreturn]] void throw_exception_from_error(const ApiError& error, const boost::source_location& loc);

}  // namespace sandboxd::server
