// E2B's code interpreter, as @e2b/code-interpreter's Sandbox calls it (port 49999 of an
// E2B sandbox, addressed by headers like envd): runCode's POST /execute, answered with
// a stream of JSON lines (stdout, stderr, results, the error, the execution count,
// end_of_execution) while the cell runs, and its contexts (/contexts). The cells run on
// sandboxd's persistent Python (ContainerExecution::run_python): the default context is
// the container's own kernel, the one code_execution uses; every other context is a
// kernel of its own in the same sandbox.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <ctime>
#include <deque>
#include <mutex>
#include <optional>
#include <variant>

#include "api/routes.h"
#include "base/utf8.h"
#include "e2b/api/common.h"
#include "service/discovery.h"
#include "service/sandbox_credentials.h"

namespace sandboxd::e2b {

using service::kernel_died_message;
using service::KernelResult;
using service::PythonCall;
using service::PythonContext;
namespace {

namespace json = boost::json;

// A request is a code cell and a few fields: 2 MiB of it (checked before it is read,
// and its values counted before it is parsed, e2b/api/common.h).
constexpr size_t kRequestLimit = 2u << 20;
// What may wait for a client to read a cell's stream: the lines already made, beyond
// the one being written. A cell that makes more waits (the kernel reads its next frame
// once the line before is taken), so a client that stops reading holds this much and a
// line, not the cell's outputs.
constexpr size_t kStreamBuffer = 1u << 20;
constexpr size_t kMaxEnvVars = 1024;
constexpr size_t kMaxPathLength = 4096;
// Where E2B's code interpreter starts a context when the request names no directory.
constexpr std::string_view kE2bDefaultCwd = "/home/user";

// The language a request names, as E2B's server reads it (trimmed, lower case; none is
// Python); only Python is served: a kernel of another language is not in the image.
Result<void> check_language(const json::object& body) {
  auto* value = body.if_contains("language");
  if (!value || value->is_null()) return {};
  if (!value->is_string()) return ApiError::invalid_request("'language' must be a string");
  std::string language(value->as_string());
  const auto first = language.find_first_not_of(" \t\r\n");
  const auto last = language.find_last_not_of(" \t\r\n");
  language = first == std::string::npos ? std::string() : language.substr(first, last - first + 1);
  for (auto& c : language) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (language.empty() || language == "python") return {};
  return ApiError::invalid_request("Language '" + std::string(value->as_string()) +
                                   "' is not supported: this sandbox runs Python code only");
}

std::optional<std::string> optional_string(const json::object& body, const char* key, Result<void>& error) {
  auto* value = body.if_contains(key);
  if (!value || value->is_null()) return std::nullopt;
  if (!value->is_string()) {
    error = ApiError::invalid_request("'" + std::string(key) + "' must be a string");
    return std::nullopt;
  }
  return std::string(value->as_string());
}

// An absolute directory of the sandbox to start a context in; empty for E2B's default,
// /home/user, which is the workspace: the kernel starts there without changing
// directory.
Result<std::string> context_cwd(const json::object& body) {
  Result<void> error;
  auto cwd = optional_string(body, "cwd", error);
  if (!error) return error.error();
  if (!cwd || cwd->empty() || *cwd == kE2bDefaultCwd)
    return std::string();  // the workspace, as the default context
  if ((*cwd)[0] != '/' || cwd->size() > kMaxPathLength || cwd->find('\0') != std::string::npos ||
      !is_valid_utf8(*cwd))
    return ApiError::invalid_request("'cwd' must be an absolute path of at most 4096 bytes");
  return *cwd;
}

Result<std::vector<std::pair<std::string, std::string>>> env_vars(const json::object& body) {
  std::vector<std::pair<std::string, std::string>> out;
  auto* value = body.if_contains("env_vars");
  if (!value || value->is_null()) return out;
  if (!value->is_object()) return ApiError::invalid_request("'env_vars' must be an object of strings");
  if (value->as_object().size() > kMaxEnvVars)
    return ApiError::invalid_request("'env_vars' has more than " + std::to_string(kMaxEnvVars) +
                                     " variables");
  for (const auto& [name, v] : value->as_object()) {
    if (!v.is_string()) return ApiError::invalid_request("'env_vars' must be an object of strings");
    if (name.empty() || name.find('=') != std::string_view::npos || name.find('\0') != std::string_view::npos)
      return ApiError::invalid_request("'env_vars' has an invalid variable name");
    if (v.as_string().find('\0') != std::string_view::npos)
      return ApiError::invalid_request("'env_vars' values cannot contain NUL");
    out.emplace_back(std::string(name), std::string(v.as_string()));
  }
  return out;
}

// The default context runs in the workspace, which E2B's sandboxes also see as
// /home/user (the directory E2B names for it).
json::object context_json(const PythonContext& context) {
  return json::object{{"id", context.id},
                      {"language", "python"},
                      {"cwd", context.cwd.empty() ? std::string(kE2bDefaultCwd) : context.cwd}};
}

// Now as E2B's stream stamps its log lines (RFC 3339, microseconds, UTC).
std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(micros / 1'000'000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(micros % 1'000'000));
  return buffer;
}

// A result of E2B's: the Jupyter MIME bundle's well-known types under E2B's names, the
// rest in `extra`. A string's repr loses its quotes in `text`, as E2B's does.
json::object e2b_result(json::object bundle, bool main_result) {
  static const std::pair<std::string_view, std::string_view> kNames[] = {
      {"text/plain", "text"},        {"text/html", "html"},
      {"text/markdown", "markdown"}, {"image/svg+xml", "svg"},
      {"image/png", "png"},          {"image/jpeg", "jpeg"},
      {"application/pdf", "pdf"},    {"text/latex", "latex"},
      {"application/json", "json"},  {"application/javascript", "javascript"},
      {"e2b/data", "data"},          {"e2b/chart", "chart"}};
  json::object out{{"type", "result"}, {"is_main_result", main_result}};
  json::object extra;
  for (auto& [mime, value] : bundle) {
    std::string_view name;
    for (const auto& [known, e2b] : kNames)
      if (mime == known) name = e2b;
    if (name.empty()) {
      extra[mime] = std::move(value);
      continue;
    }
    if (name == "text" && value.is_string()) {
      std::string_view text = value.as_string();
      if (text.size() >= 2 && (text.front() == '\'' || text.front() == '"') && text.back() == text.front())
        text = text.substr(1, text.size() - 2);
      out["text"] = text;
      continue;
    }
    out[name] = std::move(value);
  }
  if (!extra.empty()) out["extra"] = std::move(extra);
  return out;
}

// A kernel event (python_kernel.h) as the line E2B's stream has for it.
std::optional<json::object> e2b_message(json::object event) {
  const std::string_view type = event.at("type").as_string();
  if (type == "start")
    return json::object{{"type", "number_of_executions"}, {"execution_count", event.at("execution_count")}};
  if (type == "stdout" || type == "stderr")
    return json::object{{"type", type},
                        {"text", to_valid_utf8(std::string(event.at("text").as_string()))},
                        {"timestamp", timestamp()}};
  if (type == "execute_result" || type == "display_data")
    return e2b_result(std::move(event.at("data").as_object()), type == "execute_result");
  if (type == "error") {
    std::string traceback;
    for (const auto& line : event.at("traceback").as_array()) {
      if (!traceback.empty()) traceback += '\n';
      traceback += line.as_string();
    }
    return json::object{{"type", "error"},
                        {"name", event.at("ename")},
                        {"value", event.at("evalue")},
                        {"traceback", to_valid_utf8(traceback)}};
  }
  return std::nullopt;
}

json::object error_message(std::string name, std::string value) {
  return json::object{
      {"type", "error"}, {"name", std::move(name)}, {"value", std::move(value)}, {"traceback", ""}};
}

std::string line(const json::object& message) { return json::serialize(message) + "\n"; }

// One cell's way from the kernel to the response: its events as the lines of E2B's
// stream (made at once: a line is far smaller than the event it comes from), then its
// outcome. At most kStreamBuffer of lines wait for the client (or one line, however
// large): the kernel waits for a slow client, and a client that goes away drops them.
class CellStream {
 public:
  explicit CellStream(asio::any_io_executor executor) : ready_(executor, 1), room_(executor, 1) {}

