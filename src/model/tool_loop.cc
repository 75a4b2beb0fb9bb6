#include "model/tool_loop.h"

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <map>
#include <mutex>

#include "base/ids.h"
#include "base/utf8.h"
#include "messages/content_accumulator.h"
#include "messages/error_types.h"
#include "model/sse.h"

namespace sandboxd::model {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr size_t kMaxUpstreamBody = 64u << 20;  // one upstream answer
constexpr size_t kMaxErrorBody = 1u << 20;

ApiError bad_gateway(std::string message) { return ApiError::upstream_failed(std::move(message)); }

// Passed on as the upstream said it: 529 overloaded_error (messages/error_types.h).
ApiError overloaded_529(std::string message) {
  return ApiError{ErrorKind::upstream_overloaded, std::move(message), {}};
}

// Anthropic's errors (https://docs.anthropic.com/en/api/errors): the status, the type,
// and the kind the client gets it as. A 4xx is the client's own request refused, passed
// on with its status and type; a 5xx is the upstream failing, a 502 here, except an
// overloaded model, passed on as 529 for the client to retry later. The one place where
// the upstream's status is read.
struct UpstreamError {
  long status;
  std::string_view type;
  ErrorKind kind;
};
constexpr UpstreamError kUpstreamErrors[] = {
    {400, "invalid_request_error", ErrorKind::invalid},
    {401, "authentication_error", ErrorKind::unauthenticated},
    {402, "billing_error", ErrorKind::billing},
    {403, "permission_error", ErrorKind::forbidden},
    {404, "not_found_error", ErrorKind::not_found},
    {413, "request_too_large", ErrorKind::too_large},
    {429, "rate_limit_error", ErrorKind::rate_limited},
    {500, "api_error", ErrorKind::upstream_failed},
    {504, "timeout_error", ErrorKind::upstream_failed},
    {529, "overloaded_error", ErrorKind::upstream_overloaded},
};

// The kind of an upstream's answer: by its status (a status Anthropic does not list: a
// 4xx is the request refused, anything else the upstream failing), and an
// overloaded_error whatever the status says.
ErrorKind upstream_kind(long status, std::string_view type) {
  if (type == messages::kOverloadedError) return ErrorKind::upstream_overloaded;
  for (const auto& known : kUpstreamErrors)
    if (known.status == status) return known.kind;
  return status >= 400 && status < 500 ? ErrorKind::invalid : ErrorKind::upstream_failed;
}

// A content block the loop can work with: an object with a type, and a tool call with
// a string id and name (everything else in it is passed on as it is).
bool valid_upstream_block(const json::value& value) {
  if (!value.is_object()) return false;
  const auto& block = value.as_object();
  auto* type = block.if_contains("type");
  if (!type || !type->is_string()) return false;
  if (type->as_string() != "tool_use") return true;
  auto* id = block.if_contains("id");
  auto* name = block.if_contains("name");
  return id && id->is_string() && name && name->is_string();
}

// The length of the UTF-8 sequence `text` ends in the middle of (0 when it ends on a
// character boundary): those bytes wait for the next chunk, so no event splits a
// character.
size_t incomplete_utf8_tail(std::string_view text) {
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const auto c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return length > back ? back : 0;
  }
  return 0;
}

// A tool call running beside the ping timer of a stream; its end cancels the timer.
// Output the command writes meanwhile waits in `pending` (filled on the sandbox's
// thread, hence the mutex) and also wakes the timer, so it is sent at once.
struct PingedCall {
  explicit PingedCall(asio::any_io_executor e) : executor(e), timer(e) {}
  asio::any_io_executor executor;
  asio::steady_timer timer;
  bool done = false;
  CodeStep step;
  std::exception_ptr error;

  std::mutex mutex;
  std::vector<std::pair<std::string, std::string>> pending;  // (stream, text), in order
  std::map<std::string, std::string, std::less<>> carry;     // a split character's first bytes
  size_t pending_bytes = 0;
  bool wake_posted = false;

