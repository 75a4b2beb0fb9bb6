#include "service/tool_calls.h"

#include "service/discovery.h"
#include "service/python_kernel.h"
#include "service/sandbox_credentials.h"
#include "base/utf8.h"
#include "ops/logging.h"
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
                                  bool rich_outputs) {
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
  std::string stderr_text = result.stderr_text;
  int return_code = 0;
  switch (result.status) {
    case KernelResult::Status::kOk:
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
      return_code = result.exit_code > 0 ? result.exit_code : 1;
      if (!stderr_text.empty() && stderr_text.back() != '\n') stderr_text += '\n';
      stderr_text +=
          "The Python kernel exited" +
          (result.exit_code >= 0 ? " with code " + std::to_string(result.exit_code) : std::string()) +
          "; its variables are lost and the next call starts a fresh kernel.";
      break;
  }
  boost::json::object block{{"type", "code_execution_result"},
                            {"stdout", to_valid_utf8(stdout_text)},
                            {"stderr", to_valid_utf8(stderr_text)},
                            {"return_code", return_code},
                            {"content", boost::json::array()}};
  if (rich_outputs) block["outputs"] = result.outputs;
  return block;
}

}  // namespace

asio::awaitable<Result<boost::json::object>> run_python_tool(Services& services,
                                                             std::shared_ptr<Container> container,
                                                             const boost::json::object& input,
                                                             bool rich_outputs, int depth) {
  services.containers.touch(*container);
  const auto config = services.config();
  if (!services.containers.code_execution_available())
    co_return tools::tool_error(kCodeExecutionErrorType, "unavailable", services.containers.unavailable_reason(),
                                true);
  auto parsed = parse_python_input(input);
  if (!parsed)
    co_return tools::tool_error(kCodeExecutionErrorType, "invalid_tool_input", parsed.error().message, true);
  PythonCall call;
  call.code = std::move(parsed->code);
  call.timeout = std::chrono::seconds(parsed->timeout_sec.value_or(config->code_execution_timeout_sec));
  call.output_limit = config->output_limit_bytes;
  call.restart = parsed->restart;
  call.extra_env = sandbox_env(*config, *container, depth);
  const auto timeout = call.timeout;
  auto result = co_await services.containers.run_python(container, std::move(call));
  after_execution(services, container);
  if (!result) {
    const auto status = result.error().status;
    if (status == HttpStatus::too_many_requests ||
        (status == HttpStatus::service_unavailable && result.error().type == "overloaded_error"))
      co_return result.error();
    co_return tools::tool_error(kCodeExecutionErrorType, "unavailable", result.error().message, true);
  }
  co_return python_result(*result, timeout, rich_outputs);
}

asio::awaitable<Result<boost::json::object>> run_sub_tool(
    Services& services, std::shared_ptr<Container> container, std::string_view tool, const boost::json::object& input,
    std::shared_ptr<runtime::Cancellation> cancellation, int depth,
    std::function<void(runtime::OutputStreamId, std::string_view)> on_output) {
  if (tool == "code_execution") co_return co_await run_python_tool(services, container, input, false, depth);
  services.containers.touch(*container);
  const auto config = services.config();
  if (!services.containers.code_execution_available())
    co_return tools::tool_error(tool == "text_editor_code_execution" ? tools::kEditorErrorType : tools::kBashErrorType,
                                "unavailable", services.containers.unavailable_reason(), true);
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
      audit->record("editor", {{"owner", container->owner}, {"container", container->id}, {"command", text("command")},
                               {"path", text("path")}, {"result", std::string_view(content.at("type").as_string())}});
    }
    co_return content;
  }
  auto parsed = tools::parse_bash_input(input);
  if (!parsed) co_return tools::tool_error(tools::kBashErrorType, "invalid_tool_input", parsed.error().message, true);
  auto& bash = *parsed;
  runtime::ExecRequest request;
  request.command = bash.command;
  request.timeout = std::chrono::seconds(bash.timeout_sec.value_or(config->code_execution_timeout_sec));
  request.output_limit = config->output_limit_bytes;
  request.cancellation = std::move(cancellation);
  request.on_output = std::move(on_output);
  request.extra_env = sandbox_env(*config, *container, depth);
  auto result = co_await services.containers.exec(container, std::move(request), bash.restart);
  if (!result) {
    // Files the command may have written get their created_at now, not when someone
    // lists them.
    after_execution(services, container);
    const auto status = result.error().status;
    if (status == HttpStatus::too_many_requests ||
        (status == HttpStatus::service_unavailable && result.error().type == "overloaded_error"))
      co_return result.error();
    co_return tools::tool_error(tools::kBashErrorType, "unavailable", result.error().message, true);
  }
  // The result lists the outputs the command made (Anthropic's `content`); the sync
  // that finds them also gives them their created_at.
  std::vector<std::string> file_ids;
  if (result->started_realtime_ns > 0) {  // not a restart without a command
    auto changed = co_await sync_after_command(services, container, result->started_realtime_ns);
    for (const auto& path : changed.paths) file_ids.push_back(store::file_id_for_path(path));
  }
  co_return tools::bash_result(*result, file_ids);
}

}  // namespace sandboxd::service
