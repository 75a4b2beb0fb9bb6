// Workspace thread chat (docs/http-api.md, "Code execution in the Workspace" in
// docs/contract.md): the HTTP surface of the Workspace's threads. The threads, a turn's
// history, its answer and its artifacts are the workspace service's
// (service/workspace_chat.h); this file reads the requests, runs the /messages tool loop
// that answers a turn (with the thread as the container), sends its events to the
// client as server-sent events and shapes the responses.

#include <boost/json.hpp>
#include <memory>
#include <optional>

#include "api/routes.h"
#include "api/thread_chat.h"
#include "api/tool_loop_support.h"
#include "base/utf8.h"
#include "model/sse.h"
#include "model/tool_loop.h"
#include "service/workspace_chat.h"
#include "store/keys.h"

namespace sandboxd::api {

using service::resource_block;
using service::stored_json;
using service::TurnRequest;
using service::WorkspaceChat;
using service::WorkspaceTurn;
namespace {

namespace json = boost::json;

constexpr size_t kChatBodyLimit = 1u << 20;
constexpr size_t kMaxContentBytes = 256u << 10;
constexpr size_t kMaxTitleBytes = 200;
constexpr size_t kMaxSkills = 8;

// ---------------------------------------------------------------------------------
// JSON shapes

json::object thread_json(const store::ThreadRecord& t) {
  return {{"id", t.id},
          {"type", "thread"},
          {"title", t.title},
          {"created_at", ContainerService::format_time(t.created_at)},
          {"updated_at", ContainerService::format_time(t.updated_at)}};
}

json::object message_json(const store::ThreadMessage& m) {
  json::object out{{"id", m.id},
                   {"type", "message"},
                   {"role", m.role},
                   {"content", stored_json(m.content)},
                   {"created_at", ContainerService::format_time(m.created_at)}};
  json::value extra = stored_json(m.extra);
  if (extra.is_object())
    for (const auto& [key, value] : extra.as_object()) out[key] = value;
  return out;
}

json::object artifact_json(const std::string& thread_id, const store::ThreadArtifact& a, bool downloadable) {
  json::object out = resource_block(thread_id, a, downloadable);
  out["type"] = "artifact";
  out["created_at"] = ContainerService::format_time(a.created_at);
  return out;
}

Result<std::string> read_title(const json::object& body) {
  auto* title = body.if_contains("title");
  if (!title || title->is_null()) return std::string();
  if (!title->is_string()) return ApiError::invalid_request("'title' must be a string");
  std::string text(title->as_string());
  if (text.size() > kMaxTitleBytes)
    return ApiError::invalid_request("'title' is longer than " + std::to_string(kMaxTitleBytes) + " bytes");
  for (unsigned char c : text)
    if (c < 0x20 || c == 0x7f) return ApiError::invalid_request("'title' must not hold control characters");
  return text;
}

// ---------------------------------------------------------------------------------
// The request of a turn

// What the service takes for the turn, and how the client wants the answer.
struct ChatRequest {
  TurnRequest turn;
  bool stream = false;
};

// The version a pgpt.tools entry names: its type, or the string itself ("" for the bare
// name "code_execution").
std::string requested_version(const json::value& tool) {
  auto version_of = [](std::string_view s) {
    return s.starts_with("code_execution_") ? std::string(s) : std::string();
  };
  if (tool.is_string()) return version_of(tool.as_string());
  auto* type = tool.as_object().if_contains("type");
  return type && type->is_string() ? version_of(type->as_string()) : std::string();
}

bool is_code_execution_tool(const json::value& tool) {
  auto names = [](std::string_view s) {
    return s == "code_execution" || s == "code_execution_v1" || s == "code_execution_20250825" ||
           s == "code_execution_20260120" || s == "code_execution_20260521";
  };
  if (tool.is_string()) return names(tool.as_string());
  if (!tool.is_object()) return false;
  auto* name = tool.as_object().if_contains("name");
  auto* type = tool.as_object().if_contains("type");
  return (name && name->is_string() && names(name->as_string())) ||
         (type && type->is_string() && names(type->as_string()));
}

Result<ChatRequest> parse_chat_request(const json::object& body) {
  ChatRequest request;
  for (const auto& [key, value] : body) {
    if (key == "content") {
      if (!value.is_string() || value.as_string().empty())
        return ApiError::invalid_request("'content' must be a non-empty string");
      if (value.as_string().size() > kMaxContentBytes)
        return ApiError::invalid_request("'content' is longer than " + std::to_string(kMaxContentBytes) +
                                         " bytes");
      request.turn.content = std::string(value.as_string());
    } else if (key == "skills") {
      if (value.is_null()) continue;
      if (!value.is_array())
        return ApiError::invalid_request("'skills' must be a list of {type, skill_id, version?}");
      if (value.as_array().size() > kMaxSkills)
        return ApiError::invalid_request("'skills' holds at most " + std::to_string(kMaxSkills) + " skills");
      for (size_t i = 0; i < value.as_array().size(); ++i) {
        const auto& skill = value.as_array()[i];
        auto* id = skill.is_object() ? skill.as_object().if_contains("skill_id") : nullptr;
        if (!id || !id->is_string() || id->as_string().empty())
          return ApiError::invalid_request("skills." + std::to_string(i) +
                                           ": must be an object with a 'skill_id'");
      }
      request.turn.skills = value.as_array();
    } else if (key == "pgpt") {
      if (value.is_null()) continue;
      if (!value.is_object()) return ApiError::invalid_request("'pgpt' must be an object");
      for (const auto& [pkey, pvalue] : value.as_object()) {
        if (pkey != "tools")
          return ApiError::invalid_request("pgpt." + std::string(pkey) + ": unknown field");
        if (!pvalue.is_array()) return ApiError::invalid_request("'pgpt.tools' must be a list");
        for (size_t i = 0; i < pvalue.as_array().size(); ++i) {
          if (!is_code_execution_tool(pvalue.as_array()[i]))
            return ApiError::invalid_request(
                "pgpt.tools." + std::to_string(i) +
                ": unknown tool; this workspace offers 'code_execution' "
                "(\"code_execution\" or {\"name\": \"code_execution\", \"type\": "
                "\"code_execution_v1\"})");
          request.turn.code_execution_requested = true;
          if (auto version = requested_version(pvalue.as_array()[i]); !version.empty())
            request.turn.code_tool_type = std::move(version);
        }
      }
    } else if (key == "stream") {
      if (!value.is_bool()) return ApiError::invalid_request("'stream' must be a boolean");
      request.stream = value.as_bool();
    } else if (key == "model") {
      if (!value.is_string() || value.as_string().empty())
        return ApiError::invalid_request("'model' must be a non-empty string");
      request.turn.model = std::string(value.as_string());
    } else if (key == "max_tokens") {
      if (!value.is_int64() || value.as_int64() < 1 || value.as_int64() > 1'000'000)
        return ApiError::invalid_request("'max_tokens' must be an integer from 1 to 1000000");
      request.turn.max_tokens = value.as_int64();
    } else {
      return ApiError::invalid_request("Unknown field '" + std::string(key).substr(0, 100) + "'");
    }
  }
  if (request.turn.content.empty()) return ApiError::invalid_request("'content' is required");
  return request;
}

// ---------------------------------------------------------------------------------
// A turn's stream

// The loop that answers one turn and where its events go, alive until its stream ends.
// Each event passes through the service's turn (which rebuilds the answer) on its way
// to the client; at the answer's message_delta the turn's artifacts are sent as
// zylon-resource blocks and the turn stored, before the client learns that the message
// ended.
class TurnStream : public model::EventSink {
 public:
  explicit TurnStream(std::shared_ptr<WorkspaceTurn> turn) : turn(std::move(turn)) {}
  ~TurnStream() override {
    if (watch) watch->stop();
    turn->release();
  }