  // The listener's side.
  void add_output(std::string_view stream, std::string_view bytes, const std::shared_ptr<PingedCall>& self) {
    std::lock_guard lock(mutex);
    auto& held = carry[std::string(stream)];
    std::string text = held + std::string(bytes);
    const size_t tail = incomplete_utf8_tail(text);
    held = text.substr(text.size() - tail);
    text.resize(text.size() - tail);
    if (text.empty() || pending_bytes > kMaxPendingOutput) return;  // the result has it all anyway
    pending_bytes += text.size();
    if (!pending.empty() && pending.back().first == stream)
      pending.back().second += to_valid_utf8(text);
    else
      pending.emplace_back(std::string(stream), to_valid_utf8(text));
    if (!wake_posted) {
      wake_posted = true;
      asio::post(executor, [self] { self->timer.cancel(); });
    }
  }
  bool has_output() {
    std::lock_guard lock(mutex);
    return !pending.empty();
  }
  std::vector<std::pair<std::string, std::string>> take_output() {
    std::lock_guard lock(mutex);
    wake_posted = false;
    pending_bytes = 0;
    return std::exchange(pending, {});
  }
  static constexpr size_t kMaxPendingOutput = 4u << 20;
};

// A named coroutine with its arguments by value (not a capturing lambda coroutine,
// whose captures GCC 12 mishandles when co_spawned).
asio::awaitable<void> run_and_signal(ToolRunner& runner, std::shared_ptr<PingedCall> state, std::string tool,
                                     json::object input, bool observed, std::string server_tool_id,
                                     std::optional<std::vector<std::string>> code_tools) {
  try {
    if (code_tools) {
      state->step = co_await runner.run_code(input, server_tool_id, std::move(*code_tools));
    } else if (observed) {
      std::weak_ptr<PingedCall> weak = state;
      auto listener = [weak](std::string_view stream, std::string_view bytes) {
        if (auto call = weak.lock()) call->add_output(stream, bytes, call);
      };
      state->step.result = co_await runner.run_observed(tool, input, std::move(listener));
    } else {
      state->step.result = co_await runner.run(tool, input);
    }
  } catch (...) {
    state->error = std::current_exception();
  }
  state->done = true;
  state->timer.cancel();
}

json::object error_event(const ApiError& error) {
  return {{"type", "error"},
          {"error", {{"type", messages::anthropic_error(error.kind).type}, {"message", error.message}}}};
}

}  // namespace

std::string new_message_id() {
  // The same 24 random characters as a request id ("req_…").
  return "msg_" + new_request_id().substr(4);
}

ApiError upstream_http_error(long status, std::string_view body) {
  std::string type, message;
  boost::system::error_code ec;
  json::value parsed = json::parse(body, ec);
  if (!ec && parsed.is_object()) {
    if (auto* error = parsed.as_object().if_contains("error"); error && error->is_object()) {
      if (auto* t = error->as_object().if_contains("type"); t && t->is_string())
        type = std::string(t->as_string());
      if (auto* m = error->as_object().if_contains("message"); m && m->is_string())
        message = std::string(m->as_string());
    }
  }
  const ErrorKind kind = upstream_kind(status, type);
  if (kind == ErrorKind::upstream_overloaded)
    return overloaded_529(message.empty() ? "The upstream model is overloaded" : message);
  if (status >= 400 && status < 500) {
    if (message.empty()) message = "The upstream model answered HTTP " + std::to_string(status);
    return ApiError{kind, message, {}};
  }
  return bad_gateway("The upstream model failed (HTTP " + std::to_string(status) + ")" +
                     (message.empty() ? std::string() : ": " + message));
}

struct ToolLoop::UpstreamTurn {
  json::array content;
  std::string stop_reason;
  json::value stop_sequence;
  json::object usage;
};

