#include "service/tool_calls.h"

#include <time.h>

#include <set>

#include "base/ids.h"
#include "base/utf8.h"
#include "ops/logging.h"
#include "service/discovery.h"
#include "service/python_kernel.h"
#include "service/sandbox_credentials.h"
#include "store/keys.h"
#include "tools/bash_tool.h"
#include "tools/text_editor.h"

namespace sandboxd::service {
namespace {

struct PythonInput {
  std::string code;
  std::optional<int> timeout_sec;
  bool restart = false;
};

Result<PythonInput> parse_python_input(const boost::json::object& input) {
  PythonInput out;
  for (const auto& [key, value] : input) {
    if (key == "code") {
      if (!value.is_string()) return ApiError::invalid_request("'code' must be a string");
      out.code = std::string(value.as_string());
    } else if (key == "timeout") {
      if (value.is_int64() && value.as_int64() > 0 && value.as_int64() <= 86400)
        out.timeout_sec = static_cast<int>(value.as_int64());
      else if (value.is_uint64() && value.as_uint64() > 0 && value.as_uint64() <= 86400)
        out.timeout_sec = static_cast<int>(value.as_uint64());
      else
        return ApiError::invalid_request(
            "'timeout' must be an integer number of seconds between 1 and 86400");
    } else if (key == "restart") {
      if (!value.is_bool()) return ApiError::invalid_request("'restart' must be a boolean");
      out.restart = value.as_bool();
    } else {
      return ApiError::invalid_request("unknown parameter '" + std::string(key) + "'");
    }
  }
  if (!input.contains("code") && !out.restart) return ApiError::invalid_request("'code' is required");
  return out;
}

boost::json::object python_result(const KernelResult& result, std::chrono::milliseconds timeout,
                                  size_t output_limit, bool rich_outputs,
                                  const std::vector<std::string>& file_ids) {
  std::string stdout_text = result.stdout_text;
  for (const auto& output : result.outputs) {
    const auto& o = output.as_object();
    auto* data = o.if_contains("data");
    if (!data || !data->is_object()) continue;
    auto* plain = data->as_object().if_contains("text/plain");
    if (!plain || !plain->is_string()) continue;
    stdout_text += plain->as_string();
    stdout_text += '\n';
  }
  // The values' text counts against the cap as what the cell printed does.
  stdout_text = capped_output(stdout_text, output_limit);
  std::string stderr_text = result.stderr_text;
  int return_code = 0;
  switch (result.status) {
    case KernelResult::Status::kOk:
    case KernelResult::Status::kPaused:  // not a result (settle records the pause)
      break;
    case KernelResult::Status::kError:
      return_code = 1;
      break;
    case KernelResult::Status::kTimedOut:
      return_code = 124;
      if (!stderr_text.empty() && stderr_text.back() != '\n') stderr_text += '\n';
      stderr_text += runtime::timeout_message(timeout);
      if (result.restarted)
        stderr_text +=
            " The code did not stop when interrupted: the Python kernel was restarted and its variables are "
            "lost.";
      break;
    case KernelResult::Status::kKernelDied:
      return_code = result.exit_code > 0 && result.channel_broken.empty() ? result.exit_code : 1;
      if (!stderr_text.empty() && stderr_text.back() != '\n') stderr_text += '\n';
      stderr_text += kernel_died_message(result);
      break;
  }
  boost::json::object block{{"type", "code_execution_result"},
                            {"stdout", to_valid_utf8(stdout_text)},
                            {"stderr", to_valid_utf8(stderr_text)},
                            {"return_code", return_code},
                            {"content", boost::json::array()}};
  auto& files = block["content"].as_array();
  for (const auto& id : file_ids)
    files.push_back(boost::json::object{{"type", "code_execution_output"}, {"file_id", id}});
  if (rich_outputs) block["outputs"] = result.outputs;
  return block;
}

}  // namespace

namespace {

int64_t realtime_now_ns() {
  timespec realtime{};
  clock_gettime(CLOCK_REALTIME_COARSE, &realtime);  // as a command's start (sandbox.cc)
  return static_cast<int64_t>(realtime.tv_sec) * 1'000'000'000 + realtime.tv_nsec;
}

bool refused_for_capacity(const ApiError& error) {
  return error.kind == ErrorKind::rate_limited || error.kind == ErrorKind::overloaded;
}

// What a kernel call's outcome becomes: the result block of code that ended (with the
// files it saved under outputs/), or the record of its pause and the client's calls.
asio::awaitable<Result<PythonStep>> settle(Services& services, std::shared_ptr<Container> container,
                                           Result<KernelResult> result, std::chrono::milliseconds timeout,
                                           int64_t started_ns, bool rich_outputs,
                                           const std::string& server_tool_id,
                                           std::optional<store::TreeChanges::Mark> before) {
  PythonStep step;
  if (!result) {
    after_execution(services, container);
    if (refused_for_capacity(result.error())) co_return result.error();
    step.result = tools::tool_error(kCodeExecutionErrorType, "unavailable", result.error().message, true);
    co_return step;
  }
  if (result->status == KernelResult::Status::kPaused) {
    ContainerPython::PausedCode paused;
    paused.server_tool_id = server_tool_id;
    paused.cell = result->cell;
    paused.timeout = timeout;
    paused.started_ns = started_ns;
    paused.expires =
        std::chrono::steady_clock::now() + std::chrono::seconds(services.config()->tool_result_timeout_sec);
    for (auto& call : result->tool_calls) {
      std::string id = "toolu_" + random_alnum(24);
      paused.calls[id] = call.call;
      step.pending.push_back({id, std::move(call.name), std::move(call.input)});
    }
    container->python.pause(std::move(paused));
    co_return step;
  }
  // The files the cell saved under outputs/ (Anthropic's code_execution_output blocks),
  // found by the index sync every execution is followed by anyway, as for bash.
  std::vector<std::string> file_ids;
  auto changed = co_await sync_after_command(services, container, started_ns, before);
  for (const auto& path : changed.paths) file_ids.push_back(store::file_id_for_path(path));
  step.result =
      python_result(*result, timeout, services.config()->output_limit_bytes, rich_outputs, file_ids);
  co_return step;
}

asio::awaitable<Result<PythonStep>> run_python(Services& services, std::shared_ptr<Container> container,
                                               const boost::json::object& input, bool rich_outputs, int depth,
                                               std::string server_tool_id, std::vector<std::string> tools) {
  services.containers.lifecycle().touch(*container);
  const auto config = services.config();
  PythonStep step;
  if (!services.containers.code_execution_available()) {
    step.result = tools::tool_error(kCodeExecutionErrorType, "unavailable",
                                    services.containers.unavailable_reason(), true);
    co_return step;
  }
  auto parsed = parse_python_input(input);
  if (!parsed) {
    step.result =
        tools::tool_error(kCodeExecutionErrorType, "invalid_tool_input", parsed.error().message, true);
    co_return step;
  }
  PythonCall call;
  call.code = std::move(parsed->code);
  call.timeout = std::chrono::seconds(parsed->timeout_sec.value_or(config->code_execution_timeout_sec));
  call.output_limit = config->output_limit_bytes;
  call.restart = parsed->restart;
  call.extra_env = sandbox_env(*config, *container, depth);
  call.tools.names = std::move(tools);
  call.tools.answer_limit = std::chrono::seconds(config->tool_result_timeout_sec);
  const auto timeout = call.timeout;
  const int64_t started_ns = realtime_now_ns();
  const auto before = output_mark(services, *container);
  auto result = co_await services.containers.execution().run_python(container, std::move(call));
  co_return co_await settle(services, container, std::move(result), timeout, started_ns, rich_outputs,
                            server_tool_id, before);
}

}  // namespace

asio::awaitable<Result<boost::json::object>> run_python_tool(Services& services,
                                                             std::shared_ptr<Container> container,
                                                             const boost::json::object& input,
                                                             bool rich_outputs, int depth) {
  auto step = co_await run_python(services, container, input, rich_outputs, depth, "", {});
  if (!step) co_return step.error();
  co_return std::move(step->result);
}

asio::awaitable<Result<PythonStep>> run_python_step(Services& services, std::shared_ptr<Container> container,
                                                    const boost::json::object& input,
                                                    std::string server_tool_id,
                                                    std::vector<std::string> tools, int depth) {
  co_return co_await run_python(services, container, input, false, depth, std::move(server_tool_id),
                                std::move(tools));
}

asio::awaitable<Result<PythonStep>> resume_python_step(Services& services,
                                                       std::shared_ptr<Container> container,
                                                       const std::string& server_tool_id,
                                                       std::vector<CodeToolAnswer> answers) {
  const auto gone = [&] {
    return ApiError::invalid_request("The code execution '" + server_tool_id +
                                     "' is not waiting for tool results: it ended, its sandbox stopped, or "
                                     "its pause expired (tool results "
                                     "must come within " +
                                     std::to_string(services.config()->tool_result_timeout_sec) +
                                     "s; the calls then failed in the code with TimeoutError)");
  };
  std::vector<KernelToolAnswer> kernel_answers;
  std::optional<ApiError> refused;  // the answers do not match the calls it waits on
  auto answers_match = [&](const ContainerPython::PausedCode& waiting) {
    const auto& calls = waiting.calls;
    std::set<std::string> answered;
    for (auto& answer : answers) {
      auto it = calls.find(answer.tool_use_id);
      if (it == calls.end()) {
        refused = ApiError::invalid_request("tool_result '" + answer.tool_use_id +
                                            "' answers no tool call that the code execution '" +
                                            server_tool_id + "' waits on");
        return false;
      }
      if (!answered.insert(answer.tool_use_id).second) {
        refused = ApiError::invalid_request("tool_use ids were found with more than one tool_result: " +
                                            answer.tool_use_id);
        return false;
      }
      kernel_answers.push_back({it->second, std::move(answer.content), answer.is_error});
    }
    for (const auto& [id, call] : calls)
      if (!answered.count(id)) {
        refused = ApiError::invalid_request(
            "tool_use ids were found without tool_result blocks immediately after: " + id +
            ". Each tool_use block must have a corresponding tool_result block in the next message.");
        return false;
      }
    return true;
  };
  auto taken = container->python.take_paused(server_tool_id, answers_match);
  if (!taken) co_return refused ? *refused : gone();
  ContainerPython::PausedCode paused = std::move(*taken);
  auto kernel = paused.kernel.lock();
  if (!kernel) co_return gone();
  auto resumed = co_await services.containers.execution().resume_python(container, kernel, paused.cell,
                                                                        std::move(kernel_answers));
  if (!resumed) {
    // Refused before it ran on (capacity): it is still paused, and the client may retry.
    container->python.put_back_paused(std::move(paused));
    co_return resumed.error();
  }
  if (!*resumed) co_return gone();
  // (Its first part's mark is not kept across the pause: the resumed cell walks.)
  co_return co_await settle(services, container, std::move(**resumed), paused.timeout, paused.started_ns,
                            false, server_tool_id, std::nullopt);
}

asio::awaitable<Result<boost::json::object>> run_sub_tool(
    Services& services, std::shared_ptr<Container> container, std::string_view tool,
    const boost::json::object& input, std::shared_ptr<runtime::Cancellation> cancellation, int depth,
    std::function<void(runtime::OutputStreamId, std::string_view)> on_output, ToolNoticeSink on_notice) {
  if (tool == "code_execution") co_return co_await run_python_tool(services, container, input, false, depth);
  services.containers.lifecycle().touch(*container);
  const auto config = services.config();
  if (!services.containers.code_execution_available())
    co_return tools::tool_error(
        tool == "text_editor_code_execution" ? tools::kEditorErrorType : tools::kBashErrorType, "unavailable",
        services.containers.unavailable_reason(), true);
  if (tool == "text_editor_code_execution") {
    if (auto* durability = services.containers.durability()) {  // the bucket's copy first, when needed
      if (auto ready = co_await durability->ensure_local(container); !ready)
        co_return tools::tool_error(tools::kEditorErrorType, "unavailable", ready.error().message, true);
      durability->note_change(*container);  // an edit is flushed like a command's writes
    }
    tools::EditorOptions options;
    options.uid = config->sandbox_host_uid;
    options.gid = config->sandbox_host_uid;
    auto content = tools::run_text_editor(container->paths, input, options);
    if (auto* audit = ops::audit()) {
      auto text = [&](const char* key) {
        auto* v = input.if_contains(key);
        return v && v->is_string() ? std::string_view(v->as_string()) : std::string_view();
      };
      audit->record("editor", {{"owner", container->owner},
                               {"container", container->id},
                               {"command", text("command")},
                               {"path", text("path")},
                               {"result", std::string_view(content.at("type").as_string())}});
    }
    co_return content;
  }
  auto parsed = tools::parse_bash_input(input);
  if (!parsed)
    co_return tools::tool_error(tools::kBashErrorType, "invalid_tool_input", parsed.error().message, true);
  auto& bash = *parsed;
  runtime::ExecRequest request;
  request.command = bash.command;
  request.timeout = std::chrono::seconds(bash.timeout_sec.value_or(config->code_execution_timeout_sec));
  request.output_limit = config->output_limit_bytes;
  request.cancellation = std::move(cancellation);
  request.on_output = std::move(on_output);
  request.extra_env = sandbox_env(*config, *container, depth);
  // Before the command starts: whether its walk can be skipped is judged against this.
  const auto before = output_mark(services, *container);
  // Whether this call is what starts the sandbox (a concurrent call may start it too:
  // a notice, not an account).
  const bool was_running = container->running();
  const auto timeout = request.timeout;
  auto result = co_await services.containers.execution().exec(container, std::move(request), bash.restart);
  if (result && on_notice) {
    if (bash.restart)
      on_notice({ToolNotice::Level::kInfo,
                 "The sandbox of container " + container->id + " was restarted and its workspace emptied"});
    else if (!was_running && result->started_realtime_ns > 0)
      on_notice({ToolNotice::Level::kInfo, "A sandbox was started for container " + container->id});
    if (result->timed_out)
      on_notice({ToolNotice::Level::kWarning,
                 "The command in container " + container->id + " was killed after its timeout of " +
                     std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) +
                     " s"});
    if (result->stdout_truncated || result->stderr_truncated)
      on_notice({ToolNotice::Level::kNotice, "The command's output in container " + container->id +
                                                 " passed the cap of " +
                                                 std::to_string(config->output_limit_bytes) +
                                                 " bytes (codeInterpreter.outputLimit) and was truncated"});
  }
  if (!result) {
    // Files the command may have written get their created_at now, not when someone
    // lists them.
    after_execution(services, container);
    if (refused_for_capacity(result.error())) co_return result.error();
    co_return tools::tool_error(tools::kBashErrorType, "unavailable", result.error().message, true);
  }
  // The result lists the outputs the command made (Anthropic's `content`); the sync
  // that finds them also gives them their created_at.
  std::vector<std::string> file_ids;
  if (result->started_realtime_ns > 0) {  // not a restart without a command
    auto changed = co_await sync_after_command(services, container, result->started_realtime_ns, before);
    for (const auto& path : changed.paths) file_ids.push_back(store::file_id_for_path(path));
  }
  co_return tools::bash_result(*result, file_ids);
}

}  // namespace sandboxd::service