  std::shared_ptr<runtime::Cancellation> cancellation = std::make_shared<runtime::Cancellation>();
  std::shared_ptr<server::DisconnectWatch> watch;

  // The kernel's side: queues a line, waiting for room; false once the client is gone.
  asio::awaitable<bool> push(std::string line) {
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (closed_) co_return false;
        if (bytes_ == 0 || bytes_ + line.size() <= kStreamBuffer) {
          bytes_ += line.size();
          lines_.push_back(std::move(line));
          break;
        }
      }
      auto [ec] = co_await room_.async_receive(asio::as_tuple(asio::use_awaitable));
      if (ec) co_return false;
    }
    ready_.try_send(boost::system::error_code{});
    co_return true;
  }
  // The cell's end (or its refusal before it started).
  void finish(Result<KernelResult> outcome) {
    {
      std::lock_guard lock(mutex_);
      if (closed_) return;
      outcome_ = std::move(outcome);
    }
    ready_.try_send(boost::system::error_code{});
  }

  // The response's side: the next line, or the outcome once every line is taken;
  // nullopt when the stream was abandoned. A line taken counts until written().
  struct Next {
    std::optional<std::string> line;
    std::optional<Result<KernelResult>> outcome;
  };
  asio::awaitable<std::optional<Next>> next() {
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (closed_) co_return std::nullopt;
        if (!lines_.empty()) {
          Next next{std::move(lines_.front()), std::nullopt};
          lines_.pop_front();
          co_return next;
        }
        if (outcome_) co_return Next{std::nullopt, std::move(outcome_)};
      }
      auto [ec] = co_await ready_.async_receive(asio::as_tuple(asio::use_awaitable));
      if (ec) co_return std::nullopt;
    }
  }
  void written(size_t line_bytes) {
    {
      std::lock_guard lock(mutex_);
      bytes_ -= std::min(bytes_, line_bytes);
    }
    room_.try_send(boost::system::error_code{});
  }

  // Whoever stops reading (the client went away, the response ended or never began)
  // stops the cell and drops what waits.
  void abandon() {
    std::deque<std::string> dropped;
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      dropped.swap(lines_);
      bytes_ = 0;
      outcome_.reset();
    }
    cancellation->cancel();
    ready_.close();
    room_.close();
  }

 private:
  // A wake-up (one buffered: a wake-up sent while nobody waits is not lost).
  using Signal = asio::experimental::concurrent_channel<void(boost::system::error_code)>;
  std::mutex mutex_;
  std::deque<std::string> lines_;
  size_t bytes_ = 0;  // of the lines queued and the one being written
  std::optional<Result<KernelResult>> outcome_;
  bool closed_ = false;
  Signal ready_;  // a line or the outcome came
  Signal room_;   // a line was written
};

