// What the MCP endpoint (api/mcp.h) offers: the tools, each with its input and output
// schemas, and the containers' files as resources. Every call goes through the same
// service calls as the HTTP API (service/tool_calls.h, api/api_calls.h), so a tool's
// structuredContent is the object the matching HTTP endpoint answers with, its errors
// the same errors. Failures of the request itself (an unknown tool, a resource that is
// not there) come back as ApiErrors, which the transport turns into JSON-RPC errors.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/json.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "api/routes.h"
#include "runtime/cancellation.h"
#include "runtime/sandbox.h"
#include "service/tool_calls.h"

namespace sandboxd::api {

// What one tools/call brings besides its arguments.
struct McpCallOptions {
  // Cancelled by the client (notifications/cancelled), the end of its session or its
  // connection: a running command is killed.
  std::shared_ptr<runtime::Cancellation> cancellation;
  // The command's output as it is written (bash only), for progress notifications.
  std::function<void(runtime::OutputStreamId, std::string_view)> on_output;
  // What the session's client may want to hear of as a log message (bash only).
  service::ToolNoticeSink on_notice;
};

// tools/list's `tools`.
const boost::json::array& mcp_tools();
// Whether the tool streams output while it runs (progress notifications are worth it).
bool mcp_tool_streams(std::string_view name);

// Whether a call of the tool may run long enough to be made a task (the Tasks
// extension): the code tools that run commands.
bool mcp_tool_may_run_long(std::string_view name);

// tools/call of such a tool for a task, apart from any request (a task outlives the one
// that started it): the owner and the caller's nesting depth (mcp_nesting_depth) given,
// `params` in memory of its own.
asio::awaitable<Result<boost::json::object>> mcp_call_long_tool(ApiContext& api, std::string owner,
                                                                int nesting_depth, boost::json::object params,
                                                                McpCallOptions options);
int mcp_nesting_depth(const RequestContext& ctx);

// tools/call: a CallToolResult ({content, structuredContent, isError?}). An unknown tool
// is an invalid_request ApiError (a JSON-RPC error); everything that goes wrong inside a
// known tool is a result with isError.
asio::awaitable<Result<boost::json::object>> mcp_call_tool(ApiContext& api, RequestContext& ctx,
                                                           boost::json::object params,
                                                           McpCallOptions options);

// resources/list: the uploads and outputs of the owner's containers, a page at a time.
asio::awaitable<Result<boost::json::object>> mcp_list_resources(ApiContext& api, RequestContext& ctx,
                                                                const boost::json::object& params);
// resources/templates/list.
boost::json::object mcp_resource_templates();
// resources/read: a file as text (UTF-8 text types) or blob (base64). 404 for a URI
// that names no file of the owner's.
asio::awaitable<Result<boost::json::object>> mcp_read_resource(ApiContext& api, RequestContext& ctx,
                                                               const boost::json::object& params);

// The container a tools/call or resources/read works on (or, for tasks/*, the task's), from its params (the
// default container when a container tool names none); "" for the others (served anywhere). Cluster mode
// relays a stateless request for a container to the replica holding it.
std::string mcp_container_of_request(std::string_view method, const boost::json::object& params);

// completion/complete for the resource template's arguments: the owner's container ids
// (`container`), and the paths of the chosen container's files (`path`, the container from
// context.arguments, else the default), those starting with what was typed, at most 100.
asio::awaitable<Result<boost::json::object>> mcp_complete(ApiContext& api, RequestContext& ctx,
                                                          const boost::json::object& params);

// sandboxd://containers/{container}/files/{path without its leading '/'}, percent-encoded.
std::string mcp_file_uri(std::string_view container, std::string_view sandbox_path);

}  // namespace sandboxd::api