ToolLoop::ToolLoop(std::shared_ptr<UpstreamClient> client, LoopSettings settings, MessagesRequest request,
                   std::string upstream_model, ToolRunner& runner,
                   std::shared_ptr<runtime::Cancellation> cancellation)
    : client_(std::move(client)),
      settings_(std::move(settings)),
      request_(std::move(request)),
      upstream_model_(std::move(upstream_model)),
      runner_(runner),
      cancellation_(std::move(cancellation)),
      id_(new_message_id()) {
  // Built and serialised once: per upstream call only the conversation (and the stream
  // flag) differ.
  json::object base = upstream_body(request_, upstream_model_, false);
  for (const auto& tool : request_.code_callable_tools)
    code_tool_names_.push_back(std::string(tool.as_object().at("name").as_string()));
  conversation_ = std::move(base["messages"].as_array());
  base.erase("messages");
  base_body_ = json::serialize(base);
  base_body_.pop_back();  // the closing brace: the conversation follows
  if (base_body_.size() > 1) base_body_ += ',';
}

ToolLoop::~ToolLoop() {
  if (first_call_) first_call_->cancel();
}

asio::awaitable<Result<std::shared_ptr<UpstreamCall>>> ToolLoop::call_upstream(bool stream) {
  // The body is the base, then the stream flag, then the conversation serialised where
  // it is: no copy of the whole conversation (it grows with every round trip).
  std::string body = base_body_;
  if (stream) body += "\"stream\":true,";
  body += "\"messages\":";
  body += json::serialize(conversation_);
  body += '}';
  UpstreamRequest request;
  request.url = settings_.messages_url;
  request.headers = settings_.headers;
  request.body = std::move(body);
  request.timeout = settings_.timeout;
  auto executor = co_await asio::this_coro::executor;
  auto call = client_->post(executor, std::move(request), cancellation_);
  const auto seconds = std::to_string(settings_.timeout.count() / 1000);
  UpstreamEvent event = co_await call->next();
  if (event.kind == UpstreamEvent::Kind::kEnd) {
    if (event.timed_out) co_return bad_gateway("The upstream model did not answer within " + seconds + "s");
    co_return bad_gateway("The upstream model could not be reached: " + event.error);
  }
  if (event.status >= 200 && event.status < 300) co_return call;
  // An error answer: read its body (bounded) to pass its type and message on.
  const long status = event.status;
  std::string body_text;
  for (;;) {
    UpstreamEvent piece = co_await call->next();
    if (piece.kind == UpstreamEvent::Kind::kEnd) break;
    if (body_text.size() < kMaxErrorBody) body_text.append(piece.data);
  }
  co_return upstream_http_error(status, body_text);
}

json::object ToolLoop::shown_block(const json::object& block) const {
  auto* type = block.if_contains("type");
  auto* name = block.if_contains("name");
  const bool tool_use = type && type->is_string() && type->as_string() == "tool_use";
  if (tool_use && name && name->is_string() && request_.offers(name->as_string())) {
    // Anthropic's server_tool_use has a `caller`: the model called it directly.
    json::object shown{{"type", "server_tool_use"},
                       {"id", server_tool_id(block.at("id").as_string())},
                       {"name", *name},
                       {"caller", {{"type", "direct"}}}};
    auto* input = block.if_contains("input");
    shown["input"] = input ? *input : json::object{};
    return shown;
  }
  if (tool_use && !block.contains("caller")) {  // a client tool the model called (Anthropic's ToolUseBlock)
    json::object shown = block;
    shown["caller"] = json::object{{"type", "direct"}};
    return shown;
  }
  return block;
}

void ToolLoop::add_usage(const json::object& usage) {
  for (const auto& [key, value] : usage) {
    if (value.is_int64() || value.is_uint64()) {
      int64_t add = value.is_int64() ? value.as_int64() : static_cast<int64_t>(value.as_uint64());
      auto* have = usage_.if_contains(key);
      usage_[key] = (have && have->is_int64() ? have->as_int64() : 0) + add;
    } else if (value.is_string()) {
      usage_[key] = value;
    }
  }
}

