// The MCP endpoint: the Model Context Protocol's Streamable HTTP transport at /mcp, in
// both eras of the protocol on the one endpoint. The stateless revision (2026-07-28): a
// request names its version in MCP-Protocol-Version and its `_meta`, its method (and
// tool or resource) in Mcp-Method and Mcp-Name, and is answered on its own, with nothing
// kept between requests: the owner comes from the token, the container from the
// arguments, so any replica can answer it. The earlier revisions (2025-11-25 and older):
// POST carries one JSON-RPC message (or, for sessions of the 2025-03-26 revision, a
// batch); `initialize` makes a session whose id (Mcp-Session-Id) every later request
// carries; DELETE ends it; GET opens the session's stream, which carries the
// notifications of its resource subscriptions and its log messages. A request is answered with JSON, or, for
// a bash call when the client accepts it, with server-sent events: progress notifications carrying the
// command's output while it runs, then the response. Authenticated and scoped to the owner like every other
// endpoint; the tools and resources themselves are api/mcp_tools.h.

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <optional>
#include <variant>

#include "api/json_body.h"
#include "api/jsonrpc_message.h"
#include "api/mcp_sessions.h"
#include "api/mcp_subscriptions.h"
#include "api/mcp_tools.h"
#include "api/routes.h"
#include "base/base64.h"
#include "base/utf8.h"
#include "messages/error_types.h"
#include "model/sse.h"
#include "ops/config.h"
#include "service/container_service.h"
#include "service/tool_tasks.h"

