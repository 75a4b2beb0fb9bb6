// Expected failures: API errors in the Anthropic shape (docs/http-api.md):
//   {"type":"error","error":{"type":"not_found_error","message":"..."}}
// Every layer reports an expected failure (bad input, a missing thing, a host out of a
// resource) as a value: an ApiError in a Result. Only the unexpected (a bug, a broken
// invariant) is thrown, and its details never reach a client. The type lives below every
// layer so that runtime, store and model can say which status a failure means without
// knowing HTTP's transport.
#pragma once

#include <ostream>  // boost/core/detail/string_view.hpp in 1.81 needs it first
#include <boost/beast/http/status.hpp>
#include <boost/system/result.hpp>
#include <optional>
#include <string>

namespace sandboxd {

using HttpStatus = boost::beast::http::status;

struct ApiError {
  HttpStatus status = HttpStatus::internal_server_error;
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

}  // namespace sandboxd