json::object ToolLoop::final_usage() const {
  json::object usage = usage_;
  if (!usage.contains("input_tokens")) usage["input_tokens"] = 0;
  if (!usage.contains("output_tokens")) usage["output_tokens"] = 0;
  // Anthropic's ServerToolUsage counts web searches and fetches (none here); the code
  // execution count is sandboxd's own.
  usage["server_tool_use"] = {{"code_execution_requests", code_execution_requests_},
                              {"web_search_requests", 0},
                              {"web_fetch_requests", 0}};
  // The counters Anthropic's Usage always has (null when the upstream gave none).
  for (const char* key : {"cache_creation_input_tokens", "cache_read_input_tokens"})
    if (!usage.contains(key)) usage[key] = nullptr;
  return usage;
}

json::object ToolLoop::strip_detail(json::object content) const {
  // Anthropic-compatible tool versions have no `detail` (a Zylon extension).
  if (omits_detail(request_.code_tool) && result_is_error(content)) content.erase("detail");
  return content;
}

asio::awaitable<Result<ToolLoop::UpstreamTurn>> ToolLoop::read_json_turn(std::shared_ptr<UpstreamCall> call) {
  std::string body;
  for (;;) {
    UpstreamEvent event = co_await call->next();
    if (event.kind == UpstreamEvent::Kind::kData) {
      if (body.size() + event.data.size() > kMaxUpstreamBody) {
        call->cancel();
        co_return bad_gateway("The upstream model's answer is larger than 64 MiB");
      }
      body.append(event.data);
      continue;
    }
    if (event.kind != UpstreamEvent::Kind::kEnd) continue;
    if (!event.error.empty()) {
      if (event.timed_out)
        co_return bad_gateway("The upstream model did not finish within " +
                              std::to_string(settings_.timeout.count() / 1000) + "s");
      co_return bad_gateway("The upstream model's answer was cut off: " + event.error);
    }
    break;
  }
  boost::system::error_code ec;
  json::value parsed = json::parse(body, ec);
  if (ec || !parsed.is_object() || !parsed.as_object().contains("content") ||
      !parsed.as_object().at("content").is_array())
    co_return bad_gateway("The upstream model sent an answer that is not a Messages response");
  auto& message = parsed.as_object();
  UpstreamTurn turn;
  turn.content = std::move(message["content"].as_array());
  for (const auto& block : turn.content)
    if (!valid_upstream_block(block))
      co_return bad_gateway("The upstream model sent an invalid content block");
  if (auto* r = message.if_contains("stop_reason"); r && r->is_string())
    turn.stop_reason = std::string(r->as_string());
  if (auto* s = message.if_contains("stop_sequence")) turn.stop_sequence = *s;
  if (auto* u = message.if_contains("usage"); u && u->is_object()) turn.usage = u->as_object();
  co_return turn;
}