namespace sandboxd::api {
namespace {

namespace json = boost::json;
using namespace boost::asio::experimental::awaitable_operators;

// The revisions of the protocol this endpoint speaks, newest first: the current one and
// the earlier ones that clients in use still send.
constexpr std::string_view kLatestVersion = "2025-11-25";
constexpr std::array<std::string_view, 3> kVersions{"2025-11-25", "2025-06-18", "2025-03-26"};
// The last revision with JSON-RPC batches (2025-06-18 removed them).
constexpr std::string_view kBatchVersion = "2025-03-26";
// A message holds at most a file passed inline (base64): bigger bodies go to the Files API.
constexpr size_t kMessageLimit = 32u << 20;
// A request outside a known session can only be an initialize: a few hundred bytes.
constexpr size_t kInitializeLimit = 64u << 10;
// A batch (2025-03-26) holds at most this many messages, in at most this many bytes
// (its files go in requests of their own), and its answers together are at most
// kBatchAnswerLimit bytes: the members beyond get an error each, to be sent again on
// their own. (A batch of 89,000 tools/list once made 1.2 GB of answers from 4 MB.)
constexpr size_t kMaxBatchMembers = 100;
constexpr size_t kBatchLimit = 4u << 20;
constexpr size_t kBatchAnswerLimit = 8u << 20;
// Sessions are a few hundred bytes and bounded per owner; an assistant left open for
// hours keeps its session.
constexpr std::chrono::hours kSessionIdleTtl{24};
// An SSE comment this often while a command is silent keeps proxies and clients from
// timing the stream out (and finds a client that left).
constexpr std::chrono::seconds kStreamKeepAlive{15};
// A session's GET streams: each holds a connection and reads its folders' watches a
// slice at a time, so an owner has a few (a client opens one a session).
constexpr size_t kMaxSessionStreamsPerOwner = 16;
// How long a GET stream waits for events before it looks whether its session ended.
constexpr std::chrono::milliseconds kSessionStreamWait{500};

constexpr std::string_view kSessionHeader = "Mcp-Session-Id";
constexpr std::string_view kVersionHeader = "MCP-Protocol-Version";

// The stateless revision, and what its requests carry (in `_meta` and as headers).
constexpr std::string_view kModernVersion = "2026-07-28";
constexpr std::string_view kMethodHeader = "Mcp-Method";
constexpr std::string_view kNameHeader = "Mcp-Name";
constexpr std::string_view kMetaVersion = "io.modelcontextprotocol/protocolVersion";
constexpr std::string_view kMetaCapabilities = "io.modelcontextprotocol/clientCapabilities";
constexpr std::string_view kMetaServerInfo = "io.modelcontextprotocol/serverInfo";
// The Tasks extension: a long command's tools/call answered with a task at once.
constexpr std::string_view kTasksExtension = "io.modelcontextprotocol/tasks";
constexpr int kMissingClientCapability = -32021;
// subscriptions/listen: every message on its stream names it by the listen's request id.
constexpr std::string_view kMetaSubscriptionId = "io.modelcontextprotocol/subscriptionId";
// How often a client should ask for a task's state: a command's output shows meanwhile.
constexpr int64_t kTaskPollIntervalMs = 1000;
// How long a client may keep a list (ttlMs): the tools, the resource template and what
// server/discover says change only with the server's version; the files with every
// command, so resources/list and resources/read are stale at once.
constexpr int64_t kStaticTtlMs = 5 * 60 * 1000;

// Legacy (session) revisions.
bool supported(std::string_view version) {
  return std::find(kVersions.begin(), kVersions.end(), version) != kVersions.end();
}

// Every revision, newest first (server/discover's supportedVersions, -32022's `supported`).
json::array all_versions() {
  json::array versions{kModernVersion};
  for (auto version : kVersions) versions.emplace_back(version);
  return versions;
}

// Whether the era of the request is the protocol's stateless one: its params carry the
// per-request `_meta` protocol version.
const json::value* meta_version(const jsonrpc::Message& message) {
  const auto* meta = message.params.if_contains("_meta");
  if (!meta || !meta->is_object()) return nullptr;
  return meta->as_object().if_contains(kMetaVersion);
}

using namespace jsonrpc;  // the error codes, Message, classify

json::object rpc_error(const json::value& id, int code, std::string message, json::value data = nullptr) {
  return jsonrpc::error(id, code, std::move(message), std::move(data));
}

json::object rpc_result(const json::value& id, json::value result) {
  return jsonrpc::result(id, std::move(result));
}

// The JSON-RPC code of each kind of error. A resource that is not there is -32002 up
// to 2025-11-25, -32602 from 2026-07-28 on. A switch over every kind: a new kind left
// out is a -Wswitch warning.
int rpc_code_of(ErrorKind kind, bool resource, bool modern) {
  switch (kind) {
    case ErrorKind::invalid:
      return kInvalidParams;
    case ErrorKind::not_found:
      return resource && !modern ? kResourceNotFound : kInvalidParams;
    case ErrorKind::forbidden:
    case ErrorKind::too_large:
    case ErrorKind::rate_limited:
    case ErrorKind::unavailable:
    case ErrorKind::overloaded:
      return kServerError;
    case ErrorKind::unauthenticated:
    case ErrorKind::billing:
    case ErrorKind::method_not_allowed:
    case ErrorKind::range_not_satisfiable:
    case ErrorKind::conflict:
    case ErrorKind::unsupported_media_type:
    case ErrorKind::headers_too_large:
    case ErrorKind::internal:
    case ErrorKind::not_implemented:
    case ErrorKind::upstream_failed:
    case ErrorKind::upstream_overloaded:
    case ErrorKind::insufficient_storage:
      return kInternalError;
  }
  return kInternalError;
}

// Whether a refusal says "later" (429 or 503 with Retry-After): answered as a JSON-RPC
// error with the HTTP status of the refusal, so that a client backs off.
bool says_later(ErrorKind kind) {
  return kind == ErrorKind::rate_limited || kind == ErrorKind::overloaded || kind == ErrorKind::unavailable;
}

// An API error as a JSON-RPC error: its code by its kind, and the HTTP API's status and
// type for it (server::http_status_of, messages/error_types.h) and its message in `data`.
json::object rpc_error_from(const json::value& id, const ApiError& error, bool resource,
                            bool modern = false) {
  const int code = rpc_code_of(error.kind, resource, modern);
  const auto shape = messages::anthropic_error(error.kind);
  json::object data{{"status", static_cast<int>(shape.status)}, {"type", shape.type}};
  if (error.retry_after) data["retry_after"] = *error.retry_after;
  return rpc_error(id, code, error.message, std::move(data));
}

// `body` is an object or a batch's array, serialised as it is (a json::value parameter
// would copy a whole result into a temporary value first).
template <typename Json>
server::StringResponse rpc_http(HttpStatus status, const Json& body, std::string_view session = {}) {
  auto response = server::json_response(status, json::serialize(body));
  if (!session.empty()) response.set(kSessionHeader, session);
  return response;
}

server::StringResponse transport_error(HttpStatus status, int code, std::string message,
                                       const json::value& id = nullptr) {
  return rpc_http(status, rpc_error(id, code, std::move(message)));
}

// Whether the Accept header takes `type` (a listed type, type/*, or */*).
bool accepts(std::string_view accept, std::string_view type) {
  if (accept.empty()) return type == "application/json";
  const std::string major = std::string(type.substr(0, type.find('/'))) + "/*";
  size_t at = 0;
  while (at <= accept.size()) {
    size_t comma = accept.find(',', at);
    std::string_view item =
        accept.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at);
    item = item.substr(0, item.find(';'));
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item == type || item == major || item == "*/*") return true;
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return false;
}

std::string_view media_type(std::string_view content_type) {
  content_type = content_type.substr(0, content_type.find(';'));
  while (!content_type.empty() && content_type.back() == ' ') content_type.remove_suffix(1);
  return content_type;
}

struct Mcp {
  explicit Mcp(ApiContext& context) : api(context) {}
  ApiContext& api;
  McpSessions sessions;
};

// Stops watching for a disconnect when the work it guards is over.
struct StopWatch {
  std::shared_ptr<server::DisconnectWatch> watch;
  ~StopWatch() {
    if (watch) watch->stop();
  }
};

json::object server_info() {
  return json::object{{"name", "sandboxd"}, {"title", "sandboxd"}, {"version", SANDBOXD_VERSION}};
}

json::object server_capabilities() {
  return json::object{{"tools", {{"listChanged", false}}},
                      {"resources", {{"subscribe", false}, {"listChanged", false}}},
                      {"completions", json::object{}}};
}

constexpr std::string_view kInstructions =
    "Each container is a persistent Linux sandbox of yours: bash_code_execution runs commands in it "
    "(working directory /home/agent/workspace), text_editor_code_execution views and edits its files, and "
    "the file tools move files in and out. Without a 'container' argument the tools use your container "
    "'default'. Files written to /mnt/user-data/outputs come back as resource links.";

// 2026-07-28's server/discover: the versions, capabilities and instructions.
json::object discover_result() {
  auto capabilities = server_capabilities();
  capabilities["extensions"] = json::object{{kTasksExtension, json::object{}}};
  // subscriptions/listen's resourceSubscriptions (no logging: the revision dropped it).
  capabilities["resources"].as_object()["subscribe"] = true;
  return json::object{{"supportedVersions", all_versions()},
                      {"capabilities", std::move(capabilities)},
                      {"instructions", kInstructions},
                      {"ttlMs", kStaticTtlMs},
                      {"cacheScope", "public"}};
}

// A result as 2026-07-28 shapes it: its kind, the server named, and for the cacheable
// ones how long and to whom they may be cached (the files are the owner's: private).
void modern_result(const std::string& method, json::object& result) {
  if (!result.contains("resultType")) result["resultType"] = "complete";
  result["_meta"] = json::object{{kMetaServerInfo, server_info()}};
  if (method == "tools/list" || method == "resources/templates/list") {
    result["ttlMs"] = kStaticTtlMs;
    result["cacheScope"] = "public";
  } else if (method == "resources/list" || method == "resources/read") {
    result["ttlMs"] = 0;
    result["cacheScope"] = "private";
  }
}

// The session revisions also have resources/subscribe (on the session's GET stream)
// and logging; 2026-07-28 has neither (its subscriptions/listen is in server/discover).
json::object initialize_result(std::string_view version) {
  auto capabilities = server_capabilities();
  capabilities["resources"].as_object()["subscribe"] = true;
  capabilities["logging"] = json::object{};
  return json::object{{"protocolVersion", version},
                      {"capabilities", std::move(capabilities)},
                      {"serverInfo", server_info()},
                      {"instructions", kInstructions}};
}

// --- the Tasks extension (2026-07-28) ----------------------------------------------
// Whether the request's client takes tasks: it names the extension in this request's
// capabilities (a client's earlier requests say nothing about this one).
bool takes_tasks(const Message& message) {
  const auto* meta = message.params.if_contains("_meta");
  if (!meta || !meta->is_object()) return false;
  const auto* capabilities = meta->as_object().if_contains(kMetaCapabilities);
  if (!capabilities || !capabilities->is_object()) return false;
  const auto* extensions = capabilities->as_object().if_contains("extensions");
  if (!extensions || !extensions->is_object()) return false;
  const auto* tasks = extensions->as_object().if_contains(kTasksExtension);
  return tasks && tasks->is_object();
}

// A tools/call made a task: a command that may run long, for a client that takes tasks.
bool becomes_task(const Message& message) {
  if (message.method != "tools/call" || !takes_tasks(message)) return false;
  const auto* name = message.params.if_contains("name");
  return name && name->is_string() && mcp_tool_may_run_long(name->as_string());
}

std::string iso_time(std::chrono::system_clock::time_point time) {
  return service::ContainerService::format_time(
      std::chrono::duration_cast<std::chrono::seconds>(time.time_since_epoch()).count());
}

// A task as the extension shows it (DetailedTask): its state, and its result or error
// once it ended.
json::object task_object(const service::ToolTasks::View& task) {
  json::object object{{"taskId", task.id},
                      {"status", service::ToolTasks::status_name(task.status)},
                      {"createdAt", iso_time(task.created)},
                      {"lastUpdatedAt", iso_time(task.updated)},
                      {"ttlMs", task.ttl.count()},
                      {"pollIntervalMs", kTaskPollIntervalMs}};
  if (!task.status_message.empty()) object["statusMessage"] = task.status_message;
  if (task.status == service::ToolTasks::Status::kCompleted) object["result"] = task.payload;
  if (task.status == service::ToolTasks::Status::kFailed) {
    object["error"] = task.payload;
    if (auto* message = task.payload.if_contains("message"); message && message->is_string())
      object["statusMessage"] = message->as_string();
  }
  return object;
}

// Starts the call as a task: its command runs on, apart from this request (its params
// copied out of the request's memory), and the client gets the task at once.
asio::awaitable<Result<json::object>> start_task(Mcp& mcp, RequestContext& ctx, const Message& message) {
  ApiContext& api = mcp.api;
  const std::string container = mcp_container_of_request("tools/call", message.params);
  if (!service::ContainerService::valid_id(container))
    co_return ApiError::invalid_request(
        "'container' must be a container id (letters, digits, '.', '_', ':', '-'; at most 128)");
  auto work = [&api, owner = ctx.owner, depth = mcp_nesting_depth(ctx),
               params = json::object(message.params, json::storage_ptr())](
                  std::shared_ptr<runtime::Cancellation> cancellation,
                  service::ToolTasks::Progress progress) -> asio::awaitable<service::ToolTasks::Outcome> {
    McpCallOptions options;
    options.cancellation = std::move(cancellation);
    options.on_output = [progress = std::move(progress)](runtime::OutputStreamId, std::string_view output) {
      progress(output);
    };
    auto result = co_await mcp_call_long_tool(api, owner, depth, params, std::move(options));
    if (!result) {
      auto error = rpc_error_from(nullptr, result.error(), false, true);
      co_return service::ToolTasks::Outcome{true, std::move(error.at("error").as_object())};
    }
    co_return service::ToolTasks::Outcome{false, std::move(*result)};
  };
  auto task = api.tool_tasks.start(co_await asio::this_coro::executor, ctx.owner, container, std::move(work));
  if (!task) co_return task.error();
  auto result = task_object(*task);
  result["resultType"] = "task";
  co_return result;
}

// tasks/get, tasks/cancel and tasks/update of the owner's tasks (another's is not found).
Result<json::object> task_request(Mcp& mcp, RequestContext& ctx, const Message& message) {
  const auto* id = message.params.if_contains("taskId");
  if (!id || !id->is_string()) return ApiError::invalid_request("Invalid params: 'taskId' must be a string");
  const std::string_view task_id = id->as_string();
  auto& tasks = mcp.api.tool_tasks;
  auto task =
      message.method == "tasks/cancel" ? tasks.cancel(ctx.owner, task_id) : tasks.get(ctx.owner, task_id);
  if (!task)
    return ApiError::not_found(
        "Failed to retrieve task: Task not found (it ended more than an hour ago, or "
        "the container's replica changed)");
  if (message.method == "tasks/get") return task_object(*task);
  // tasks/update: these tasks never wait for input, so there is nothing to take; cancel
  // is acknowledged empty, as the extension says.
  return json::object{};
}

// logging/setLevel, resources/subscribe and resources/unsubscribe of a session: what its
// GET stream carries from now on.
asio::awaitable<json::object> answer_session_events(Mcp& mcp, RequestContext& ctx,
                                                    const McpSessions::Session& session,
                                                    const Message& message) {
  const json::value& id = message.id;
  if (message.method == "logging/setLevel") {
    const auto* name = message.params.if_contains("level");
    const auto level =
        name && name->is_string() ? McpSessionEvents::log_level(name->as_string()) : std::nullopt;
    if (!level)
      co_return rpc_error(
          id, kInvalidParams,
          "Invalid params: 'level' must be one of debug, info, notice, warning, error, critical, "
          "alert, emergency");
    session.events->set_log_level(*level);
    co_return rpc_result(id, json::object{});
  }
  const auto* uri = message.params.if_contains("uri");
  if (!uri || !uri->is_string() || uri->as_string().empty() || uri->as_string().size() > 4096)
    co_return rpc_error(id, kInvalidParams, "Invalid params: 'uri' must be a resource URI (a string)");
  if (message.method == "resources/unsubscribe") {
    session.events->unsubscribe(std::string(uri->as_string()));
    co_return rpc_result(id, json::object{});
  }
  auto subscribed = co_await session.events->subscribe(mcp.api, ctx, std::string(uri->as_string()));
  if (!subscribed) co_return rpc_error_from(id, subscribed.error(), false);
  co_return rpc_result(id, json::object{});
}

bool session_events_method(std::string_view method) {
  return method == "logging/setLevel" || method == "resources/subscribe" || method == "resources/unsubscribe";
}

// The response to one request: of a session (`session`), or (`modern`) a 2026-07-28
// request, which has no ping, no initialize, no logging or resources/subscribe, and
// server/discover.
asio::awaitable<json::object> answer(Mcp& mcp, RequestContext& ctx, Message& message, McpCallOptions options,
                                     bool modern = false, const McpSessions::Session* session = nullptr) {
  const json::value& id = message.id;
  const std::string& method = message.method;
  if (!modern && method == "ping") co_return rpc_result(id, json::object{});
  if (!modern && session && session_events_method(method))
    co_return co_await answer_session_events(mcp, ctx, *session, message);
  if (!modern && method == "initialize")
    co_return rpc_error(id, kInvalidRequest, "Invalid Request: the session is initialized already");
  Result<json::object> result = ApiError::internal();
  if (modern && method == "server/discover") {
    result = discover_result();
  } else if (method == "tools/list") {
    // One page holds every tool: no cursor was ever handed out, so any is invalid.
    if (auto* cursor = message.params.if_contains("cursor"); cursor && !cursor->is_null())
      co_return rpc_error(id, kInvalidParams, "Invalid params: invalid cursor (tools/list has one page)");
    result = json::object{{"tools", mcp_tools()}};
  } else if (method == "resources/templates/list") {
    result = mcp_resource_templates();
  } else if (modern && becomes_task(message)) {
    result = co_await start_task(mcp, ctx, message);
  } else if (modern && (method == "tasks/get" || method == "tasks/cancel" || method == "tasks/update")) {
    if (!takes_tasks(message))
      co_return rpc_error(id, kMissingClientCapability, "Missing required client capability",
                          json::object{{"requiredCapabilities",
                                        {{"extensions", json::object{{kTasksExtension, json::object{}}}}}}});
    result = task_request(mcp, ctx, message);
  } else if (method == "tools/call") {
    result = co_await mcp_call_tool(mcp.api, ctx, std::move(message.params), std::move(options));
  } else if (method == "resources/list") {
    result = co_await mcp_list_resources(mcp.api, ctx, message.params);
  } else if (method == "resources/read") {
    result = co_await mcp_read_resource(mcp.api, ctx, message.params);
  } else if (method == "completion/complete") {
    result = co_await mcp_complete(mcp.api, ctx, message.params);
  } else {
    co_return rpc_error(id, kMethodNotFound, "Method not found: " + method.substr(0, 200));
  }
  if (!result) co_return rpc_error_from(id, result.error(), method == "resources/read", modern);
  if (modern) modern_result(method, *result);
  co_return rpc_result(id, std::move(*result));
}

// A session request's options: its cancellation, and its calls' notices queued as log
// messages for the session's stream.
McpCallOptions session_call_options(const McpSessions::Session& session) {
  McpCallOptions options;
  options.cancellation = std::make_shared<runtime::Cancellation>();
  options.on_notice = [events = session.events](service::ToolNotice notice) { events->log(notice); };
  return options;
}

void notify(Mcp& mcp, const McpSessions::Session& session, const Message& message) {
  if (message.method != "notifications/cancelled") return;  // initialized and the rest: nothing to do
  if (const auto* request = message.params.if_contains("requestId"))
    if (request->is_string() || request->is_int64() || request->is_uint64())
      mcp.sessions.cancel(session.id, id_key(*request));
}

const json::value* progress_token(const Message& message) {
  const auto* meta = message.params.if_contains("_meta");
  if (!meta || !meta->is_object()) return nullptr;
  const auto* token = meta->as_object().if_contains("progressToken");
  return token && (token->is_string() || token->is_int64() || token->is_uint64()) ? token : nullptr;
}

// A bash call answered as server-sent events: the command's output as progress
// notifications while it runs, then the response. The output arrives on the sandbox's
// strand; it is kept here and the stream's writer is woken to send it.
struct StreamedCall {
  using Wake = asio::experimental::concurrent_channel<void(boost::system::error_code)>;
  explicit StreamedCall(asio::any_io_executor executor) : wake(executor, 1) {}