// The line(s) that end a stream after the cell's events: its outcome when the events
// did not say it already, then end_of_execution.
std::string closing_lines(const Result<KernelResult>& outcome, std::chrono::milliseconds timeout) {
  std::string out;
  if (!outcome) {
    out += line(error_message("SandboxError", outcome.error().message));
  } else if (outcome->status == KernelResult::Status::kTimedOut) {
    out += line(error_message(
        "TimeoutError", runtime::timeout_message(timeout) +
                            (outcome->restarted ? " The code did not stop when interrupted: the context was "
                                                  "restarted and its variables are lost."
                                                : "")));
  } else if (outcome->status == KernelResult::Status::kKernelDied) {
    out += line(error_message("KernelDied", kernel_died_message(*outcome)));
  }
  out += line(json::object{{"type", "end_of_execution"}});
  return out;
}

asio::awaitable<Result<Response>> execute(ApiContext& api, RequestContext& ctx) {
  auto body_text = co_await ctx.read_body(kRequestLimit);
  if (!body_text) co_return body_text.error();
  auto body = parse_e2b_object(*body_text);
  if (!body) co_return body.error();
  auto* code = body->if_contains("code");
  if (!code || !code->is_string())
    co_return ApiError::invalid_request("'code' is required and must be a string");
  Result<void> field_error;
  auto context_id = optional_string(*body, "context_id", field_error);
  if (!field_error) co_return field_error.error();
  const auto* language = body->if_contains("language");
  if (context_id && language && !language->is_null())
    co_return ApiError::invalid_request("Only one of context_id or language can be provided");
  if (auto checked = check_language(*body); !checked) co_return checked.error();
  auto cell_env = env_vars(*body);
  if (!cell_env) co_return cell_env.error();

  auto addressed = co_await open_addressed_sandbox(api, ctx, kCodeInterpreterPort);
  if (!addressed) co_return addressed.error();
  auto container = addressed->container;
  if (!api.containers.code_execution_available())
    co_return ApiError::unavailable(api.containers.unavailable_reason(),
                                    api.config()->capacity_retry_after_sec);

  const auto config = api.config();
  PythonCall call;
  call.code = std::string(code->as_string());
  call.timeout = std::chrono::seconds(config->code_execution_timeout_sec);
  call.output_limit = config->output_limit_bytes;
  call.extra_env = sandbox_env(*config, *container, 0);
  if (context_id) call.context = *context_id;
  // The sandbox's own variables (given at its creation) for every cell, the request's
  // over them for this one.
  for (const auto& [name, value] : addressed->sandbox.env_vars) call.env.emplace_back(name, value);
  for (auto& pair : *cell_env) call.env.push_back(std::move(pair));

  // Awaited on its own line: a co_await inside a call's arguments, beside temporaries
  // (the lambdas below), is where GCC's coroutines have miscompiled.
  const auto executor = co_await asio::this_coro::executor;
  auto stream = std::make_shared<CellStream>(executor);
  call.cancellation = stream->cancellation;
  call.on_event = [stream](json::object event) -> asio::awaitable<bool> {
    // The event becomes its line here and is freed before any wait.
    auto message = e2b_message(std::move(event));
    if (!message) co_return true;
    std::string text = line(*message);
    message.reset();
    co_return co_await stream->push(std::move(text));
  };
  stream->watch =
      server::DisconnectWatch::start(ctx.stream().socket(), [weak = std::weak_ptr<CellStream>(stream)] {
        if (auto gone = weak.lock()) gone->abandon();
      });
  asio::co_spawn(
      executor,
      [&api, stream, container, call = std::move(call)]() mutable -> asio::awaitable<Result<KernelResult>> {
        auto outcome = co_await api.containers.execution().run_python(container, std::move(call));
        after_execution(api, container);
        co_return outcome;
      },
      [stream](std::exception_ptr failure, Result<KernelResult> outcome) {
        stream->finish(failure ? Result<KernelResult>(ApiError::internal()) : std::move(outcome));
      });

  struct Abandon {
    std::shared_ptr<CellStream> stream;
    ~Abandon() {
      if (!stream) return;
      stream->abandon();
      if (stream->watch) stream->watch->stop();
    }
  };
  auto guard = std::shared_ptr<Abandon>(new Abandon{stream});  // (no temporary to destroy)
  // Nothing is sent until the cell has started (its slot taken, its kernel up): a
  // refusal before that (no slot, no such context) is an HTTP error, as E2B's is.
  auto first = co_await stream->next();
  if (!first) co_return ApiError::internal();
  if (first->outcome && !*first->outcome) co_return first->outcome->error();
  const auto timeout = std::chrono::seconds(config->code_execution_timeout_sec);
  server::StreamResponse response;
  response.header.result(http::status::ok);
  response.header.version(11);
  response.header.set(http::field::content_type, "application/x-ndjson");
  response.header.set(http::field::cache_control, "no-cache");
  response.produce = [stream, item = std::move(*first), timeout,
                      guard](server::ChunkWriter& writer) mutable -> asio::awaitable<void> {
    for (;;) {
      if (item.outcome) {
        co_await writer.write(closing_lines(*item.outcome, timeout));
        co_return;
      }
      const size_t size = item.line->size();
      if (!co_await writer.write(*item.line)) co_return;  // the client left: the guard stops the cell
      item.line.reset();
      stream->written(size);
      auto next = co_await stream->next();
      if (!next) co_return;
      item = std::move(*next);
    }
  };
  co_return Response{std::move(response)};
}