asio::awaitable<Result<ToolLoop::UpstreamTurn>> ToolLoop::read_stream_turn(std::shared_ptr<UpstreamCall> call,
                                                                           EventSink& sink) {
  UpstreamTurn turn;
  std::vector<SseEvent> pending;
  SseParser parser([&](const SseEvent& event) { pending.push_back(event); });
  messages::ContentAccumulator content;  // the blocks of this upstream turn
  const size_t base = content_.size();
  bool stopped = false;
  auto index_of = [&](const json::object& data) -> std::optional<int64_t> {
    auto* index = data.if_contains("index");
    if (!index || !index->is_int64() || index->as_int64() < 0 || index->as_int64() > 100000)
      return std::nullopt;
    return index->as_int64();
  };
  for (;;) {
    UpstreamEvent event = co_await call->next();
    if (event.kind == UpstreamEvent::Kind::kEnd) {
      if (!stopped) {
        if (event.timed_out)
          co_return bad_gateway("The upstream model did not finish within " +
                                std::to_string(settings_.timeout.count() / 1000) + "s");
        co_return bad_gateway("The upstream model's stream ended before message_stop" +
                              (event.error.empty() ? std::string() : ": " + event.error));
      }
      break;
    }
    if (event.kind != UpstreamEvent::Kind::kData) continue;
    parser.feed(event.data);
    if (parser.pending_bytes() > kMaxUpstreamBody) {
      call->cancel();
      co_return bad_gateway("The upstream model sent an over-long event");
    }
    for (auto& sse : pending) {
      if (stopped) break;
      boost::system::error_code ec;
      json::value parsed = json::parse(sse.data, ec);
      if (ec || !parsed.is_object()) {
        call->cancel();
        co_return bad_gateway("The upstream model sent an invalid stream event");
      }
      auto& data = parsed.as_object();
      std::string type = sse.event;
      if (auto* t = data.if_contains("type"); t && t->is_string()) type = std::string(t->as_string());
      bool delivered = true;
      if (type == "message_start") {
        auto* message = data.if_contains("message");
        if (message && message->is_object())
          if (auto* u = message->as_object().if_contains("usage"); u && u->is_object())
            turn.usage = u->as_object();
        delivered = co_await send_message_start(sink, turn.usage);
      } else if (type == "content_block_start" || type == "content_block_delta" ||
                 type == "content_block_stop") {
        auto index = index_of(data);
        if (!index) {
          call->cancel();
          co_return bad_gateway("The upstream model sent a stream event without a valid index");
        }
        if (type == "content_block_start") {
          auto* block = data.if_contains("content_block");
          if (!block || !valid_upstream_block(*block) || static_cast<size_t>(*index) != content.size()) {
            call->cancel();
            co_return bad_gateway("The upstream model sent an invalid content_block_start");
          }
          content.start(block->as_object());
          data["content_block"] = shown_block(block->as_object());
        } else {
          auto* delta = data.if_contains("delta");
          const auto outcome = type == "content_block_stop" ? content.stop(static_cast<size_t>(*index))
                                                            : content.apply(static_cast<size_t>(*index),
                                                                            delta ? *delta : json::value());
          if (outcome != messages::ContentAccumulator::Outcome::applied) {
            call->cancel();
            using Outcome = messages::ContentAccumulator::Outcome;
            co_return bad_gateway(outcome == Outcome::no_such_block
                                      ? "The upstream model sent an event for a block it never started"
                                  : outcome == Outcome::bad_delta
                                      ? "The upstream model sent a delta without a body"
                                      : "The upstream model streamed a tool input that is not a JSON object");
          }
        }
        data["index"] = static_cast<int64_t>(base) + *index;
        delivered = co_await sink.send(type, data);
      } else if (type == "message_delta") {
        if (auto* delta = data.if_contains("delta"); delta && delta->is_object()) {
          if (auto* r = delta->as_object().if_contains("stop_reason"); r && r->is_string())
            turn.stop_reason = std::string(r->as_string());
          if (auto* s = delta->as_object().if_contains("stop_sequence")) turn.stop_sequence = *s;
        }
        if (auto* u = data.if_contains("usage"); u && u->is_object())
          for (const auto& [key, value] : u->as_object()) turn.usage[key] = value;
      } else if (type == "message_stop") {
        stopped = true;
      } else if (type == "error") {
        std::string error_type, message = "The upstream model failed mid-stream";
        if (auto* e = data.if_contains("error"); e && e->is_object()) {
          if (auto* t = e->as_object().if_contains("type"); t && t->is_string())
            error_type = std::string(t->as_string());
          if (auto* m = e->as_object().if_contains("message"); m && m->is_string())
            message = std::string(m->as_string());
        }
        call->cancel();
        if (error_type == messages::kOverloadedError) co_return overloaded_529(message);
        co_return bad_gateway("The upstream model failed mid-stream: " + message);
      }
      // "ping" and unknown events are the upstream's own business.
      if (!delivered) {
        call->cancel();
        co_return ApiError::invalid_request("The client went away");
      }
    }
    pending.clear();
  }
  turn.content = content.take();
  co_return turn;
}

