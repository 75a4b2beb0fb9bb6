// bash_code_execution (docs/http-api.md): its input, and the result and error blocks it
// produces, shaped exactly as they appear inside a messages response.
#pragma once

#include <boost/json/object.hpp>
#include <optional>
#include <string>
#include <string_view>

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

// {"type":"bash_code_execution_result","stdout":..,"stderr":..,"return_code":N}
boost::json::object bash_result(const runtime::ExecResult& result);

// {"type":"<block_type>","error_code":"unavailable","detail":{"code":..,"explanation":..}}
// (detail omitted for the Anthropic-compatible tool version).
boost::json::object tool_error(std::string_view block_type, std::string_view error_code,
                               std::string_view explanation, bool include_detail);

inline constexpr std::string_view kBashErrorType = "bash_code_execution_tool_result_error";
inline constexpr std::string_view kEditorErrorType = "text_editor_code_execution_tool_result_error";

}  // namespace sandboxd::tools
