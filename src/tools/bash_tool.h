// bash_code_execution (docs/http-api.md): its input, and the result and error blocks it
// produces, shaped exactly as they appear inside a messages response.
#pragma once

#include <boost/json/object.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "runtime/sandbox.h"

namespace sandboxd::tools {

struct BashInput {
  std::string command;
  std::optional<int> timeout_sec;  // per call; the configured default otherwise
  bool restart = false;            // reset the sandbox (and empty the workspace) first
};

// Parses the sub-tool input. A malformed input is an invalid_request ApiError whose
// message is the explanation (the caller puts it in the tool's error block).
Result<BashInput> parse_bash_input(const boost::json::object& input);

// {"type":"bash_code_execution_result","stdout":..,"stderr":..,"return_code":N,
//  "content":[{"type":"bash_code_execution_output","file_id":ID},...]}: `output_file_ids`
// are the Files API ids of the outputs the command created or changed ([] for none), as
// Anthropic's type has them, so a client downloads them at once.
boost::json::object bash_result(const runtime::ExecResult& result,
                                const std::vector<std::string>& output_file_ids);

// The `content` array of a result whose Anthropic type lists output files:
// [{"type": <output_type>, "file_id": ID}, ...].
boost::json::array output_blocks(std::string_view output_type, const std::vector<std::string>& file_ids);

// {"type":"<block_type>","error_code":"unavailable","detail":{"code":..,"explanation":..}}
// (detail is a Zylon extension: the tool loop removes it for every Anthropic tool
// version). The editor's error type also carries Anthropic's `error_message`.
boost::json::object tool_error(std::string_view block_type, std::string_view error_code,
                               std::string_view explanation, bool include_detail);

inline constexpr std::string_view kBashErrorType = "bash_code_execution_tool_result_error";
inline constexpr std::string_view kEditorErrorType = "text_editor_code_execution_tool_result_error";

}  // namespace sandboxd::tools
