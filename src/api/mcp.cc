// The MCP endpoint: the Model Context Protocol's Streamable HTTP transport at /mcp.
// POST carries one JSON-RPC message (or, for sessions of the 2025-03-26 revision, a
// batch); `initialize` makes a session whose id (Mcp-Session-Id) every later request
// carries; DELETE ends it; GET answers 405 (no server-initiated stream: the server has
// nothing to say outside a request). A request is answered with JSON, or, for a bash
// call when the client accepts it, with server-sent events: progress notifications
// carrying the command's output while it runs, then the response. Authenticated and
// scoped to the owner like every other endpoint; the tools and resources themselves are
// api/mcp_tools.h.

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
#include "api/mcp_tools.h"
#include "api/routes.h"
#include "base/utf8.h"
#include "model/sse.h"

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

constexpr std::string_view kSessionHeader = "Mcp-Session-Id";
constexpr std::string_view kVersionHeader = "MCP-Protocol-Version";

bool supported(std::string_view version) {
  return std::find(kVersions.begin(), kVersions.end(), version) != kVersions.end();
}

using namespace jsonrpc;  // the error codes, Message, classify

json::object rpc_error(const json::value& id, int code, std::string message, json::value data = nullptr) {
  return jsonrpc::error(id, code, std::move(message), std::move(data));
}

json::object rpc_result(const json::value& id, json::value result) {
  return jsonrpc::result(id, std::move(result));
}

