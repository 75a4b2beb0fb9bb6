#include "api/jsonrpc_message.h"

#include <algorithm>
#include <array>

#include "base/utf8.h"

namespace sandboxd::api::jsonrpc {

namespace json = boost::json;

json::object error(const json::value& id, int code, std::string message, json::value data) {
  json::object error{{"code", code}, {"message", to_valid_utf8(message)}};
  if (!data.is_null()) error["data"] = std::move(data);
  // MCP's schema (2025-11-25 and later) has no null id: an error that answers no
  // identifiable request carries none (JSON-RPC's own null fails MCP clients' validation).
  json::object response{{"jsonrpc", "2.0"}};
  if (!id.is_null()) response["id"] = id;
  response["error"] = std::move(error);
  return response;
}

json::object result(const json::value& id, json::value result) {
  return json::object{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

bool method_reads_params(std::string_view method) {
  static constexpr std::array<std::string_view, 14> kReading{"initialize",
                                                             "tools/call",
                                                             "tools/list",
                                                             "resources/list",
                                                             "resources/read",
                                                             "completion/complete",
                                                             "notifications/cancelled",
                                                             "subscriptions/listen",
                                                             "tasks/get",
                                                             "tasks/cancel",
                                                             "tasks/update",
                                                             "logging/setLevel",
                                                             "resources/subscribe",
                                                             "resources/unsubscribe"};
  return std::find(kReading.begin(), kReading.end(), method) != kReading.end();
}

Classified classify(json::value& value) {
  if (!value.is_object())
    return error(nullptr, kInvalidRequest, "Invalid Request: a message must be an object");
  auto& object = value.as_object();
  json::value id = nullptr;
  const auto* id_value = object.if_contains("id");
  const bool id_usable = id_value && (id_value->is_string() || id_value->is_int64() || id_value->is_uint64());
  if (id_usable) id = *id_value;
  const auto* version = object.if_contains("jsonrpc");
  if (!version || !version->is_string() || version->as_string() != "2.0")
    return error(id, kInvalidRequest, "Invalid Request: 'jsonrpc' must be \"2.0\"");
  Message message(object.storage());
  const auto* method = object.if_contains("method");
  if (!method) {
    if (id_usable && (object.contains("result") || object.contains("error"))) {
      message.kind = Message::Kind::kResponse;
      return message;
    }
    return error(id, kInvalidRequest, "Invalid Request: a message needs a 'method'");
  }
  if (!method->is_string()) return error(id, kInvalidRequest, "Invalid Request: 'method' must be a string");
  if (id_value && !id_usable)
    return error(nullptr, kInvalidRequest, "Invalid Request: 'id' must be a string or an integer");
  message.kind = id_value ? Message::Kind::kRequest : Message::Kind::kNotification;
  message.id = id;
  message.method = std::string(method->as_string());
  if (auto* params = object.if_contains("params"); params && !params->is_null()) {
    if (!params->is_object()) return error(id, kInvalidParams, "Invalid params: 'params' must be an object");
    auto& object_params = params->as_object();
    if (method_reads_params(message.method)) {
      message.params = std::move(object_params);
    } else if (auto* meta = object_params.if_contains("_meta")) {
      // The per-request metadata of MCP 2026-07-28 (protocol version, client
      // capabilities) is read for every method; the rest of such params is not.
      message.params["_meta"] = std::move(*meta);
    }
  }
  return message;
}

std::variant<std::vector<Classified>, json::object> classify_batch(json::array batch, size_t max_members) {
  if (batch.empty()) return error(nullptr, kInvalidRequest, "Invalid Request: an empty batch");
  if (batch.size() > max_members)
    return error(nullptr, kInvalidRequest,
                 "Invalid Request: a batch holds at most " + std::to_string(max_members) + " messages, not " +
                     std::to_string(batch.size()) + " (send them in several requests)");
  std::vector<Classified> members;
  members.reserve(batch.size());
  for (auto& item : batch) {
    members.push_back(classify(item));
    item = nullptr;  // what the member's method does not read goes now
  }
  return members;
}

std::string id_key(const json::value& id) { return json::serialize(id); }

}  // namespace sandboxd::api::jsonrpc
