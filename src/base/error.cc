#include "base/error.h"

#include <stdexcept>

namespace sandboxd {

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid:
      return "invalid";
    case ErrorKind::unauthenticated:
      return "unauthenticated";
    case ErrorKind::billing:
      return "billing";
    case ErrorKind::forbidden:
      return "forbidden";
    case ErrorKind::not_found:
      return "not_found";
    case ErrorKind::method_not_allowed:
      return "method_not_allowed";
    case ErrorKind::conflict:
      return "conflict";
    case ErrorKind::too_large:
      return "too_large";
    case ErrorKind::range_not_satisfiable:
      return "range_not_satisfiable";
    case ErrorKind::unsupported_media_type:
      return "unsupported_media_type";
    case ErrorKind::headers_too_large:
      return "headers_too_large";
    case ErrorKind::rate_limited:
      return "rate_limited";
    case ErrorKind::internal:
      return "internal";
    case ErrorKind::not_implemented:
      return "not_implemented";
    case ErrorKind::upstream_failed:
      return "upstream_failed";
    case ErrorKind::unavailable:
      return "unavailable";
    case ErrorKind::overloaded:
      return "overloaded";
    case ErrorKind::upstream_overloaded:
      return "upstream_overloaded";
    case ErrorKind::insufficient_storage:
      return "insufficient_storage";
  }
  return "internal";
}

ApiError ApiError::invalid_request(std::string message) {
  return {ErrorKind::invalid, std::move(message), {}};
}
ApiError ApiError::authentication(std::string message) {
  return {ErrorKind::unauthenticated, std::move(message), {}};
}
ApiError ApiError::permission(std::string message) { return {ErrorKind::forbidden, std::move(message), {}}; }
ApiError ApiError::not_found(std::string message) { return {ErrorKind::not_found, std::move(message), {}}; }
ApiError ApiError::method_not_allowed(std::string message) {
  return {ErrorKind::method_not_allowed, std::move(message), {}};
}
ApiError ApiError::conflict(std::string message) { return {ErrorKind::conflict, std::move(message), {}}; }
ApiError ApiError::too_large(std::string message) { return {ErrorKind::too_large, std::move(message), {}}; }
ApiError ApiError::range_not_satisfiable(std::string message) {
  return {ErrorKind::range_not_satisfiable, std::move(message), {}};
}
ApiError ApiError::unsupported_media_type(std::string message) {
  return {ErrorKind::unsupported_media_type, std::move(message), {}};
}
ApiError ApiError::headers_too_large(std::string message) {
  return {ErrorKind::headers_too_large, std::move(message), {}};
}
ApiError ApiError::rate_limited(std::string message, std::optional<int> retry_after) {
  return {ErrorKind::rate_limited, std::move(message), retry_after};
}
ApiError ApiError::overloaded(std::string message, int retry_after) {
  return {ErrorKind::overloaded, std::move(message), retry_after};
}
ApiError ApiError::unavailable(std::string message, std::optional<int> retry_after) {
  return {ErrorKind::unavailable, std::move(message), retry_after};
}
ApiError ApiError::insufficient_storage(std::string message) {
  return {ErrorKind::insufficient_storage, std::move(message), {}};
}
ApiError ApiError::not_implemented(std::string message) {
  return {ErrorKind::not_implemented, std::move(message), {}};
}
ApiError ApiError::upstream_failed(std::string message, std::optional<int> retry_after) {
  return {ErrorKind::upstream_failed, std::move(message), retry_after};
}
ApiError ApiError::internal() { return {}; }

void throw_exception_from_error(const ApiError& error, const boost::source_location&) {
  throw std::runtime_error(std::string(to_string(error.kind)) + ": " + error.message);
}

}  // namespace sandboxd
