#include "api/tool_calls.h"

#include "api/container_durability.h"
#include "api/discovery.h"
#include "api/sandbox_network.h"
#include "ops/logging.h"
#include "tools/bash_tool.h"
#include "tools/text_editor.h"

namespace sandboxd::api {

asio::awaitable<Result<boost::json::object>> run_sub_tool(
    ApiContext& api, std::shared_ptr<Container> container, std::string_view tool,
    const boost::json::object& input, std::shared_ptr<runtime::Cancellation> cancellation, int depth,
    std::function<void(runtime::OutputStreamId, std::string_view)> on_output) {
  api.containers.touch(*container);
  const auto config = api.config();
  if (!api.containers.code_execution_available())
    co_return tools::tool_error(tool == "text_editor_code_execution" ? tools::kEditorErrorType : tools::kBashErrorType,
                                "unavailable", api.containers.unavailable_reason(), true);
  if (tool == "text_editor_code_execution") {
    if (auto* durability = api.containers.durability()) {  // the bucket's copy first, when needed
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
  auto result = co_await api.containers.exec(container, std::move(request), bash.restart);
  // Files the command wrote get their created_at now, not when someone lists them.
  after_execution(api, container);
  if (!result) {
    const auto status = result.error().status;
    if (status == HttpStatus::too_many_requests ||
        (status == HttpStatus::service_unavailable && result.error().type == "overloaded_error"))
      co_return result.error();
    co_return tools::tool_error(tools::kBashErrorType, "unavailable", result.error().message, true);
  }
  co_return tools::bash_result(*result);
}

}  // namespace sandboxd::api
