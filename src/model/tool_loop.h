// The server-side tool loop of /messages: ask the upstream model, run every sub-tool
// call it makes in the container, feed the results back, and repeat until the model
// ends its turn (or calls a client tool, or the iteration cap pauses the turn). The
// same loop serves JSON answers and SSE streams; the HTTP side supplies a ToolRunner
// (the container) and, when streaming, an EventSink (the socket).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "base/error.h"
#include "model/messages_request.h"
#include "model/upstream_client.h"
#include "runtime/cancellation.h"

namespace sandboxd::model {

struct LoopSettings {
  std::string messages_url;          // the upstream's .../v1/messages
  std::vector<std::string> headers;  // auth and version headers for the upstream
  std::chrono::milliseconds timeout{600'000};
  int max_tool_iterations = 20;
  std::chrono::milliseconds ping_interval{5'000};
  // Streams a running command's output as `execution_output` events (the Workspace
  // page shows it while the command runs). Off for /messages: that stream is the
  // Anthropic protocol, which has no such event.
  bool stream_execution_output = false;
};

// Sees a running command's output as it comes: `stream` is "stdout" or "stderr",
// `bytes` a chunk. Called on any thread; it must copy and never block.
using OutputListener = std::function<void(std::string_view stream, std::string_view bytes)>;

// Programmatic tool calling: a client tool that code called, for the client to answer.
struct CodeCall {
  std::string tool_use_id;
  std::string name;
  boost::json::object input;
};
// Where code is after a run or a resume: its result block's `content` once it ended,
// or the calls it waits on.
struct CodeStep {
  boost::json::object result;
  std::vector<CodeCall> pending;
};

class ToolRunner {
 public:
  virtual ~ToolRunner() = default;
  // Runs one sub-tool call; returns the result block's `content` (errors included, with
  // their `detail`).
  virtual boost::asio::awaitable<boost::json::object> run(std::string_view tool,
                                                          const boost::json::object& input) = 0;
  // The same, telling `listener` the command's output while it runs (where the runner
  // can; by default it cannot and runs the call plainly).
  virtual boost::asio::awaitable<boost::json::object> run_observed(std::string_view tool,
                                                                   const boost::json::object& input,
                                                                   OutputListener listener) {
    (void)listener;
    co_return co_await run(tool, input);
  }
  // The persistent Python with client tools `tools` callable from the code; it may
  // pause on their calls, named by `server_tool_id`. By default: without tools.
  virtual boost::asio::awaitable<CodeStep> run_code(const boost::json::object& input,
                                                    const std::string& server_tool_id,
                                                    std::vector<std::string> tools) {
    (void)server_tool_id;
    (void)tools;
    CodeStep step;
    step.result = co_await run(kPythonTool, input);
    co_return step;
  }
  // The client's answers to paused code: it runs on. An error when nothing is paused
  // under that id (by default nothing can pause).
  virtual boost::asio::awaitable<Result<CodeStep>> resume_code(const std::string& server_tool_id,
                                                               std::vector<CodeAnswer> answers) {
    (void)answers;
    co_return ApiError::invalid_request("The code execution '" + server_tool_id +
                                        "' is not waiting for tool results");
  }
  // {"id":..,"expires_at":..} of the container, as of now (null without one).
  virtual boost::json::value container() = 0;
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  // Sends one SSE event; false when the client is gone.
  virtual boost::asio::awaitable<bool> send(std::string_view event, const boost::json::object& data) = 0;
};

// Maps an upstream HTTP error (status and body) to the error the client gets: a 4xx
// passed on, 529/overloaded_error as 529, anything else as 502 (the table is in
// tool_loop.cc).
ApiError upstream_http_error(long status, std::string_view body);

class ToolLoop {
 public:
  ToolLoop(std::shared_ptr<UpstreamClient> client, LoopSettings settings, MessagesRequest request,
           std::string upstream_model, ToolRunner& runner,
           std::shared_ptr<runtime::Cancellation> cancellation);
  ~ToolLoop();

  // The whole turn as one message (non-streaming requests).
  boost::asio::awaitable<Result<boost::json::object>> run();

  // Streaming, in two steps: open() makes the first upstream call and returns its error
  // (before anything is sent to the client); stream() then sends every event.
  boost::asio::awaitable<Result<void>> open();
  boost::asio::awaitable<void> stream(EventSink& sink);

 private:
  struct UpstreamTurn;
  boost::asio::awaitable<Result<std::shared_ptr<UpstreamCall>>> call_upstream(bool stream);
  boost::asio::awaitable<Result<UpstreamTurn>> read_json_turn(std::shared_ptr<UpstreamCall> call);
  boost::asio::awaitable<Result<UpstreamTurn>> read_stream_turn(std::shared_ptr<UpstreamCall> call,
                                                                EventSink& sink);
  // After a turn: runs its sub-tool calls; true when the loop goes on.
  boost::asio::awaitable<bool> after_turn(UpstreamTurn& turn, EventSink* sink);
  // Runs one sub-tool call (beside pings when streaming); `code_tools` set: the Python
  // with those client tools callable (its step may pause).
  boost::asio::awaitable<CodeStep> run_with_pings(std::string_view tool, const boost::json::object& input,
                                                  EventSink* sink, const std::string& tool_use_id,
                                                  const std::vector<std::string>* code_tools);
  // A request that answers paused code's calls: resumes it before the model is asked.
  boost::asio::awaitable<Result<void>> resume_code();
  // The tool_use blocks of the calls paused code makes, added to the response.
  boost::asio::awaitable<void> add_code_calls(const std::string& server_tool_id,
                                              const std::vector<CodeCall>& calls, EventSink* sink);
  // A block sandboxd made (a result, a code's tool call), added and streamed.
  boost::asio::awaitable<void> add_block(boost::json::object block, EventSink* sink);
  boost::asio::awaitable<bool> send_message_start(EventSink& sink, const boost::json::object& usage);
  // The result of the paused code `server_tool_id` for the model, once it ended.
  void add_result_for_model(const std::string& upstream_id, const boost::json::object& content);
  boost::json::object shown_block(const boost::json::object& upstream_block) const;
  boost::json::object final_usage() const;
  void add_usage(const boost::json::object& usage);
  boost::json::object strip_detail(boost::json::object content) const;

  std::shared_ptr<UpstreamClient> client_;
  LoopSettings settings_;
  MessagesRequest request_;
  std::string upstream_model_;
  ToolRunner& runner_;
  std::shared_ptr<runtime::Cancellation> cancellation_;

  std::string id_;
  std::string base_body_;            // the upstream request's JSON up to its messages: `{...,`
  boost::json::array conversation_;  // what the upstream sees, grown turn by turn
  boost::json::array content_;       // what the client gets
  boost::json::object usage_;
  int code_execution_requests_ = 0;
  int iterations_ = 0;
  std::string stop_reason_;
  boost::json::value stop_sequence_;
  std::shared_ptr<UpstreamCall> first_call_;  // opened by open()
  bool message_started_ = false;              // message_start sent
  bool code_paused_ = false;                  // code waits on the client's tool results
  std::vector<std::string> code_tool_names_;  // the client tools code may call
};

// "msg_" + 24 random characters.
std::string new_message_id();

}  // namespace sandboxd::model
