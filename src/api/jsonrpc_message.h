// JSON-RPC 2.0 messages as the MCP endpoint (api/mcp.cc) receives them: a parsed body
// classified into requests, notifications and responses, or the error response each
// malformed one gets. Pure (no I/O), so that a fuzz target can drive it
// (fuzz/targets/mcp_envelope.cc).
#pragma once

#include <boost/json.hpp>
#include <cstddef>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sandboxd::api::jsonrpc {

// JSON-RPC 2.0 error codes, and MCP's.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
inline constexpr int kServerError = -32000;  // the transport's own (session, limits)
inline constexpr int kSessionNotFound = -32001;
inline constexpr int kResourceNotFound = -32002;
inline constexpr int kRequestCancelled = -32800;
// MCP 2026-07-28's: headers that do not match the body (or are missing), and a protocol
// version the server does not speak (both HTTP 400).
inline constexpr int kHeaderMismatch = -32020;
inline constexpr int kUnsupportedProtocolVersion = -32022;

// {"jsonrpc": "2.0", "id": id, "error": {code, message, data?}} (the message made valid UTF-8);
// without "id" when `id` is null (MCP's schema has no null id).
boost::json::object error(const boost::json::value& id, int code, std::string message,
                          boost::json::value data = nullptr);
// {"jsonrpc": "2.0", "id": id, "result": result}
boost::json::object result(const boost::json::value& id, boost::json::value result);

// One JSON-RPC message from the client.
struct Message {
  enum class Kind { kRequest, kNotification, kResponse } kind = Kind::kRequest;
  boost::json::value id;
  std::string method;
  // Only for the methods that read them (method_reads_params; of the others' params only
  // `_meta`, the per-request metadata); kept in the parsed
  // body's storage, so that they stay charged to its owner (api/json_body.h).
  boost::json::object params;
  explicit Message(boost::json::storage_ptr storage = {}) : params(std::move(storage)) {}
};

// A message, or the error response it gets (id null when it has no usable id).
using Classified = std::variant<Message, boost::json::object>;

// Whether the server reads a method's params (the rest are dropped when classified:
// a ping carrying megabytes holds none of them while the request is answered).
bool method_reads_params(std::string_view method);

// Classifies one message; its params are moved out of `value`.
Classified classify(boost::json::value& value);

// A batch's members classified in order, or the error response the whole batch gets
// (empty, or more than `max_members`). Each member is freed from the batch as soon as
// it is classified, and the batch itself before this returns: what stays is what the
// members' methods read.
std::variant<std::vector<Classified>, boost::json::object> classify_batch(boost::json::array batch,
                                                                          size_t max_members);

// The JSON text of an id, as a key (the same id, the same key).
std::string id_key(const boost::json::value& id);

}  // namespace sandboxd::api::jsonrpc
