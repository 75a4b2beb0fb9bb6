// The Messages API's error types that code decides on (the rest are passed on as they
// come). Anthropic answers an overloaded model with HTTP 529 and the type
// overloaded_error, in a response or as a stream's error event; sandboxd's own capacity
// refusals use the same type with 503 (base/error.h, ApiError::overloaded).
#pragma once

#include <string_view>

#include "base/error.h"

namespace sandboxd::messages {

inline constexpr std::string_view kOverloadedError = "overloaded_error";
inline constexpr std::string_view kInvalidRequestError = "invalid_request_error";
inline constexpr auto kOverloadedStatus = static_cast<HttpStatus>(529);

}  // namespace sandboxd::messages
