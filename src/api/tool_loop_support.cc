#include "api/tool_loop_support.h"

#include "base/utf8.h"
#include "model/sse.h"
#include "service/tool_calls.h"
#include "tools/bash_tool.h"

namespace sandboxd::api {

namespace json = boost::json;

model::LoopSettings loop_settings(const ops::Config& config) {
  model::LoopSettings settings;
  std::string base = config.model_base_url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  settings.messages_url = base + "/v1/messages";
  settings.headers = {"Content-Type: application/json", "anthropic-version: 2023-06-01"};
  if (!config.model_api_key.empty()) settings.headers.push_back("x-api-key: " + config.model_api_key);
  settings.timeout = std::chrono::seconds(config.model_timeout_sec);
  settings.max_tool_iterations = config.max_tool_iterations;
  settings.ping_interval = std::chrono::seconds(config.model_ping_interval_sec);
  return settings;
}

ContainerRunner::ContainerRunner(ApiContext& api, std::shared_ptr<Container> container,
                                 std::shared_ptr<runtime::Cancellation> cancellation, int depth)
    : api_(api), container_(std::move(container)), cancellation_(std::move(cancellation)), depth_(depth) {}

asio::awaitable<json::object> ContainerRunner::run(std::string_view tool, const json::object& input) {
  co_return co_await run_observed(tool, input, nullptr);
}

asio::awaitable<json::object> ContainerRunner::run_observed(std::string_view tool, const json::object& input,
                                                            model::OutputListener listener) {
  std::function<void(runtime::OutputStreamId, std::string_view)> on_output;
  if (listener)
    on_output = [listener = std::move(listener)](runtime::OutputStreamId stream, std::string_view bytes) {
      listener(stream == runtime::OutputStreamId::kStderr ? "stderr" : "stdout", bytes);
    };
  auto content =
      co_await run_sub_tool(api_, container_, tool, input, cancellation_, depth_, std::move(on_output));
  if (content) co_return std::move(*content);
  // Refused by capacity: the turn goes on, and the model learns why.
  const std::string_view error_type = tool == model::kEditorTool   ? tools::kEditorErrorType
                                      : tool == model::kPythonTool ? service::kCodeExecutionErrorType
                                                                   : tools::kBashErrorType;
  co_return tools::tool_error(error_type, "too_many_requests", content.error().message, true);
}

namespace {
model::CodeStep code_step(service::PythonStep step) {
  model::CodeStep out;
  out.result = std::move(step.result);
  for (auto& call : step.pending)
    out.pending.push_back({std::move(call.tool_use_id), std::move(call.name), std::move(call.input)});
  return out;
}
}  // namespace

asio::awaitable<model::CodeStep> ContainerRunner::run_code(const json::object& input,
                                                           const std::string& server_tool_id,
                                                           std::vector<std::string> tools) {
  auto step = co_await run_python_step(api_, container_, input, server_tool_id, std::move(tools), depth_);
  if (step) co_return code_step(std::move(*step));
  // Refused by capacity: the turn goes on, and the model learns why.
  co_return model::CodeStep{
      tools::tool_error(service::kCodeExecutionErrorType, "too_many_requests", step.error().message, true),
      {}};
}

asio::awaitable<Result<model::CodeStep>> ContainerRunner::resume_code(
    const std::string& server_tool_id, std::vector<model::CodeAnswer> answers) {
  std::vector<service::CodeToolAnswer> code_answers;
  for (auto& answer : answers)
    code_answers.push_back({std::move(answer.tool_use_id), std::move(answer.content), answer.is_error});
  auto step = co_await resume_python_step(api_, container_, server_tool_id, std::move(code_answers));
  if (!step) co_return step.error();
  co_return code_step(std::move(*step));
}

json::value ContainerRunner::container() {
  if (!container_) return nullptr;
  api_.containers.lifecycle().touch(*container_);
  json::object out{
      {"id", container_->id},
      {"expires_at", ContainerService::format_time(api_.containers.lifecycle().expires_at(*container_))}};
  // Anthropic's Container always has `skills`: null when the request loaded none.
  out["skills"] = nullptr;
  if (!skills_.empty()) {
    json::array skills;
    for (const auto& skill : skills_)
      skills.push_back(
          json::object{{"type", skill.type}, {"skill_id", skill.skill_id}, {"version", skill.version}});
    out["skills"] = std::move(skills);
  }
  return out;
}

asio::awaitable<bool> SseSink::send(std::string_view event, const json::object& data) {
  // Valid UTF-8 whatever went into the event (as json_response does for whole bodies).
  co_return co_await writer_.write(model::format_sse(event, to_valid_utf8(json::serialize(data))));
}

}  // namespace sandboxd::api
