// Expected failures as the client sees them (docs/http-api.md); server/ writes them as
//   {"type":"error","error":{"type":"not_found_error","message":"..."}}
// The policy (docs/architecture.md, "Errors"): an expected failure is a value. Below the
// service a layer says what happened in its own terms (runtime::VolumeResult,
// store::FileResult, store::S3Result); the service and the surfaces make it an ApiError in
// a Result. Bugs are thrown and never reach a client in detail; code never decides on a
// message's text. It lives below every layer, so any of them may return a Result.
#pragma once

#include <boost/beast/http/status.hpp>
#include <boost/system/result.hpp>
#include <optional>
#include <ostream>  // boost/core/detail/string_view.hpp in 1.81 needs it first
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