  std::shared_ptr<WorkspaceTurn> turn;
  std::unique_ptr<ContainerRunner> runner;
  std::unique_ptr<model::ToolLoop> loop;
  std::shared_ptr<server::DisconnectWatch> watch;
  model::EventSink* client = nullptr;  // the SSE stream, when the client asked for one
  json::object answer;                 // the stored assistant message, as answered

  // The turn was stopped (a stop request, or the client closed the stream) before the
  // answer ended: what was said so far is stored, marked stopped, and an open stream
  // ends as a finished one does.
  asio::awaitable<void> finish_stopped() {
    turn->drop_incomplete_blocks();
    // Named objects, not temporaries in the co_await expressions (GCC 12 miscompiles
    // initializer lists there).
    json::object delta;
    delta["stop_reason"] = nullptr;
    delta["stop_sequence"] = nullptr;
    delta["stopped"] = true;
    json::object usage;
    usage["output_tokens"] = 0;
    json::object message_delta;
    message_delta["type"] = "message_delta";
    message_delta["delta"] = std::move(delta);
    message_delta["usage"] = std::move(usage);
    json::object message_stop;
    message_stop["type"] = "message_stop";
    const bool client_here = co_await finish(message_delta);
    if (client_here) co_await forward("message_stop", message_stop);
  }

