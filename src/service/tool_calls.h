// One sub-tool call in a container, the same for the direct tool endpoints and the
// /messages tool loop: bash runs in the container's sandbox (started on demand), the
// editor works on the container's folders. Returns the tool result block's `content`.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/cancellation.h"
#include "runtime/sandbox.h"
#include "service/services.h"

namespace sandboxd::service {

// `tool` is bash_code_execution, text_editor_code_execution or code_execution (the
// container's persistent Python, see run_python_tool). Errors come back as
// *_tool_result_error blocks (with `detail`); a cancelled call kills its command. A call
// that capacity refuses (429, or 503 for the quota) is an error: the direct endpoints
// answer with it, a /messages turn shows it as a `too_many_requests` block.
// `depth` is the nesting depth of the request that makes the call (0: a user's); the
// command's ANTHROPIC_AUTH_TOKEN is for depth + 1. `on_output`, when set, sees a bash
// command's output as it is written (runtime::ExecRequest::on_output).
// What a client following a bash call may want to know beside its result (MCP's log
// messages of the session revisions): its sandbox started or restarted for it, its
// command killed by its timeout, its output cut at the cap. `on_notice`, when set, is
// told each, on the call's own coroutine.
struct ToolNotice {
  enum class Level { kInfo, kNotice, kWarning };
  Level level = Level::kInfo;
  std::string message;
};
using ToolNoticeSink = std::function<void(ToolNotice)>;

asio::awaitable<Result<boost::json::object>> run_sub_tool(
    Services& services, std::shared_ptr<Container> container, std::string_view tool,
    const boost::json::object& input, std::shared_ptr<runtime::Cancellation> cancellation = nullptr,
    int depth = 0, std::function<void(runtime::OutputStreamId, std::string_view)> on_output = nullptr,
    ToolNoticeSink on_notice = nullptr);

// code_execution: input {"code": str, "timeout"?: seconds, "restart"?: bool}; the result
// is Anthropic's code_execution_result {stdout, stderr, return_code, content: []}: the
// text/plain form of the cell's value and displays follows its stdout (as a REPL shows
// them), an exception is return_code 1 with the traceback in stderr, a timeout 124 with
// "Command timed out after Ns." as for bash, a kernel that died its exit code with the
// explanation in stderr. With `rich_outputs` (the direct endpoint) the block also
// carries "outputs": the cell's Jupyter outputs with their MIME bundles (PNG, HTML).
asio::awaitable<Result<boost::json::object>> run_python_tool(Services& services,
                                                             std::shared_ptr<Container> container,
                                                             const boost::json::object& input,
                                                             bool rich_outputs, int depth = 0);

inline constexpr std::string_view kCodeExecutionErrorType = "code_execution_tool_result_error";

// Programmatic tool calling: code in the persistent Python calling client tools. A call
// the code makes is a tool_use block for the client (its id "toolu_" + random); the
// cell waits, paused in the container, until the client's tool_result comes back.
struct CodeToolCall {
  std::string tool_use_id;
  std::string name;
  boost::json::object input;
};
struct CodeToolAnswer {
  std::string tool_use_id;
  std::string content;  // the tool_result's text
  bool is_error = false;
};
// Where the code is: ended (`result`, the code_execution_result or its error block), or
// paused on `pending` calls.
struct PythonStep {
  boost::json::object result;
  std::vector<CodeToolCall> pending;
  bool paused() const { return !pending.empty(); }
};

// code_execution as a /messages turn runs it, the client tools `tools` callable from
// its code; `server_tool_id` (the server_tool_use block's id) names a pause.
asio::awaitable<Result<PythonStep>> run_python_step(Services& services, std::shared_ptr<Container> container,
                                                    const boost::json::object& input,
                                                    std::string server_tool_id,
                                                    std::vector<std::string> tools, int depth = 0);
// The client's answers to the calls the paused code `server_tool_id` waits on: the code
// runs on. A 400 when no such code waits (it ended, its pause expired, its sandbox
// stopped) or the answers are not for its calls; a capacity refusal leaves it paused.
asio::awaitable<Result<PythonStep>> resume_python_step(Services& services,
                                                       std::shared_ptr<Container> container,
                                                       const std::string& server_tool_id,
                                                       std::vector<CodeToolAnswer> answers);

}  // namespace sandboxd::service
