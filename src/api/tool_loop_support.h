// What the two surfaces that run the tool loop (/messages and the Workspace thread chat)
// share: the loop's settings from the configuration, the runner that executes the
// loop's sub-tool calls in a container, and the sink that writes the loop's events as
// server-sent events.
#pragma once

#include <boost/json.hpp>
#include <memory>
#include <string_view>
#include <vector>

#include "api/routes.h"
#include "model/tool_loop.h"
#include "service/skill_mounts.h"

namespace sandboxd::api {

// The upstream URL, headers, timeouts and iteration cap of one request's loop.
model::LoopSettings loop_settings(const ops::Config& config);

// Runs the loop's sub-tool calls in one container (none: the request has no code tool).
class ContainerRunner : public model::ToolRunner {
 public:
  // `depth`: the request's nesting depth (0 for a client's own request).
  ContainerRunner(ApiContext& api, std::shared_ptr<Container> container,
                  std::shared_ptr<runtime::Cancellation> cancellation, int depth);

  // A call refused for capacity does not end the turn: the model gets an error block.
  asio::awaitable<boost::json::object> run(std::string_view tool, const boost::json::object& input) override;
  // The same, with a command's output told to `listener` while it runs.
  asio::awaitable<boost::json::object> run_observed(std::string_view tool, const boost::json::object& input,
                                                    model::OutputListener listener) override;
  // The persistent Python with client tools callable from its code (it may pause).
  asio::awaitable<model::CodeStep> run_code(const boost::json::object& input,
                                            const std::string& server_tool_id,
                                            std::vector<std::string> tools) override;
  asio::awaitable<Result<model::CodeStep>> resume_code(const std::string& server_tool_id,
                                                       std::vector<model::CodeAnswer> answers) override;
  // {id, expires_at, skills (null without)}; touching the container keeps it alive.
  boost::json::value container() override;
  // The request's skills, as the response's container shows them (resolved versions).
  void set_skills(std::vector<service::LoadedSkill> skills) { skills_ = std::move(skills); }

 private:
  ApiContext& api_;
  std::shared_ptr<Container> container_;
  std::shared_ptr<runtime::Cancellation> cancellation_;
  int depth_;
  std::vector<service::LoadedSkill> skills_;
};

// Writes each event as an SSE frame, its JSON valid UTF-8 whatever went into it.
class SseSink : public model::EventSink {
 public:
  explicit SseSink(server::ChunkWriter& writer) : writer_(writer) {}
  asio::awaitable<bool> send(std::string_view event, const boost::json::object& data) override;

 private:
  server::ChunkWriter& writer_;
};

}  // namespace sandboxd::api
