#include "base/error.h"

#include <boost/json.hpp>
#include <stdexcept>

namespace sandboxd {

namespace http = boost::beast::http;

ApiError ApiError::invalid_request(std::string message) {
  return {http::status::bad_request, "invalid_request_error", std::move(message), {}};
}
ApiError ApiError::authentication(std::string message) {
  return {http::status::unauthorized, "authentication_error", std::move(message), {}};
}
ApiError ApiError::permission(std::string message) {
  return {http::status::forbidden, "permission_error", std::move(message), {}};
}
ApiError ApiError::not_found(std::string message) {
  return {http::status::not_found, "not_found_error", std::move(message), {}};
}
ApiError ApiError::too_large(std::string message) {
  return {http::status::payload_too_large, "request_too_large", std::move(message), {}};
}
ApiError ApiError::rate_limited(std::string message, int retry_after) {
  return {http::status::too_many_requests, "rate_limit_error", std::move(message), retry_after};
}
ApiError ApiError::overloaded(std::string message, int retry_after) {
  return {http::status::service_unavailable, "overloaded_error", std::move(message), retry_after};
}
ApiError ApiError::internal() { return {}; }

std::string error_body(const ApiError& error) {
  boost::json::object body{{"type", "error"},
                           {"error", boost::json::object{{"type", error.type}, {"message", error.message}}}};
  return boost::json::serialize(body);
}

void throw_exception_from_error(const ApiError& error, const boost::source_location&) {
  throw std::runtime_error(error.type + ": " + error.message);
}

}  // namespace sandboxd