// An API error as a JSON-RPC error: by its status, its type and message kept in `data`.
json::object rpc_error_from(const json::value& id, const ApiError& error, bool resource) {
  int code = kInternalError;
  if (error.status == HttpStatus::bad_request)
    code = kInvalidParams;
  else if (error.status == HttpStatus::not_found)
    code = resource ? kResourceNotFound : kInvalidParams;
  else if (error.status == HttpStatus::too_many_requests || error.status == HttpStatus::service_unavailable ||
           error.status == HttpStatus::forbidden || error.status == HttpStatus::payload_too_large)
    code = kServerError;
  json::object data{{"status", static_cast<int>(error.status)}, {"type", error.type}};
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

json::object initialize_result(std::string_view version) {
  return json::object{
      {"protocolVersion", version},
      {"capabilities",
       {{"tools", {{"listChanged", false}}}, {"resources", {{"subscribe", false}, {"listChanged", false}}}}},
      {"serverInfo", {{"name", "sandboxd"}, {"title", "sandboxd"}, {"version", SANDBOXD_VERSION}}},
      {"instructions",
       "Each container is a persistent Linux sandbox of yours: bash_code_execution runs commands in it "
       "(working "
       "directory /home/agent/workspace), text_editor_code_execution views and edits its files, and the file "
       "tools "
       "move files in and out. Without a 'container' argument the tools use your container 'default'. Files "
       "written to /mnt/user-data/outputs come back as resource links."}};
}

// The response to one request of a session (JSON; a request needing none gets nullopt).
asio::awaitable<json::object> answer(Mcp& mcp, RequestContext& ctx, Message& message,
                                     McpCallOptions options) {
  const json::value& id = message.id;
  const std::string& method = message.method;
  if (method == "ping") co_return rpc_result(id, json::object{});
  if (method == "initialize")
    co_return rpc_error(id, kInvalidRequest, "Invalid Request: the session is initialized already");
  if (method == "tools/list") co_return rpc_result(id, json::object{{"tools", mcp_tools()}});
  if (method == "resources/templates/list") co_return rpc_result(id, mcp_resource_templates());
  Result<json::object> result = ApiError::internal();
  if (method == "tools/call") {
    result = co_await mcp_call_tool(mcp.api, ctx, std::move(message.params), std::move(options));
  } else if (method == "resources/list") {
    result = co_await mcp_list_resources(mcp.api, ctx, message.params);
  } else if (method == "resources/read") {
    result = co_await mcp_read_resource(mcp.api, ctx, message.params);
  } else {
    co_return rpc_error(id, kMethodNotFound, "Method not found: " + method.substr(0, 200));
  }
  if (!result) co_return rpc_error_from(id, result.error(), method == "resources/read");
  co_return rpc_result(id, std::move(*result));
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
  uint64_t progress = 0;
  std::shared_ptr<runtime::Cancellation> cancellation = std::make_shared<runtime::Cancellation>();
  std::unique_ptr<McpSessions::InFlight> in_flight;
  std::shared_ptr<server::DisconnectWatch> watch;

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
        auto response = co_await answer(mcp, ctx, message, std::move(options));
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
    const std::string session(ctx.header_value("mcp-session-id"));
    if (client_gone || mcp.sessions.find(session, ctx.owner)) co_return;
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
    McpCallOptions options;
    options.cancellation = std::make_shared<runtime::Cancellation>();
    auto in_flight = mcp.sessions.begin_request(session.id, id_key(message.id), options.cancellation);
    std::string text = json::serialize(co_await answer(mcp, ctx, message, std::move(options)));
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

// A browser's request from another site (DNS rebinding onto a local server) names its
// page's origin: only the server's own is let through.
bool foreign_origin(const RequestContext& ctx) {
  std::string_view origin = ctx.header_value(http::field::origin);
  if (origin.empty()) return false;
  const auto scheme_end = origin.find("://");
  if (scheme_end == std::string_view::npos) return true;
  return origin.substr(scheme_end + 3) != ctx.header_value(http::field::host);
}

asio::awaitable<Result<Response>> post_message(Mcp& mcp, RequestContext& ctx) {
  if (foreign_origin(ctx))
    co_return transport_error(HttpStatus::forbidden, kServerError,
                              "Forbidden: requests from another origin are refused");
  if (media_type(ctx.header_value(http::field::content_type)) != "application/json")
    co_return transport_error(HttpStatus::unsupported_media_type, kServerError,
                              "Unsupported Media Type: Content-Type must be application/json");
  const std::string_view accept = ctx.header_value(http::field::accept);
  if (!accepts(accept, "application/json") && !accepts(accept, "text/event-stream"))
    co_return transport_error(
        HttpStatus::not_acceptable, kServerError,
        "Not Acceptable: the client must accept application/json and text/event-stream");
  const std::string session_id(ctx.header_value(kSessionHeader));
  const std::string_view version_header = ctx.header_value(kVersionHeader);
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
    const ApiError& error = body.error();
    if (error.status == HttpStatus::payload_too_large)
      co_return transport_error(
          HttpStatus::payload_too_large, kInvalidRequest,
          "Message too large: " + error.message + " (send large files with the Files API)");
    if (json_syntax_error(error))
      co_return transport_error(HttpStatus::bad_request, kParseError, "Parse error: " + error.message);
    if (error.status != HttpStatus::too_many_requests && error.status != HttpStatus::service_unavailable)
      co_return error;
    auto response = rpc_http(error.status, rpc_error_from(nullptr, error, false));
    if (error.retry_after) response.set(http::field::retry_after, std::to_string(*error.retry_after));
    co_return response;
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
        auto response = rpc_http(created.error().status, rpc_error_from(message.id, created.error(), false));
        if (created.error().retry_after)
          response.set(http::field::retry_after, std::to_string(*created.error().retry_after));
        co_return response;
      }
      co_return rpc_http(HttpStatus::ok, rpc_result(message.id, initialize_result(version)), (*created)->id);
    }
  }

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

  // A bash call streams when the client takes a stream: progress while it runs, and
  // keep-alives through a long silence.
  bool streams = false;
  if (message.method == "tools/call" && accepts(accept, "text/event-stream")) {
    auto* name = message.params.if_contains("name");
    streams = name && name->is_string() && mcp_tool_streams(name->as_string()) && progress_token(message);
  }
  if (streams) {
    auto call = std::make_shared<StreamedCall>(co_await asio::this_coro::executor);
    call->id = message.id;
    call->token = *progress_token(message);
    call->in_flight = mcp.sessions.begin_request(session->id, id_key(message.id), call->cancellation);
    call->watch = server::DisconnectWatch::start(
        ctx.stream().socket(), [cancellation = call->cancellation] { cancellation->cancel(); });
    server::StreamResponse response;
    response.header.result(http::status::ok);
    response.header.version(11);
    response.header.set(http::field::content_type, "text/event-stream");
    response.header.set(http::field::cache_control, "no-cache");
    response.header.set(kSessionHeader, session->id);
    response.produce = [&mcp, &ctx, call, message = std::move(message)](server::ChunkWriter& writer) {
      return stream_call(mcp, ctx, call, message, writer);
    };
    co_return response;
  }
  McpCallOptions options;
  options.cancellation = std::make_shared<runtime::Cancellation>();
  auto in_flight = mcp.sessions.begin_request(session->id, id_key(message.id), options.cancellation);
  // A tool call may run a command: a client that leaves stops it.
  StopWatch watch;
  if (message.method == "tools/call")
    watch.watch = server::DisconnectWatch::start(
        ctx.stream().socket(), [cancellation = options.cancellation] { cancellation->cancel(); });
  auto cancellation = options.cancellation;
  auto response = co_await answer(mcp, ctx, message, std::move(options));
  if (cancellation->cancelled()) response = rpc_error(message.id, kRequestCancelled, "Request cancelled");
  co_return rpc_http(HttpStatus::ok, response, session->id);
}

asio::awaitable<Result<Response>> end_session(Mcp& mcp, RequestContext& ctx) {
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
                                  "Method Not Allowed: this server sends no stream outside a request");
  response.set(http::field::allow, "POST, DELETE");
  co_return response;
}

// The sessions live as long as the routes that use them (the server's handlers).
template <typename Fn>
server::Handler with_mcp(std::shared_ptr<Mcp> mcp, Fn fn) {
  return [mcp, fn](server::RequestContext& ctx) { return fn(*mcp, ctx); };
}

}  // namespace

void register_mcp_routes(server::HttpServer& http, ApiContext& api) {
  auto mcp = std::make_shared<Mcp>(api);
  http.route(http::verb::post, "/mcp", "mcp.post", with_mcp(mcp, post_message));
  http.route(http::verb::get, "/mcp", "mcp.get", with_mcp(mcp, no_stream));
  http.route(http::verb::delete_, "/mcp", "mcp.delete", with_mcp(mcp, end_session));
}

}  // namespace sandboxd::api
