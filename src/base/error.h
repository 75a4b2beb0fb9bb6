// Expected failures as values: what went wrong (an ErrorKind), the client's message and
// Retry-After. The policy (docs/architecture.md, "Errors"): below the service a layer says
// what happened in its own terms (runtime::VolumeResult, store::FileResult,
// store::S3Result); the service and the surfaces make it an ApiError in a Result. An
// ApiError knows no protocol: each surface maps the kind to its own shape once, at its
// edge (the HTTP status and Anthropic error type in messages/error_types.h, E2B's code
// in e2b/api/common.h, Connect's in e2b/api/connect_rpc.cc, JSON-RPC's in api/mcp.cc). Bugs
// are thrown and never reach a client in detail; code decides on the kind, never on a
// message's text. It lives below every layer, so any of them may return a Result.
#pragma once

#include <boost/system/result.hpp>
#include <optional>
#include <ostream>  // boost/core/detail/string_view.hpp in 1.81 needs it first
#include <string>
#include <string_view>

namespace sandboxd {

// What went wrong, in terms a caller can decide on. Each surface's mapping is a switch
// over every kind (no default), so a new kind that one of them leaves out is a -Wswitch
// warning there.
enum class ErrorKind {
  invalid,                 // the request is malformed or asks for something impossible
  unauthenticated,         // no credentials, or wrong ones
  billing,                 // the upstream model's account cannot pay (only passed on)
  forbidden,               // known, but not allowed this
  not_found,               // not there, or another owner's
  method_not_allowed,      // the path is known, not with this method
  conflict,                // the thing exists already or is in the wrong state
  too_large,               // the request, a body or a file is over a bound
  unsupported_media_type,  // a body in a format the endpoint does not take
  headers_too_large,       // the request's header section is over the bound
  rate_limited,            // this owner asks too often or holds too many; later
  internal,                // a bug or a failure the client cannot act on
  not_implemented,         // the server cannot do this in its configuration
  upstream_failed,         // the model server, a replica or a sandbox's port did not answer
  unavailable,             // the server cannot serve this now (a sandbox stopped, a part missing)
  overloaded,              // this server is at capacity; later
  upstream_overloaded,     // the upstream model said it is overloaded (Anthropic's 529)
  insufficient_storage,    // a full disk or volume
  range_not_satisfiable,   // a Range past a file's end
};

// The kind's name, for logs and exceptions.
std::string_view to_string(ErrorKind kind);

struct ApiError {
  ErrorKind kind = ErrorKind::internal;
  std::string message = "Internal server error";
  std::optional<int> retry_after;  // seconds, for the kinds that say "later"

  static ApiError invalid_request(std::string message);
  static ApiError authentication(std::string message);
  static ApiError permission(std::string message);
  static ApiError not_found(std::string message);
  static ApiError method_not_allowed(std::string message);
  static ApiError conflict(std::string message);
  static ApiError too_large(std::string message);
  static ApiError range_not_satisfiable(std::string message);
  static ApiError unsupported_media_type(std::string message);
  static ApiError headers_too_large(std::string message);
  static ApiError rate_limited(std::string message, std::optional<int> retry_after);
  static ApiError overloaded(std::string message, int retry_after);
  static ApiError unavailable(std::string message, std::optional<int> retry_after = {});
  static ApiError insufficient_storage(std::string message);
  static ApiError not_implemented(std::string message);
  static ApiError upstream_failed(std::string message, std::optional<int> retry_after = {});
  static ApiError internal();
};

template <typename T>
using Result = boost::system::result<T, ApiError>;

// Lets Result<T>::value() throw; handlers use has_value()/error() instead.
[[noreturn]] void throw_exception_from_error(const ApiError& error, const boost::source_location& loc);

}  // namespace sandboxd
