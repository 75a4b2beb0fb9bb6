#include "api/tool_loop_support.h"

#include "service/tool_calls.h"
#include "base/utf8.h"
#include "model/sse.h"
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
  co_return tools::tool_error(tool == model::kEditorTool ? tools::kEditorErrorType : tools::kBashErrorType,
                              "too_many_requests", content.error().message, true);
}

json::value ContainerRunner::container() {
  if (!container_) return nullptr;
  api_.containers.touch(*container_);
  json::object out{{"id", container_->id},
                   {"expires_at", ContainerService::format_time(api_.containers.expires_at(*container_))}};
  // Anthropic's Container always has `skills`: null when the request loaded none.
  out["skills"] = nullptr;
  if (!skills_.empty()) {
    json::array skills;
    for (const auto& skill : skills_)
      skills.push_back(json::object{{"type", skill.type}, {"skill_id", skill.skill_id}, {"version", skill.version}});
    out["skills"] = std::move(skills);
  }
  return out;
}

asio::awaitable<bool> SseSink::send(std::string_view event, const json::object& data) {
  // Valid UTF-8 whatever went into the event (as json_response does for whole bodies).
  co_return co_await writer_.write(model::format_sse(event, to_valid_utf8(json::serialize(data))));
}

}  // namespace sandboxd::api