asio::awaitable<Result<Response>> create_context(ApiContext& api, RequestContext& ctx) {
  auto body_text = co_await ctx.read_body(64 * 1024);
  if (!body_text) co_return body_text.error();
  json::object body;
  if (!body_text->empty()) {
    auto parsed = parse_e2b_object(*body_text);
    if (!parsed) co_return parsed.error();
    body = std::move(*parsed);
  }
  if (auto checked = check_language(body); !checked) co_return checked.error();
  auto cwd = context_cwd(body);
  if (!cwd) co_return cwd.error();
  auto addressed = co_await open_addressed_sandbox(api, ctx, kCodeInterpreterPort);
  if (!addressed) co_return addressed.error();
  auto context = api.containers.execution().create_python_context(*addressed->container, std::move(*cwd));
  if (!context) co_return context.error();
  co_return Response{json_ok(context_json(*context))};
}

asio::awaitable<Result<Response>> list_contexts(ApiContext& api, RequestContext& ctx) {
  auto addressed = co_await open_addressed_sandbox(api, ctx, kCodeInterpreterPort);
  if (!addressed) co_return addressed.error();
  json::array out;
  for (const auto& context : api.containers.execution().python_contexts(*addressed->container))
    out.push_back(context_json(context));
  co_return Response{json_ok(out)};
}

