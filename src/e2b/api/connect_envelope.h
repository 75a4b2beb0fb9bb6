// The Connect protocol's enveloped message (connectrpc.com/docs/protocol, the JSON
// codec): a flags byte, a 4-byte big-endian length, then that many bytes of JSON. Pure
// (no I/O), so that a fuzz target can drive it (fuzz/targets/connect_envelope.cc);
// e2b/api/connect_rpc.h is the rest of the protocol.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <string_view>

#include "base/error.h"

namespace sandboxd::e2b::connect_rpc {

inline constexpr uint8_t kEndStreamFlag = 0x02;
inline constexpr uint8_t kCompressedFlag = 0x01;

// A request message's JSON: an object, or 400 with the reason.
Result<boost::json::object> parse_message(std::string_view text);
// Parses one enveloped message that must be the whole of `body`.
Result<boost::json::object> parse_envelope(std::string_view body);

}  // namespace sandboxd::e2b::connect_rpc
