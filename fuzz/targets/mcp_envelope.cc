// The MCP endpoint's JSON-RPC envelope: a body parsed as JSON, then classified as one
// message or a batch (api/jsonrpc_message.h), as api/mcp.cc does; the error responses
// it builds serialised.
#include <boost/json.hpp>
#include <string>

#include "api/jsonrpc_message.h"

using namespace sandboxd::api;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  boost::system::error_code ec;
  auto value = boost::json::parse(std::string_view(reinterpret_cast<const char*>(data), size), ec);
  if (ec) return 0;
  auto check = [](const jsonrpc::Classified& classified) {
    if (const auto* error = std::get_if<boost::json::object>(&classified)) {
      (void)boost::json::serialize(*error);
      return;
    }
    const auto& message = std::get<jsonrpc::Message>(classified);
    // Only a method that reads params keeps them; any other keeps its `_meta` alone
    // (MCP 2026-07-28's per-request metadata).
    const auto& params = message.params;
    const bool only_meta = params.empty() || (params.size() == 1 && params.contains("_meta"));
    if (!only_meta && !jsonrpc::method_reads_params(message.method)) __builtin_trap();
    (void)jsonrpc::id_key(message.id);
  };
  if (value.is_array()) {
    auto batch = jsonrpc::classify_batch(std::move(value.as_array()), 100);
    if (auto* members = std::get_if<std::vector<jsonrpc::Classified>>(&batch))
      for (const auto& member : *members) check(member);
    else
      (void)boost::json::serialize(std::get<boost::json::object>(batch));
    return 0;
  }
  check(jsonrpc::classify(value));
  return 0;
}
