// The Anthropic shape of an error, one table for every layer that writes or reads it:
// the HTTP status and the `error.type` of `{"type":"error","error":{"type":...,
// "message":...}}`, which the Messages API, the Files API, the threads and sandboxd's own
// HTTP API answer (server/ writes the response, model/ the stream's error events, MCP
// carries both in its errors' data). Anthropic answers an overloaded model with HTTP 529
// and the type overloaded_error, in a response or as a stream's error event; sandboxd's
// own capacity refusals use the same type with 503: two kinds (overloaded and
// upstream_overloaded), so each is answered as it was said.
#pragma once

#include <string_view>

#include "base/error.h"

namespace sandboxd::messages {

// The error types that code decides on when it reads the upstream's errors (the rest
// are named by the kind they map to).
inline constexpr std::string_view kOverloadedError = "overloaded_error";
inline constexpr std::string_view kInvalidRequestError = "invalid_request_error";
inline constexpr std::string_view kApiError = "api_error";

struct AnthropicError {
  unsigned status;        // the HTTP status
  std::string_view type;  // error.type
};

// A switch over every kind: a new kind left out here is a -Wswitch warning.
AnthropicError anthropic_error(ErrorKind kind);

// The kind of an error event in an upstream stream (its status was 200 when it began):
// overloaded_error and invalid_request_error are told apart; anything else is the
// upstream failing.
ErrorKind kind_of_stream_error(std::string_view type);

}  // namespace sandboxd::messages
