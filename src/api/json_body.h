// A JSON request body, read and parsed as it arrives, with the memory its parsed value
// takes charged to the owner who sent it.
//
// Parsed JSON can take many times its text: a body of small arrays or numbers is ten to
// fifteen times its size as values. So the body is never held whole as text: each piece
// is fed to a streaming parser as it comes off the socket (on the blocking pool when
// the body is large, never on an I/O thread), and every byte the parser allocates, for
// its stack and for the value, is counted against two budgets:
//   - the owner's share (kOwnerParseShare), guaranteed to it: past its share an owner
//     borrows only while a share is still free for someone else (the total stays under
//     kTotalParseMemory - kOwnerParseShare), and beyond that the request is refused with
//     429 and Retry-After. An owner alone on the server uses all but one share; one that
//     floods it cannot take the share another owner's requests need;
//   - all owners together (kTotalParseMemory): 503 and Retry-After beyond it.
// and a single body may take at most kParseFactor times its size (plus a little):
// beyond it, 413 (the body is too complex). What a budget counts stays counted as long
// as the parsed value (or any value built in its storage) lives, so a handler that keeps
// the value while it works keeps its owner charged. (What a large body took goes back
// to the kernel after it is freed: app/memory_release.h.)
//
//   auto body = co_await read_json_body(ctx, {.max_bytes = 32u << 20});
//   if (!body) co_return body.error();   // 400 invalid JSON, 413, 429, 503
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/json/value.hpp>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "base/error.h"
#include "server/http_server.h"

namespace sandboxd::api {

// What one owner's parsed JSON bodies may hold at once, and what all owners' may.
inline constexpr size_t kOwnerParseShare = 256u << 20;
inline constexpr size_t kTotalParseMemory = 768u << 20;
// One body's parse may take at most this many bytes per byte of JSON, plus
// kParseAllowance: legitimate bodies (text, base64, conversations) take one to five.
inline constexpr size_t kParseFactor = 8;
inline constexpr size_t kParseAllowance = 1u << 20;
// Bodies up to this size are parsed on the I/O thread (it takes microseconds).
inline constexpr size_t kInlineParseBytes = 64u << 10;

struct JsonBodyLimits {
  size_t max_bytes = 0;  // 413 beyond it (checked against Content-Length before reading)
  // A body whose top level is an array (a JSON-RPC batch) is held to this instead.
  size_t max_array_bytes = std::numeric_limits<size_t>::max();
};

// Reads the request's body as JSON of any kind (object, array, scalar), within `limits`,
// charged to ctx.owner. Errors: 400 (not JSON: "The request body is not valid JSON:
// <reason>", or a body that could not be read), 413 (too large, or too complex), 429
// (the owner's share is in use) and 503 (the server's), both with Retry-After.
boost::asio::awaitable<Result<boost::json::value>> read_json_body(server::RequestContext& ctx,
                                                                  const JsonBodyLimits& limits);

// Whether a read_json_body error says the body is not JSON (not that it could not be
// read, or was refused before it was parsed).
bool json_syntax_error(const ApiError& error);

// The same parse on bytes already in memory (what read_json_body does piece by piece),
// charged to `owner`: for a body read another way, and for tests.
Result<boost::json::value> parse_json_charged(const std::string& owner, std::string_view text);

// What the budgets hold now (bytes), for metrics and tests.
size_t json_parse_bytes_of(const std::string& owner);
size_t json_parse_bytes_total();

}  // namespace sandboxd::api