  asio::awaitable<bool> send(std::string_view event, const json::object& data) override {
    if (event == "message_delta") co_return co_await finish(data);
    std::optional<json::object> replaced = turn->record(event, data);
    co_return co_await forward(event, replaced ? *replaced : data);
  }

 private:
  asio::awaitable<bool> forward(std::string_view event, const json::object& data) {
    if (!client) co_return true;
    co_return co_await client->send(event, data);
  }

  // The answer is complete: artifacts, then the stored turn, then the end of the message.
  asio::awaitable<bool> finish(const json::object& message_delta) {
    auto blocks = co_await turn->add_artifacts();
    bool client_here = true;
    for (const auto& [index, block] : blocks) {
      json::object start{{"type", "content_block_start"}, {"index", index}, {"content_block", block}};
      json::object stop{{"type", "content_block_stop"}, {"index", index}};
      if (client_here) client_here = co_await forward("content_block_start", start);
      if (client_here) client_here = co_await forward("content_block_stop", stop);
    }
    auto stored = co_await turn->store(message_delta);
    if (stored) {
      answer = message_json(stored->message);
      answer["thread_id"] = turn->thread_id();
      if (!stored->container.is_null()) answer["container"] = stored->container;
    }
    if (!client_here) co_return false;
    co_return co_await forward("message_delta", message_delta);
  }
};

// ---------------------------------------------------------------------------------
// Routes

asio::awaitable<Result<store::ThreadRecord>> find_thread(WorkspaceChat& chat, RequestContext& ctx) {
  co_return co_await chat.find(ctx.owner, ctx.params["thread_id"]);
}

asio::awaitable<Result<Response>> create_thread(ApiContext&, WorkspaceChat& chat, RequestContext& ctx) {
  auto body = co_await ctx.read_body(64 * 1024);
  if (!body) co_return body.error();
  json::object object;
  if (!body->empty()) {
    auto parsed = parse_json_object(*body);
    if (!parsed) co_return parsed.error();
    object = std::move(*parsed);
  }
  for (const auto& [key, value] : object)
    if (key != "title")
      co_return ApiError::invalid_request("Unknown field '" + std::string(key).substr(0, 100) + "'");
  auto title = read_title(object);
  if (!title) co_return title.error();
  auto created = co_await chat.create(ctx.owner, *title);
  if (!created) co_return created.error();
  co_return json_ok(thread_json(*created), http::status::created);
}

asio::awaitable<Result<Response>> list_threads(ApiContext&, WorkspaceChat& chat, RequestContext& ctx) {
  auto limit = page_limit(ctx);
  if (!limit) co_return limit.error();
  // `q`: the threads whose title holds it (ignoring case), for the page's search box.
  std::string title_query = ctx.query_value("q").value_or("");
  if (title_query.size() > kMaxTitleBytes)
    co_return ApiError::invalid_request("'q' is longer than " + std::to_string(kMaxTitleBytes) + " bytes");
  if (!is_valid_utf8(title_query)) co_return ApiError::invalid_request("'q' must be UTF-8 text");
  const std::string after_id = ctx.query_value("after_id").value_or("");
  auto page = co_await chat.list(ctx.owner, *limit, after_id, title_query);
  json::array data;
  for (const auto& t : page.threads) data.push_back(thread_json(t));
  json::object out{{"data", data}, {"has_more", page.has_more}};
  out["first_id"] = page.threads.empty() ? json::value(nullptr) : json::value(page.threads.front().id);
  out["last_id"] = page.threads.empty() ? json::value(nullptr) : json::value(page.threads.back().id);
  co_return json_ok(out);
}

asio::awaitable<Result<Response>> get_thread(ApiContext&, WorkspaceChat& chat, RequestContext& ctx) {
  auto thread = co_await find_thread(chat, ctx);
  if (!thread) co_return thread.error();
  json::object out = thread_json(*thread);
  json::array messages;
  auto stored = co_await chat.messages(ctx.owner, thread->id);
  for (const auto& m : stored) messages.push_back(message_json(m));
  out["messages"] = std::move(messages);
  co_return json_ok(out);
}

asio::awaitable<Result<Response>> rename_thread(ApiContext&, WorkspaceChat& chat, RequestContext& ctx) {
  auto body = co_await ctx.read_body(64 * 1024);
  if (!body) co_return body.error();
  auto object = parse_json_object(*body);
  if (!object) co_return object.error();
  for (const auto& [key, value] : *object)
    if (key != "title")
      co_return ApiError::invalid_request("Unknown field '" + std::string(key).substr(0, 100) + "'");
  if (!object->contains("title")) co_return ApiError::invalid_request("'title' is required");
  auto title = read_title(*object);
  if (!title) co_return title.error();
  auto renamed = co_await chat.rename(ctx.owner, ctx.params["thread_id"], *title);
  if (!renamed) co_return renamed.error();
  co_return json_ok(thread_json(*renamed));
}

asio::awaitable<Result<Response>> delete_thread(ApiContext&, WorkspaceChat& chat, RequestContext& ctx) {
  auto thread = co_await find_thread(chat, ctx);
  if (!thread) co_return thread.error();
  co_await chat.remove(*thread);
  co_return json_ok(json::object{{"id", thread->id}, {"type", "thread_deleted"}, {"deleted", true}});
}

asio::awaitable<Result<Response>> list_artifacts(ApiContext& api, WorkspaceChat& chat, RequestContext& ctx) {
  auto thread = co_await find_thread(chat, ctx);
  if (!thread) co_return thread.error();
  const bool downloadable = api.config()->download_generated;
  json::array data;
  auto artifacts = co_await chat.artifacts(ctx.owner, thread->id);
  for (const auto& a : artifacts) data.push_back(artifact_json(thread->id, a, downloadable));
  co_return json_ok(json::object{{"data", data}});
}

// Stops the thread's running turn: its command is killed, what was said so far is
// stored marked stopped. Answers once the turn has been stored (bounded: a turn that
// takes longer is still stopping), so a reload right after shows it.
asio::awaitable<Result<Response>> stop_turn(ApiContext&, WorkspaceChat& chat, RequestContext& ctx) {
  auto thread = co_await find_thread(chat, ctx);
  if (!thread) co_return thread.error();
  const bool was_running = co_await chat.stop_turn(ctx.owner, thread->id);
  co_return json_ok(json::object{{"id", thread->id}, {"type", "thread_turn_stop"}, {"stopped", was_running}});
}

// The thread's files: what the user uploaded and what turns wrote to outputs/, with
// the organisation's download settings for each kind.
asio::awaitable<Result<Response>> list_files(ApiContext& api, WorkspaceChat& chat, RequestContext& ctx) {
  auto thread = co_await find_thread(chat, ctx);
  if (!thread) co_return thread.error();
  const auto config = api.config();
  json::array data;
  auto files = co_await chat.files(ctx.owner, thread->id);
  for (const auto& [record, upload] : files)
    data.push_back(
        json::object{{"type", "thread_file"},
                     {"file_id", store::file_id_for_path(record.path)},
                     {"filename", record.path.substr(record.path.rfind('/') + 1)},
                     {"path", record.path},
                     {"kind", upload ? "upload" : "output"},
                     {"mime_type", record.mime},
                     {"size_bytes", record.size},
                     {"downloadable", upload ? config->download_uploaded : config->download_generated},
                     {"created_at", ContainerService::format_time(record.created_at)}});
  co_return json_ok(json::object{{"data", data}});
}

// The operator's settings the page shows (not secrets).
asio::awaitable<Result<Response>> features(ApiContext& api, WorkspaceChat&, RequestContext&) {
  const auto config = api.config();
  co_return json_ok(
      json::object{{"code_execution",
                    {{"enabled", config->code_execution_enabled},
                     {"available", api.containers.code_execution_available()}}},
                   {"downloads",
                    {{"generated_resources", config->download_generated},
                     {"uploaded_resources", config->download_uploaded}}},
                   {"model", {{"configured", !config->model_base_url.empty() && api.upstream != nullptr}}},
                   {"max_upload_bytes", config->max_upload_bytes},
                   {"max_history_turns", config->max_history_turns}});
}

asio::awaitable<Result<Response>> post_message(ApiContext& api, WorkspaceChat& chat, RequestContext& ctx) {
  auto body = co_await ctx.read_body(kChatBodyLimit);
  if (!body) co_return body.error();
  auto object = parse_json_object(*body);
  if (!object) co_return object.error();
  auto request = parse_chat_request(*object);
  if (!request) co_return request.error();
  auto thread = co_await find_thread(chat, ctx);
  if (!thread) co_return thread.error();
  const auto config = api.config();
  if (config->model_base_url.empty() || !api.upstream)
    co_return ApiError::invalid_request(
        "No upstream model is configured: set model.baseUrl in sandboxd's configuration");

  auto begun = co_await chat.begin_turn(*thread, std::move(request->turn), config, model::new_message_id(),
                                        model::new_message_id());
  if (!begun) co_return begun.error();
  auto stream = std::make_shared<TurnStream>(std::move(*begun));
  auto parsed =
      model::parse_messages_request(stream->turn->take_upstream_request(), &ContainerService::valid_id);
  if (!parsed) co_return parsed.error();
  std::string upstream_model = parsed->model;
  if (auto it = config->model_names.find(parsed->model); it != config->model_names.end())
    upstream_model = it->second;

  const auto& cancellation = stream->turn->cancellation();
  stream->runner =
      std::make_unique<ContainerRunner>(api, stream->turn->container(), cancellation, /*depth=*/0);
  model::LoopSettings settings = loop_settings(*config);
  settings.stream_execution_output = true;  // the page shows a running command's output
  stream->loop = std::make_unique<model::ToolLoop>(api.upstream, std::move(settings), std::move(*parsed),
                                                   upstream_model, *stream->runner, cancellation);
  stream->watch =
      server::DisconnectWatch::start(ctx.stream().socket(), [cancellation] { cancellation->cancel(); });
  auto opened = co_await stream->loop->open();
  if (!opened) co_return opened.error();
  if (!request->stream) {
    co_await stream->loop->stream(*stream);
    if (!stream->turn->stored() && cancellation->cancelled()) co_await stream->finish_stopped();
    stream->watch->stop();
    if (!stream->turn->stored())
      co_return stream->turn->failure() ? *stream->turn->failure()
                                        : ApiError::upstream_failed("The turn did not finish");
    co_return json_ok(stream->answer);
  }
  server::StreamResponse response;
  response.header.result(http::status::ok);
  response.header.version(11);
  response.header.set(http::field::content_type, "text/event-stream");
  response.header.set(http::field::cache_control, "no-cache");
  response.produce = [stream](server::ChunkWriter& writer) -> asio::awaitable<void> {
    SseSink sink(writer);
    stream->client = &sink;
    co_await stream->loop->stream(*stream);
    if (!stream->turn->stored() && stream->turn->cancellation()->cancelled())
      co_await stream->finish_stopped();
    stream->client = nullptr;
    stream->watch->stop();
  };
  co_return response;
}

template <typename Fn>
server::Handler with_chat(ApiContext& api, std::shared_ptr<WorkspaceChat> chat, Fn fn) {
  return [&api, chat, fn](RequestContext& ctx) { return fn(api, *chat, ctx); };
}

}  // namespace

void install_thread_chat_routes(server::HttpServer& http, ApiContext& api,
                                std::shared_ptr<store::db::Database> database) {
  auto chat = std::make_shared<WorkspaceChat>(api, std::move(database));
  api.threads = &chat->threads();  // the routes keep `chat` alive as long as the server
  const std::string base = "/api/v1/app/thread";
  http.route(http::verb::post, base, "threads.create", with_chat(api, chat, create_thread));
  http.route(http::verb::get, base, "threads.list", with_chat(api, chat, list_threads));
  http.route(http::verb::get, base + "/{thread_id}", "threads.get", with_chat(api, chat, get_thread));
  http.route(http::verb::patch, base + "/{thread_id}", "threads.rename", with_chat(api, chat, rename_thread));
  // Those that work on the thread's container (of the thread's id) run on its holder;
  // the others read and write the thread's records only.
  const server::RouteOptions on_container{.container = server::ContainerScope::path_parameter("thread_id")};
  http.route(http::verb::delete_, base + "/{thread_id}", "threads.delete",
             with_chat(api, chat, delete_thread), on_container);
  http.route(http::verb::get, base + "/{thread_id}/artifacts", "threads.artifacts",
             with_chat(api, chat, list_artifacts), on_container);
  http.route(http::verb::get, base + "/{thread_id}/files", "threads.files", with_chat(api, chat, list_files));
  http.route(http::verb::post, base + "/{thread_id}/stop", "threads.stop", with_chat(api, chat, stop_turn));
  http.route(http::verb::post, base + "/{thread_id}/messages", "threads.message",
             with_chat(api, chat, post_message), on_container);
  http.route(http::verb::get, "/api/v1/app/features", "workspace.features", with_chat(api, chat, features));
}

}  // namespace sandboxd::api