asio::awaitable<CodeStep> ToolLoop::run_with_pings(std::string_view tool, const json::object& input,
                                                   EventSink* sink, const std::string& tool_use_id,
                                                   const std::vector<std::string>* code_tools) {
  if (!sink) {
    if (code_tools) co_return co_await runner_.run_code(input, tool_use_id, *code_tools);
    CodeStep step;  // (not co_await inside a braced initializer: GCC 12 miscompiles it)
    step.result = co_await runner_.run(tool, input);
    co_return step;
  }
  // The call runs beside a ping timer: a long command keeps the stream visibly alive,
  // and (where asked for) its output is sent as it comes.
  auto executor = co_await asio::this_coro::executor;
  auto state = std::make_shared<PingedCall>(executor);
  const bool observed = settings_.stream_execution_output;
  std::optional<std::vector<std::string>> tools;
  if (code_tools) tools = *code_tools;
  asio::co_spawn(
      executor,
      run_and_signal(runner_, state, std::string(tool), input, observed, tool_use_id, std::move(tools)),
      asio::detached);
  bool client_here = true;
  auto send_output = [&]() -> asio::awaitable<bool> {
    bool sent = false;
    for (auto& [stream, text] : state->take_output()) {
      sent = true;
      json::object event{
          {"type", "execution_output"}, {"tool_use_id", tool_use_id}, {"stream", stream}, {"text", text}};
      if (client_here) client_here = co_await sink->send("execution_output", event);
    }
    co_return sent;
  };
  while (!state->done) {
    // Output that came while the last was being sent (its wake-up found no wait).
    if (observed && state->has_output()) {
      co_await send_output();
      continue;
    }
    boost::system::error_code ec;
    state->timer.expires_after(settings_.ping_interval);
    co_await state->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    const bool sent = observed && co_await send_output();
    if (!state->done && !ec && !sent && client_here) {
      json::object ping{{"type", "ping"}};
      client_here = co_await sink->send("ping", ping);
    }
  }
  if (observed) co_await send_output();  // what came just before the result
  if (state->error) std::rethrow_exception(state->error);
  co_return std::move(state->step);
}

asio::awaitable<bool> ToolLoop::after_turn(UpstreamTurn& turn, EventSink* sink) {
  std::vector<const json::object*> server_calls;
  bool client_calls = false;
  for (const auto& value : turn.content) {
    const auto& block = value.as_object();
    content_.push_back(shown_block(block));
    if (auto* type = block.if_contains("type");
        type && type->is_string() && type->as_string() == "tool_use") {
      if (content_.back().as_object().at("type").as_string() == "server_tool_use")
        server_calls.push_back(&block);
      else
        client_calls = true;
    }
  }
  stop_reason_ = turn.stop_reason;
  stop_sequence_ = turn.stop_sequence;
  if (turn.stop_reason != "tool_use" || server_calls.empty()) co_return false;

  json::array results;
  for (const auto* call : server_calls) {
    if (cancellation_ && cancellation_->cancelled()) co_return false;
    std::string name(call->at("name").as_string());
    std::string upstream_id(call->at("id").as_string());
    const std::string shown_id = server_tool_id(upstream_id);
    auto* input_value = call->if_contains("input");
    const json::object no_input;
    const json::object& input = input_value && input_value->is_object() ? input_value->as_object() : no_input;
    // Code that may call client tools; once one such pauses, the kernel is its until the
    // client answers, so a second Python call of the same turn cannot run.
    const bool programmatic = name == kPythonTool && !code_tool_names_.empty();
    CodeStep step;
    if (name == kPythonTool && code_paused_) {
      step.result = json::object{
          {"type", "code_execution_tool_result_error"},
          {"error_code", "unavailable"},
          {"detail",
           {{"code", nullptr},
            {"explanation", "The Python kernel waits on tool results for an earlier call of this turn"}}}};
    } else {
      step = co_await run_with_pings(name, input, sink, shown_id, programmatic ? &code_tool_names_ : nullptr);
    }
    ++code_execution_requests_;
    if (!step.pending.empty()) {  // it waits on the client: no result yet
      co_await add_code_calls(shown_id, step.pending, sink);
      code_paused_ = true;
      continue;
    }
    json::object tool_result{{"type", "tool_result"},
                             {"tool_use_id", upstream_id},
                             {"content", result_text_for_model(step.result)}};
    if (result_is_error(step.result)) tool_result["is_error"] = true;
    results.push_back(std::move(tool_result));
    json::object result_block{{"type", name + "_tool_result"},
                              {"tool_use_id", shown_id},
                              {"content", strip_detail(std::move(step.result))}};
    co_await add_block(std::move(result_block), sink);
  }
  // stop_reason stays tool_use: the client answers (its own calls, or those of the code)
  if (client_calls || code_paused_) co_return false;
  conversation_.push_back(json::object{{"role", "assistant"}, {"content", std::move(turn.content)}});
  conversation_.push_back(json::object{{"role", "user"}, {"content", std::move(results)}});
  if (++iterations_ >= settings_.max_tool_iterations) {
    stop_reason_ = "pause_turn";
    stop_sequence_ = nullptr;
    co_return false;
  }
  co_return true;
}