  Wake wake;
  std::mutex mutex;
  std::array<std::string, 2> pending;  // stdout, stderr not sent yet
  bool done = false;
  std::optional<json::object> response;

  json::value id, token;
  bool modern = false;  // a 2026-07-28 request (no session)
  uint64_t progress = 0;
  std::shared_ptr<runtime::Cancellation> cancellation = std::make_shared<runtime::Cancellation>();
  std::unique_ptr<McpSessions::InFlight> in_flight;
  std::shared_ptr<server::DisconnectWatch> watch;
  service::ToolNoticeSink on_notice;  // a session's: its log messages

  void signal() { wake.try_send(boost::system::error_code{}); }
};

// The longest prefix of `bytes` that does not end inside a UTF-8 sequence (the rest
// waits for the next chunk, so a character split between reads is not replaced).
size_t complete_utf8_prefix(std::string_view bytes) {
  for (size_t back = 1; back <= 3 && back <= bytes.size(); ++back) {
    const auto lead = static_cast<unsigned char>(bytes[bytes.size() - back]);
    if ((lead & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return length > back ? bytes.size() - back : bytes.size();
  }
  return bytes.size();
}

asio::awaitable<void> stream_call(Mcp& mcp, RequestContext& ctx, std::shared_ptr<StreamedCall> call,
                                  Message message, server::ChunkWriter& writer) {
  StopWatch stop{call->watch};
  const auto executor = co_await asio::this_coro::executor;
  McpCallOptions options;
  options.cancellation = call->cancellation;
  options.on_notice = call->on_notice;
  options.on_output = [weak = std::weak_ptr<StreamedCall>(call)](runtime::OutputStreamId stream,
                                                                 std::string_view bytes) {
    auto call = weak.lock();
    if (!call) return;
    {
      std::lock_guard lock(call->mutex);
      call->pending[stream == runtime::OutputStreamId::kStderr ? 1 : 0].append(bytes);
    }
    call->signal();
  };
  asio::co_spawn(
      executor,
      [&mcp, &ctx, call, message = std::move(message),
       options = std::move(options)]() mutable -> asio::awaitable<void> {
        auto response = co_await answer(mcp, ctx, message, std::move(options), call->modern);
        std::lock_guard lock(call->mutex);
        call->response = std::move(response);
      },
      [call](std::exception_ptr failure) {
        {
          std::lock_guard lock(call->mutex);
          if (failure || !call->response)
            call->response = rpc_error(call->id, kInternalError, "Internal error");
          call->done = true;
        }
        call->signal();
      });
  asio::steady_timer keep_alive(executor);
  bool client_gone = false;
  auto send = [&](std::string_view frame) -> asio::awaitable<void> {
    if (client_gone) co_return;
    if (!co_await writer.write(frame)) {
      client_gone = true;  // nobody reads the output any more: stop the command
      call->cancellation->cancel();
    }
  };
  for (;;) {
    keep_alive.expires_after(kStreamKeepAlive);
    auto woken = co_await (call->wake.async_receive(asio::as_tuple(asio::use_awaitable)) ||
                           keep_alive.async_wait(asio::as_tuple(asio::use_awaitable)));
    std::array<std::string, 2> chunks;
    bool done = false;
    {
      std::lock_guard lock(call->mutex);
      done = call->done;
      for (size_t s = 0; s < 2; ++s) {
        const size_t ready = done ? call->pending[s].size() : complete_utf8_prefix(call->pending[s]);
        chunks[s] = call->pending[s].substr(0, ready);
        call->pending[s].erase(0, ready);
      }
    }
    if (woken.index() == 1 && chunks[0].empty() && chunks[1].empty() && !done)
      co_await send(": keep-alive\n\n");
    for (size_t s = 0; s < 2; ++s) {
      if (chunks[s].empty()) continue;
      call->progress += chunks[s].size();
      json::object params{{"progressToken", call->token},
                          {"progress", call->progress},
                          {"message", to_valid_utf8(chunks[s])},
                          {"_meta", {{"sandboxd/stream", s == 0 ? "stdout" : "stderr"}}}};
      json::object notification{
          {"jsonrpc", "2.0"}, {"method", "notifications/progress"}, {"params", std::move(params)}};
      co_await send(model::format_sse("message", json::serialize(notification)));
    }
    if (done) break;
  }
  if (call->cancellation->cancelled()) {
    // A request the client cancelled gets no response (it has stopped waiting for one).
    // One cancelled because its session ended (DELETE, or room made for a new session)
    // is answered, so that the client does not wait for it until its own timeout.
    // A 2026-07-28 request is cancelled only by its stream closing: no one to answer.
    const std::string session(ctx.header_value("mcp-session-id"));
    if (call->modern || client_gone || mcp.sessions.find(session, ctx.owner)) co_return;
    co_await send(model::format_sse(
        "message", json::serialize(rpc_error(call->id, kRequestCancelled, "The session ended"))));
    co_return;
  }
  co_await send(model::format_sse("message", json::serialize(*call->response)));
}

// A batch's members, answered one by one, each freed once answered; the answers are
// kept as text (what is sent). Once they pass kBatchAnswerLimit, the member whose answer
// did not fit and every request after it get an error instead (those are not run).
asio::awaitable<Result<Response>> answer_batch(Mcp& mcp, RequestContext& ctx,
                                               const McpSessions::Session& session,
                                               std::vector<Classified>& members) {
  std::string answers;
  size_t answered = 0;
  bool full = false;
  auto add = [&](std::string text) {
    answers += answered++ == 0 ? "[" : ",";
    answers += text;
  };
  auto refuse = [&](const json::value& id) {
    add(json::serialize(rpc_error(id, kServerError,
                                  "The batch's answers passed " + std::to_string(kBatchAnswerLimit) +
                                      " bytes: send this request again on its own")));
  };
  for (auto& member : members) {
    Classified current = std::move(member);  // freed at the end of this turn
    if (auto* error = std::get_if<json::object>(&current)) {
      add(json::serialize(*error));
      continue;
    }
    auto& message = std::get<Message>(current);
    if (message.kind == Message::Kind::kNotification) notify(mcp, session, message);
    if (message.kind != Message::Kind::kRequest) continue;
    if (full) {
      refuse(message.id);
      continue;
    }
    McpCallOptions options = session_call_options(session);
    auto in_flight = mcp.sessions.begin_request(session.id, id_key(message.id), options.cancellation);
    std::string text =
        json::serialize(co_await answer(mcp, ctx, message, std::move(options), false, &session));
    full = answers.size() + text.size() + 2 > kBatchAnswerLimit;
    if (full)
      refuse(message.id);
    else
      add(std::move(text));
  }
  if (answered == 0) co_return server::StringResponse{HttpStatus::accepted, 11};
  answers += "]";
  co_return server::json_response(HttpStatus::ok, std::move(answers));
}

// The host of an authority (host[:port], [v6]:port), lower-cased, without brackets.
std::string host_of_authority(std::string_view authority) {
  std::string_view host = authority;
  if (host.starts_with('[')) {
    host = host.substr(
        1, host.find(']') == std::string_view::npos ? std::string_view::npos : host.find(']') - 1);
  } else if (auto colon = host.find(':'); colon != std::string_view::npos) {
    host = host.substr(0, colon);
  }
  std::string lower(host);
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

// The host of an http(s) URL ("" when it is none).
std::string host_of_url(std::string_view url) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) return "";
  std::string_view authority = url.substr(scheme_end + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  if (auto at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
  return host_of_authority(authority);
}

// A name only this machine answers to.
bool loopback_host(std::string_view host) {
  if (host == "localhost" || host.ends_with(".localhost") || host == "::1") return true;
  if (!host.starts_with("127.")) return false;
  return host.find_first_not_of("0123456789.") == std::string_view::npos;
}

bool wildcard_host(std::string_view host) { return host.empty() || host == "0.0.0.0" || host == "::"; }

// The hosts this server is known by: loopback names, the address it listens on, its
// configured public URL and (cluster mode) the URL the other replicas relay to.
bool own_host(const ops::Config& config, std::string_view host) {
  if (host.empty()) return false;
  if (loopback_host(host)) return true;
  if (!wildcard_host(config.listen_host) && host == host_of_authority(config.listen_host)) return true;
  if (!config.public_url.empty() && host == host_of_url(config.public_url)) return true;
  if (!config.cluster_advertise_url.empty() && host == host_of_url(config.cluster_advertise_url)) return true;
  return false;
}

// DNS rebinding: a page of the attacker's site whose name has been made to resolve to
// this server sends requests whose Origin and Host both carry the attacker's name, so
// comparing them proves nothing for a name. A browser's Origin (sent on every POST)
// must name one of this server's own hosts, or be an IP address that the Host names too
// (an address cannot be rebound: the page was served from this very address); and a server listening on
// loopback, which no remote client reaches by another name, answers only a Host that is one of them (a proxy
// passing its public Host on: server.publicUrl). A sandbox's own requests come through
// its relay and are not a browser's.
std::optional<std::string> rebinding_refusal(const ApiContext& api, const RequestContext& ctx) {
  if (ctx.origin) return std::nullopt;
  const auto config = api.config();
  const std::string_view origin = ctx.header_value(http::field::origin);
  // A page whose origin is an address (no name to rebind) on the very address it asks.
  const std::string origin_host = host_of_url(origin);
  const bool address_origin = !origin_host.empty() &&
                              (origin_host.find(':') != std::string::npos ||
                               origin_host.find_first_not_of("0123456789.") == std::string::npos) &&
                              origin_host == host_of_authority(ctx.header_value(http::field::host));
  if (!origin.empty() && !address_origin && !own_host(*config, origin_host))
    return "Forbidden: requests from the origin " + to_valid_utf8(origin.substr(0, 200)) +
           " are refused (set server.publicUrl to the address clients reach this server by)";
  if (loopback_host(host_of_authority(config->listen_host)) &&
      !own_host(*config, host_of_authority(ctx.header_value(http::field::host))))
    return "Forbidden: a server listening on loopback answers only loopback names, not " +
           to_valid_utf8(ctx.header_value(http::field::host).substr(0, 200)) +
           " (set server.publicUrl to the address clients reach this server by)";
  return std::nullopt;
}

// Whether a call is answered as an event stream: a bash call whose client takes a stream
// and asked for progress (progress while it runs, keep-alives through a long silence).
bool streams_progress(const Message& message, std::string_view accept) {
  if (message.method != "tools/call" || !accepts(accept, "text/event-stream")) return false;
  auto* name = message.params.if_contains("name");
  return name && name->is_string() && mcp_tool_streams(name->as_string()) && progress_token(message);
}

// The head of a streamed call's answer, as both transports send it.
server::StreamResponse event_stream_head() {
  server::StreamResponse response;
  response.header.result(http::status::ok);
  response.header.version(11);
  response.header.set(http::field::content_type, "text/event-stream");
  response.header.set(http::field::cache_control, "no-cache");
  return response;
}

// A body the transport could not read, answered alike by every revision: too large or
// not JSON as JSON-RPC errors, overload as one with its Retry-After, anything else (the
// HTTP layer's own refusals) as it came.
Result<Response> unreadable_body(const ApiError& error) {
  if (error.kind == ErrorKind::too_large)
    return transport_error(HttpStatus::payload_too_large, kInvalidRequest,
                           "Message too large: " + error.message + " (send large files with the Files API)");
  if (json_syntax_error(error))
    return transport_error(HttpStatus::bad_request, kParseError, "Parse error: " + error.message);
  if (!says_later(error.kind)) return error;
  auto response = rpc_http(server::http_status_of(error.kind), rpc_error_from(nullptr, error, false));
  if (error.retry_after) response.set(http::field::retry_after, std::to_string(*error.retry_after));
  return response;
}

asio::awaitable<Result<Response>> post_modern(Mcp& mcp, RequestContext& ctx, std::string_view accept,
                                              std::string version);

asio::awaitable<Result<Response>> post_message(Mcp& mcp, RequestContext& ctx) {
  if (auto refusal = rebinding_refusal(mcp.api, ctx))
    co_return transport_error(HttpStatus::forbidden, kServerError, std::move(*refusal));
  if (media_type(ctx.header_value(http::field::content_type)) != "application/json")
    co_return transport_error(HttpStatus::unsupported_media_type, kServerError,
                              "Unsupported Media Type: Content-Type must be application/json");
  const std::string_view accept = ctx.header_value(http::field::accept);
  if (!accepts(accept, "application/json") && !accepts(accept, "text/event-stream"))
    co_return transport_error(
        HttpStatus::not_acceptable, kServerError,
        "Not Acceptable: the client must accept application/json and text/event-stream");
  const std::string_view version_header = ctx.header_value(kVersionHeader);
  // A version header that names no session revision is the stateless era's (or one the
  // server does not speak, which that era's error answers): its Mcp-Session-Id, if any,
  // is ignored.
  if (!version_header.empty() && !supported(version_header))
    co_return co_await post_modern(mcp, ctx, accept, std::string(version_header));
  const std::string session_id(ctx.header_value(kSessionHeader));
  // What can be decided before the body is read is: a request without a known session
  // of this owner can only be an initialize (small by nature), and only a session of
  // the batch revision may send a batch, bounded in its size.
  auto session = session_id.empty() ? nullptr : mcp.sessions.find(session_id, ctx.owner);
  JsonBodyLimits limits;
  limits.max_bytes = session ? kMessageLimit : kInitializeLimit;
  limits.max_array_bytes =
      session && session->protocol_version == kBatchVersion ? kBatchLimit : kInitializeLimit;
  auto body = co_await read_json_body(ctx, limits);
  if (!body) {
    co_return unreadable_body(body.error());
  }
  json::value parsed = std::move(*body);

  // One message, classified once: initialize makes a new session (never in a batch);
  // the rest is answered below, in the session.
  std::optional<Message> single;
  if (parsed.is_object()) {
    auto classified = classify(parsed);
    if (auto* error = std::get_if<json::object>(&classified))
      co_return rpc_http(HttpStatus::bad_request, *error);
    single = std::move(std::get<Message>(classified));
    parsed = nullptr;  // what no method reads (any other member of the object) goes now
    auto& message = *single;
    if (message.kind == Message::Kind::kRequest && message.method == "initialize") {
      std::string requested;
      if (auto* v = message.params.if_contains("protocolVersion"); v && v->is_string())
        requested = v->as_string();
      const std::string version(supported(requested) ? std::string_view(requested) : kLatestVersion);
      const auto config = mcp.api.config();
      auto created =
          mcp.sessions.create(ctx.owner, version, config->max_connections_per_owner, kSessionIdleTtl);
      if (!created) {
        auto response = rpc_http(server::http_status_of(created.error().kind),
                                 rpc_error_from(message.id, created.error(), false));
        if (created.error().retry_after)
          response.set(http::field::retry_after, std::to_string(*created.error().retry_after));
        co_return response;
      }
      co_return rpc_http(HttpStatus::ok, rpc_result(message.id, initialize_result(version)), (*created)->id);
    }
  }

  // A stateless request without its version header (the body says which it is).
  if (single && single->kind == Message::Kind::kRequest && !session && meta_version(*single))
    co_return transport_error(HttpStatus::bad_request, kHeaderMismatch,
                              "Header mismatch: the MCP-Protocol-Version header is required", single->id);

  // Everything else belongs to a session of this owner.
  if (session_id.empty())
    co_return transport_error(HttpStatus::bad_request, kServerError,
                              "Bad Request: the Mcp-Session-Id header is required (initialize first)");
  if (!session) co_return transport_error(HttpStatus::not_found, kSessionNotFound, "Session not found");
  if (!version_header.empty() && !supported(version_header))
    co_return transport_error(
        HttpStatus::bad_request, kServerError,
        "Bad Request: unsupported MCP-Protocol-Version: " + to_valid_utf8(version_header.substr(0, 64)));

  if (parsed.is_array()) {
    if (session->protocol_version != kBatchVersion)
      co_return transport_error(
          HttpStatus::bad_request, kInvalidRequest,
          "Invalid Request: JSON-RPC batches are not part of MCP " + session->protocol_version);
    // The members, classified: the parsed batch is gone, and with it all that their
    // methods do not read.
    auto classified = classify_batch(std::move(parsed.as_array()), kMaxBatchMembers);
    parsed = nullptr;
    if (auto* error = std::get_if<json::object>(&classified))
      co_return rpc_http(HttpStatus::bad_request, *error);
    co_return co_await answer_batch(mcp, ctx, *session, std::get<std::vector<Classified>>(classified));
  }

  if (!single)  // neither an object nor a batch: the error classify gives it
    co_return rpc_http(HttpStatus::bad_request, std::get<json::object>(classify(parsed)));
  auto& message = *single;
  if (message.kind == Message::Kind::kNotification) notify(mcp, *session, message);
  if (message.kind != Message::Kind::kRequest) co_return server::StringResponse{HttpStatus::accepted, 11};

  if (streams_progress(message, accept)) {
    auto call = std::make_shared<StreamedCall>(co_await asio::this_coro::executor);
    call->id = message.id;
    call->token = *progress_token(message);
    call->in_flight = mcp.sessions.begin_request(session->id, id_key(message.id), call->cancellation);
    call->on_notice = session_call_options(*session).on_notice;
    call->watch = server::DisconnectWatch::start(
        ctx.stream().socket(), [cancellation = call->cancellation] { cancellation->cancel(); });
    auto response = event_stream_head();
    response.header.set(kSessionHeader, session->id);
    response.produce = [&mcp, &ctx, call, message = std::move(message)](server::ChunkWriter& writer) {
      return stream_call(mcp, ctx, call, message, writer);
    };
    co_return response;
  }
  McpCallOptions options = session_call_options(*session);
  auto in_flight = mcp.sessions.begin_request(session->id, id_key(message.id), options.cancellation);
  // A tool call may run a command: a client that leaves stops it.
  StopWatch watch;
  if (message.method == "tools/call")
    watch.watch = server::DisconnectWatch::start(
        ctx.stream().socket(), [cancellation = options.cancellation] { cancellation->cancel(); });
  auto cancellation = options.cancellation;
  auto response = co_await answer(mcp, ctx, message, std::move(options), false, session.get());
  if (cancellation->cancelled()) {
    // The client cancelled it (notifications/cancelled): the protocol asks for no
    // response, so the POST is answered without one. One cancelled because its session
    // ended is answered, so that the client does not wait for it until its own timeout.
    if (mcp.sessions.find(session->id, ctx.owner)) co_return server::StringResponse{HttpStatus::accepted, 11};
    response = rpc_error(message.id, kRequestCancelled, "The session ended");
  }
  co_return rpc_http(HttpStatus::ok, response, session->id);
}

// Mcp-Name's value: as sent, or decoded from its base64 form (=?base64?...?=) that
// carries a name a header cannot. nullopt when that form does not decode.
std::optional<std::string> header_name_value(std::string_view header) {
  constexpr std::string_view kPrefix = "=?base64?", kSuffix = "?=";
  if (header.size() < kPrefix.size() + kSuffix.size() || !header.starts_with(kPrefix) ||
      !header.ends_with(kSuffix))
    return std::string(header);
  return base64_decode(header.substr(kPrefix.size(), header.size() - kPrefix.size() - kSuffix.size()));
}

server::StringResponse header_mismatch(const json::value& id, std::string message) {
  return rpc_http(HttpStatus::bad_request, rpc_error(id, kHeaderMismatch, "Header mismatch: " + message));
}

// Checks what a 2026-07-28 request carries twice (headers and body) and what its `_meta`
// must hold: the refusal, or nullopt.
std::optional<server::StringResponse> modern_envelope_refusal(const RequestContext& ctx,
                                                              const Message& message,
                                                              std::string_view version) {
  const json::value& id = message.id;
  const std::string_view method_header = ctx.header_value(kMethodHeader);
  if (method_header.empty()) return header_mismatch(id, "the Mcp-Method header is required");
  if (method_header != message.method)
    return header_mismatch(id, "Mcp-Method header value '" + to_valid_utf8(method_header.substr(0, 100)) +
                                   "' does not match body value '" +
                                   to_valid_utf8(message.method.substr(0, 100)) + "'");
  const json::value* body_version = meta_version(message);
  if (!body_version || !body_version->is_string())
    return header_mismatch(id, "params._meta[\"" + std::string(kMetaVersion) + "\"] is required");
  if (body_version->as_string() != version)
    return header_mismatch(
        id, "MCP-Protocol-Version header value '" + std::string(version) + "' does not match body value '" +
                to_valid_utf8(std::string_view(body_version->as_string()).substr(0, 64)) + "'");
  const auto& meta = message.params.at("_meta").as_object();
  if (const auto* capabilities = meta.if_contains(kMetaCapabilities);
      !capabilities || !capabilities->is_object())
    return rpc_http(HttpStatus::bad_request,
                    rpc_error(id, kInvalidParams,
                              "Invalid params: params._meta[\"" + std::string(kMetaCapabilities) +
                                  "\"] must be an object (the client's capabilities for this request)"));
  // The tool, resource or task, named again for intermediaries that route on it.
  const char* name_field = message.method == "tools/call"         ? "name"
                           : message.method == "resources/read"   ? "uri"
                           : message.method.starts_with("tasks/") ? "taskId"
                                                                  : nullptr;
  if (name_field) {
    const auto* body_name = message.params.if_contains(name_field);
    if (body_name && body_name->is_string()) {
      const std::string_view name_header = ctx.header_value(kNameHeader);
      if (name_header.empty())
        return header_mismatch(id, "the Mcp-Name header is required for " + message.method);
      auto name = header_name_value(name_header);
      if (!name) return header_mismatch(id, "the Mcp-Name header's base64 form does not decode");
      if (*name != body_name->as_string())
        return header_mismatch(
            id, "Mcp-Name header value '" + to_valid_utf8(std::string_view(*name).substr(0, 200)) +
                    "' does not match body value '" +
                    to_valid_utf8(std::string_view(body_name->as_string()).substr(0, 200)) + "'");
    }
  }
  return std::nullopt;
}

// A request of the stateless revision: everything it needs is in it (the owner from the
// token, the container from the arguments), so nothing is kept once it is answered, and
// in cluster mode any replica takes it (api/cluster_relay.cc relays a container's calls to
// its holder). Cancelled by closing its stream (or connection): it then gets no answer.
// subscriptions/listen: an event stream that first acknowledges what it honours (the
// resourceSubscriptions naming files, in a folder that is there, of one container of
// the owner's), then carries notifications/resources/updated each time one of them
// appears, is written, renamed or removed, with an SSE comment every 15 s meanwhile,
// until the client closes it (or a watched folder goes away: the stream then ends
// without a response, and the client may listen again). The other notification types
// are not offered: tools never change, and the resource list changes with every command.
asio::awaitable<Result<Response>> listen_for_changes(Mcp& mcp, RequestContext& ctx, const Message& message) {
  static const json::array kNoUris;
  const json::array* uris = &kNoUris;
  const auto* notifications = message.params.if_contains("notifications");
  if (!notifications || !notifications->is_object())
    co_return rpc_http(
        HttpStatus::ok,
        rpc_error(message.id, kInvalidParams,
                  "Invalid params: subscriptions/listen needs a 'notifications' filter (an object)"));
  if (const auto* asked = notifications->as_object().if_contains("resourceSubscriptions")) {
    if (!asked->is_array())
      co_return rpc_http(HttpStatus::ok,
                         rpc_error(message.id, kInvalidParams,
                                   "Invalid params: resourceSubscriptions must be an array of URIs"));
    uris = &asked->as_array();
  }
  auto watch = co_await mcp_watch_resources(mcp.api, ctx, *uris);
  if (!watch) co_return rpc_http(HttpStatus::ok, rpc_error_from(message.id, watch.error(), false, true));
  json::object honoured;
  if (!(*watch)->uris().empty()) {
    json::array watched;
    for (const auto& uri : (*watch)->uris()) watched.emplace_back(uri);
    honoured["resourceSubscriptions"] = std::move(watched);
  }
  auto response = event_stream_head();
  response.header.set("X-Accel-Buffering", "no");
  // The id in memory of the stream's own (the request's body is freed).
  response.produce = [watch = std::move(*watch), id = json::value(message.id, json::storage_ptr()),
                      honoured = std::move(honoured)](server::ChunkWriter& writer) -> asio::awaitable<void> {
    // A client that leaves ends the watches at once, so its share of them comes back.
    auto gone = server::DisconnectWatch::start(writer.stream().socket(), [watch] { watch->cancel(); });
    const json::object meta{{kMetaSubscriptionId, id}};
    json::object ack{{"jsonrpc", "2.0"},
                     {"method", "notifications/subscriptions/acknowledged"},
                     {"params", {{"_meta", meta}, {"notifications", honoured}}}};
    bool open = co_await writer.write(model::format_sse("message", json::serialize(ack)));
    while (open) {
      auto changed = co_await watch->next(kStreamKeepAlive);
      if (!changed) break;
      std::string batch = changed->empty() ? ": keep-alive\n\n" : "";
      for (const auto& uri : *changed) {
        json::object updated{{"jsonrpc", "2.0"},
                             {"method", "notifications/resources/updated"},
                             {"params", {{"_meta", meta}, {"uri", uri}}}};
        batch += model::format_sse("message", json::serialize(updated));
      }
      open = co_await writer.write(batch);
    }
    gone->stop();
  };
  co_return response;
}

asio::awaitable<Result<Response>> post_modern(Mcp& mcp, RequestContext& ctx, std::string_view accept,
                                              std::string version) {
  JsonBodyLimits limits;
  limits.max_bytes = kMessageLimit;
  limits.max_array_bytes = kInitializeLimit;  // batches are refused: an array is read no further
  auto body = co_await read_json_body(ctx, limits);
  if (!body) {
    co_return unreadable_body(body.error());
  }
  json::value parsed = std::move(*body);
  if (parsed.is_array())
    co_return transport_error(HttpStatus::bad_request, kInvalidRequest,
                              "Invalid Request: JSON-RPC batches are not part of MCP " + version);
  auto classified = classify(parsed);
  parsed = nullptr;
  if (auto* error = std::get_if<json::object>(&classified))
    co_return rpc_http(HttpStatus::bad_request, *error);
  auto& message = std::get<Message>(classified);
  if (version != kModernVersion) {
    // Named with the versions to retry with (a client picks one and sends again).
    json::object data{{"supported", all_versions()},
                      {"requested", to_valid_utf8(std::string_view(version).substr(0, 64))}};
    co_return rpc_http(HttpStatus::bad_request, rpc_error(message.id, kUnsupportedProtocolVersion,
                                                          "Unsupported protocol version", std::move(data)));
  }
  // notifications/cancelled belongs to stdio in this revision (over HTTP, closing the
  // stream cancels); notifications are accepted and have nothing to do.
  if (message.kind == Message::Kind::kNotification)
    co_return server::StringResponse{HttpStatus::accepted, 11};
  if (message.kind == Message::Kind::kResponse)
    co_return transport_error(HttpStatus::bad_request, kInvalidRequest,
                              "Invalid Request: a client sends no responses in MCP " + version);
  if (auto refusal = modern_envelope_refusal(ctx, message, version)) co_return std::move(*refusal);

  if (message.method == "subscriptions/listen") co_return co_await listen_for_changes(mcp, ctx, message);
  // A call made a task is answered at once, with the task: nothing to stream.
  if (streams_progress(message, accept) && !becomes_task(message)) {
    auto call = std::make_shared<StreamedCall>(co_await asio::this_coro::executor);
    call->id = message.id;
    call->token = *progress_token(message);
    call->modern = true;
    call->watch = server::DisconnectWatch::start(
        ctx.stream().socket(), [cancellation = call->cancellation] { cancellation->cancel(); });
    auto response = event_stream_head();
    response.header.set("X-Accel-Buffering", "no");
    response.produce = [&mcp, &ctx, call, message = std::move(message)](server::ChunkWriter& writer) {
      return stream_call(mcp, ctx, call, message, writer);
    };
    co_return response;
  }
  McpCallOptions options;
  options.cancellation = std::make_shared<runtime::Cancellation>();
  StopWatch watch;
  if (message.method == "tools/call" && !becomes_task(message))
    watch.watch = server::DisconnectWatch::start(
        ctx.stream().socket(), [cancellation = options.cancellation] { cancellation->cancel(); });
  auto response = co_await answer(mcp, ctx, message, std::move(options), /*modern=*/true);
  // A method this revision does not have is a 404 (with its JSON-RPC error, which tells
  // a client that this is an MCP endpoint all the same).
  HttpStatus status = HttpStatus::ok;
  if (auto* error = response.if_contains("error")) {
    if (error->as_object().at("code") == json::value(kMethodNotFound)) status = HttpStatus::not_found;
    if (error->as_object().at("code") == json::value(kMissingClientCapability))
      status = HttpStatus::bad_request;
  }
  co_return rpc_http(status, response);
}

asio::awaitable<Result<Response>> no_stream(Mcp&, RequestContext&);

// GET: the stream of a session (2025-11-25 and older), one a session, on which the
// server sends what comes outside any request: notifications/resources/updated for the
// files the session subscribed to, notifications/message at the level it set. Its
// events carry no SSE id: nothing is kept once sent, so there is nothing to resume,
// and a GET with Last-Event-ID gets a fresh stream, which says so in a comment first.
// It lasts until the client closes it or the session ends (DELETE, which ends it).
asio::awaitable<Result<Response>> open_stream(Mcp& mcp, RequestContext& ctx) {
  // The stateless revision has no stream outside a request (subscriptions/listen): 405.
  if (const auto version = ctx.header_value(kVersionHeader); !version.empty() && !supported(version))
    co_return co_await no_stream(mcp, ctx);
  if (auto refusal = rebinding_refusal(mcp.api, ctx))
    co_return transport_error(HttpStatus::forbidden, kServerError, std::move(*refusal));
  if (!accepts(ctx.header_value(http::field::accept), "text/event-stream"))
    co_return transport_error(HttpStatus::not_acceptable, kServerError,
                              "Not Acceptable: the client must accept text/event-stream");
  const std::string session_id(ctx.header_value(kSessionHeader));
  if (session_id.empty())
    co_return transport_error(HttpStatus::bad_request, kServerError,
                              "Bad Request: the Mcp-Session-Id header is required (initialize first)");
  auto session = mcp.sessions.find(session_id, ctx.owner);
  if (!session) co_return transport_error(HttpStatus::not_found, kSessionNotFound, "Session not found");
  auto cancellation = std::make_shared<runtime::Cancellation>();
  auto in_flight =
      mcp.sessions.begin_stream(session->id, ctx.owner, kMaxSessionStreamsPerOwner, cancellation);
  if (!in_flight) {
    const auto& error = in_flight.error();
    auto response =
        transport_error(server::http_status_of(error.kind),
                        error.kind == ErrorKind::not_found ? kSessionNotFound : kServerError, error.message);
    if (error.retry_after) response.set(http::field::retry_after, std::to_string(*error.retry_after));
    co_return response;
  }
  auto response = event_stream_head();
  response.header.set(kSessionHeader, session->id);
  response.header.set("X-Accel-Buffering", "no");
  if (!ctx.header_value("Last-Event-ID").empty())
    response.first_chunk = ": sandboxd keeps no events to replay: this stream starts afresh\n\n";
  response.produce = [session, cancellation,
                      in_flight = std::shared_ptr<McpSessions::InFlight>(std::move(*in_flight))](
                         server::ChunkWriter& writer) -> asio::awaitable<void> {
    // A client that leaves ends the stream at once (and with it, its hold on the session).
    auto gone =
        server::DisconnectWatch::start(writer.stream().socket(), [cancellation] { cancellation->cancel(); });
    auto keep_alive_at = std::chrono::steady_clock::now() + kStreamKeepAlive;
    while (!cancellation->cancelled()) {
      auto frames = co_await session->events->next(kSessionStreamWait);
      if (cancellation->cancelled()) break;
      if (frames.empty()) {
        if (std::chrono::steady_clock::now() < keep_alive_at) continue;
        frames = ": keep-alive\n\n";
      }
      if (!co_await writer.write(frames)) break;
      keep_alive_at = std::chrono::steady_clock::now() + kStreamKeepAlive;
    }
    gone->stop();
  };
  co_return response;
}

asio::awaitable<Result<Response>> end_session(Mcp& mcp, RequestContext& ctx) {
  // The stateless revision has no sessions to end: 405, as for GET.
  if (const auto version = ctx.header_value(kVersionHeader); !version.empty() && !supported(version))
    co_return co_await no_stream(mcp, ctx);
  const std::string session_id(ctx.header_value(kSessionHeader));
  if (session_id.empty())
    co_return transport_error(HttpStatus::bad_request, kServerError,
                              "Bad Request: the Mcp-Session-Id header is required");
  if (!mcp.sessions.end(session_id, ctx.owner))
    co_return transport_error(HttpStatus::not_found, kSessionNotFound, "Session not found");
  co_return server::StringResponse{HttpStatus::ok, 11};
}

asio::awaitable<Result<Response>> no_stream(Mcp&, RequestContext&) {
  auto response = transport_error(HttpStatus::method_not_allowed, kServerError,
                                  "Method Not Allowed: MCP 2026-07-28 has no stream outside a request "
                                  "(subscriptions/listen)");
  response.set(http::field::allow, "POST");
  co_return response;
}

// The container an MCP request works on: the stateless revision (2026-07-28) names its
// method in a header, and a tool call or a read for a container runs on the container's
// holder like the HTTP API's calls; a subscriptions/listen watches its container's files
// where the commands write them; a task (tasks/get, tasks/cancel, tasks/update) is kept
// where its command runs, its id naming the container. The earlier revisions' sessions
// live on the replica that made them: "" (served there). The body is kept for the handler.
asio::awaitable<std::string> container_named_in_mcp_request(RequestContext& ctx) {
  const std::string method(ctx.header_value(kMethodHeader));
  if (method != "tools/call" && method != "resources/read" && method != "subscriptions/listen" &&
      !method.starts_with("tasks/"))
    co_return "";
  if (!ctx.header_value("Mcp-Session-Id").empty() &&
      ctx.header_value("MCP-Protocol-Version") != kModernVersion)
    co_return "";
  auto pick = [&method](const json::object& body) {
    const auto* params = body.if_contains("params");
    return params && params->is_object() ? mcp_container_of_request(method, params->as_object())
                                         : std::string();
  };
  co_return co_await container_named_in_json_body(ctx, kMessageLimit, std::move(pick));
}

// The sessions live as long as the routes that use them (the server's handlers).
template <typename Fn>
server::Handler with_mcp(std::shared_ptr<Mcp> mcp, Fn fn) {
  return [mcp, fn](server::RequestContext& ctx) { return fn(*mcp, ctx); };
}

}  // namespace

void install_mcp_routes(server::HttpServer& http, ApiContext& api) {
  auto mcp = std::make_shared<Mcp>(api);
  http.route(http::verb::post, "/mcp", "mcp.post", with_mcp(mcp, post_message),
             {.container = server::ContainerScope::found_by(container_named_in_mcp_request)});
  http.route(http::verb::get, "/mcp", "mcp.get", with_mcp(mcp, open_stream));
  http.route(http::verb::delete_, "/mcp", "mcp.delete", with_mcp(mcp, end_session));
}

}  // namespace sandboxd::api