asio::awaitable<Result<Response>> restart_context(ApiContext& api, RequestContext& ctx) {
  auto addressed = co_await open_addressed_sandbox(api, ctx, kCodeInterpreterPort);
  if (!addressed) co_return addressed.error();
  if (auto done =
          api.containers.execution().restart_python_context(*addressed->container, ctx.params.at("id"));
      !done)
    co_return done.error();
  co_return Response{json_ok(nullptr)};
}

asio::awaitable<Result<Response>> remove_context(ApiContext& api, RequestContext& ctx) {
  auto addressed = co_await open_addressed_sandbox(api, ctx, kCodeInterpreterPort);
  if (!addressed) co_return addressed.error();
  if (auto done =
          api.containers.execution().remove_python_context(*addressed->container, ctx.params.at("id"));
      !done)
    co_return done.error();
  co_return Response{json_ok(nullptr)};
}

}  // namespace

void install_interpreter_routes(server::HttpServer& http, ApiContext& api) {
  const server::RouteOptions sandbox = in_addressed_sandbox();
  http.route(http::verb::post, "/e2b/sandbox/execute", "e2b.execute", e2b_route(api, execute), sandbox);
  http.route(http::verb::post, "/e2b/sandbox/contexts", "e2b.contexts.create", e2b_route(api, create_context),
             sandbox);
  http.route(http::verb::get, "/e2b/sandbox/contexts", "e2b.contexts.list", e2b_route(api, list_contexts),
             sandbox);
  http.route(http::verb::post, "/e2b/sandbox/contexts/{id}/restart", "e2b.contexts.restart",
             e2b_route(api, restart_context), sandbox);
  http.route(http::verb::delete_, "/e2b/sandbox/contexts/{id}", "e2b.contexts.remove",
             e2b_route(api, remove_context), sandbox);
}

}  // namespace sandboxd::e2b