asio::awaitable<void> ToolLoop::add_block(json::object block, EventSink* sink) {
  if (!sink) {
    content_.push_back(std::move(block));
    co_return;
  }
  content_.push_back(block);
  const auto index = static_cast<int64_t>(content_.size() - 1);
  json::object stop{{"type", "content_block_stop"}, {"index", index}};
  if (block.at("type").as_string() == "tool_use") {
    // As Anthropic streams a tool call: an empty input, then the input as JSON deltas.
    json::object input = block.at("input").as_object();
    block["input"] = json::object{};
    json::object start{{"type", "content_block_start"}, {"index", index}, {"content_block", block}};
    json::object delta{{"type", "content_block_delta"},
                       {"index", index},
                       {"delta", {{"type", "input_json_delta"}, {"partial_json", json::serialize(input)}}}};
    co_await sink->send("content_block_start", start);
    co_await sink->send("content_block_delta", delta);
    co_await sink->send("content_block_stop", stop);
    co_return;
  }
  json::object start{{"type", "content_block_start"}, {"index", index}, {"content_block", block}};
  co_await sink->send("content_block_start", start);
  co_await sink->send("content_block_stop", stop);
}

asio::awaitable<void> ToolLoop::add_code_calls(const std::string& server_tool_id,
                                               const std::vector<CodeCall>& calls, EventSink* sink) {
  for (const auto& call : calls) {
    json::object caller{{"type", code_tool_type(request_.code_tool)}, {"tool_id", server_tool_id}};
    json::object block{{"type", "tool_use"},
                       {"id", call.tool_use_id},
                       {"name", call.name},
                       {"input", call.input},
                       {"caller", caller}};
    co_await add_block(std::move(block), sink);
  }
  stop_reason_ = "tool_use";
  stop_sequence_ = nullptr;
}

void ToolLoop::add_result_for_model(const std::string& upstream_id, const json::object& content) {
  json::object tool_result{
      {"type", "tool_result"}, {"tool_use_id", upstream_id}, {"content", result_text_for_model(content)}};
  if (result_is_error(content)) tool_result["is_error"] = true;
  // Into the user turn after the call (it may hold the answers to the model's own calls).
  if (!conversation_.empty() && conversation_.back().as_object().at("role").as_string() == "user") {
    auto& previous = conversation_.back().as_object()["content"];
    if (previous.is_string())
      previous = json::array{json::object{{"type", "text"}, {"text", previous.as_string()}}};
    previous.as_array().push_back(std::move(tool_result));
    return;
  }
  conversation_.push_back(json::object{{"role", "user"}, {"content", json::array{std::move(tool_result)}}});
}

asio::awaitable<Result<void>> ToolLoop::resume_code() {
  if (!request_.resumed_code) co_return Result<void>();
  const auto& resumed = *request_.resumed_code;
  auto step = co_await runner_.resume_code(resumed.server_tool_id, resumed.answers);
  if (!step) co_return step.error();
  if (!step->pending.empty()) {
    co_await add_code_calls(resumed.server_tool_id, step->pending, nullptr);
    code_paused_ = true;
    co_return Result<void>();
  }
  content_.push_back(json::object{{"type", "code_execution_tool_result"},
                                  {"tool_use_id", resumed.server_tool_id},
                                  {"content", strip_detail(step->result)}});
  // The history gave the upstream the server_tool_use under its own id.
  add_result_for_model(resumed.server_tool_id, step->result);
  co_return Result<void>();
}

