#include "messages/error_types.h"

namespace sandboxd::messages {

AnthropicError anthropic_error(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid:
      return {400, kInvalidRequestError};
    case ErrorKind::unauthenticated:
      return {401, "authentication_error"};
    case ErrorKind::billing:
      return {402, "billing_error"};
    case ErrorKind::forbidden:
      return {403, "permission_error"};
    case ErrorKind::not_found:
      return {404, "not_found_error"};
    case ErrorKind::method_not_allowed:
      return {405, kInvalidRequestError};
    case ErrorKind::conflict:
      return {409, kInvalidRequestError};
    case ErrorKind::too_large:
      return {413, "request_too_large"};
    case ErrorKind::range_not_satisfiable:
      return {416, kInvalidRequestError};
    case ErrorKind::unsupported_media_type:
      return {415, kInvalidRequestError};
    case ErrorKind::headers_too_large:
      return {431, kInvalidRequestError};
    case ErrorKind::rate_limited:
      return {429, "rate_limit_error"};
    case ErrorKind::internal:
      return {500, kApiError};
    case ErrorKind::not_implemented:
      return {501, kApiError};
    case ErrorKind::upstream_failed:
      return {502, kApiError};
    case ErrorKind::unavailable:
      return {503, kApiError};
    case ErrorKind::overloaded:
      return {503, kOverloadedError};
    case ErrorKind::upstream_overloaded:
      return {529, kOverloadedError};
    case ErrorKind::insufficient_storage:
      return {507, kApiError};
  }
  return {500, kApiError};
}

ErrorKind kind_of_stream_error(std::string_view type) {
  if (type == kOverloadedError) return ErrorKind::upstream_overloaded;
  if (type == kInvalidRequestError) return ErrorKind::invalid;
  return ErrorKind::upstream_failed;
}

}  // namespace sandboxd::messages