asio::awaitable<bool> ToolLoop::send_message_start(EventSink& sink, const json::object& usage) {
  if (message_started_) co_return true;
  message_started_ = true;
  json::object start{{"id", id_},
                     {"type", "message"},
                     {"role", "assistant"},
                     {"model", request_.model},
                     {"content", json::array{}},
                     {"stop_reason", nullptr},
                     {"stop_sequence", nullptr},
                     {"stop_details", nullptr},
                     {"container", nullptr},  // known at the end: in message_delta
                     {"usage", usage}};
  json::object event_data{{"type", "message_start"}, {"message", std::move(start)}};
  co_return co_await sink.send("message_start", event_data);
}

asio::awaitable<Result<json::object>> ToolLoop::run() {
  if (auto resumed = co_await resume_code(); !resumed) co_return resumed.error();
  while (!code_paused_) {
    auto call = co_await call_upstream(false);
    if (!call) co_return call.error();
    auto turn = co_await read_json_turn(*call);
    if (!turn) co_return turn.error();
    add_usage(turn->usage);
    if (!co_await after_turn(*turn, nullptr)) break;
  }
  json::object message{
      {"id", id_},
      {"type", "message"},
      {"role", "assistant"},
      {"model", request_.model},
      {"content", nullptr},
      {"stop_reason", stop_reason_.empty() ? json::value(nullptr) : json::value(stop_reason_)},
      {"stop_sequence", stop_sequence_},
      {"stop_details", nullptr},
      {"usage", final_usage()}};
  message["content"] = std::move(content_);  // the turn is over: its blocks are the message's
  message["container"] =
      request_.code_tool != CodeToolVersion::kNone ? runner_.container() : json::value(nullptr);
  co_return message;
}

asio::awaitable<Result<void>> ToolLoop::open() {
  if (auto resumed = co_await resume_code(); !resumed) co_return resumed.error();
  if (code_paused_) co_return Result<void>();  // the code still waits: no model call
  auto call = co_await call_upstream(true);
  if (!call) co_return call.error();
  first_call_ = *call;
  co_return Result<void>();
}

asio::awaitable<void> ToolLoop::stream(EventSink& sink) {
  auto call = std::move(first_call_);
  // What the resumed code gave (its result, or its next tool calls) comes first.
  if (!content_.empty()) {
    json::object no_usage{{"input_tokens", 0}, {"output_tokens", 0}};
    co_await send_message_start(sink, no_usage);
    json::array resumed = std::exchange(content_, {});
    for (auto& block : resumed) co_await add_block(std::move(block.as_object()), &sink);
  }
  while (!code_paused_) {
    auto turn = co_await read_stream_turn(call, sink);
    if (!turn) {
      if (!(cancellation_ && cancellation_->cancelled())) {
        json::object error = error_event(turn.error());
        co_await sink.send("error", error);
      }
      co_return;
    }
    add_usage(turn->usage);
    if (!co_await after_turn(*turn, &sink)) break;
    if (cancellation_ && cancellation_->cancelled()) co_return;
    auto next = co_await call_upstream(true);
    if (!next) {
      if (!(cancellation_ && cancellation_->cancelled())) {
        json::object error = error_event(next.error());
        co_await sink.send("error", error);
      }
      co_return;
    }
    call = *next;
  }
  json::object delta{{"stop_reason", stop_reason_.empty() ? json::value(nullptr) : json::value(stop_reason_)},
                     {"stop_sequence", stop_sequence_},
                     {"stop_details", nullptr}};
  delta["container"] =
      request_.code_tool != CodeToolVersion::kNone ? runner_.container() : json::value(nullptr);
  json::object message_delta{{"type", "message_delta"}, {"delta", delta}, {"usage", final_usage()}};
  json::object message_stop{{"type", "message_stop"}};
  co_await sink.send("message_delta", message_delta);
  co_await sink.send("message_stop", message_stop);
}

}  // namespace sandboxd::model
