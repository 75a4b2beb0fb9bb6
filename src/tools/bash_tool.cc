#include "tools/bash_tool.h"

#include <boost/json.hpp>

#include "base/utf8.h"

namespace sandboxd::tools {

Result<BashInput> parse_bash_input(const boost::json::object& input) {
  BashInput out;
  for (const auto& [key, value] : input) {
    if (key == "command") {
      if (!value.is_string()) return ApiError::invalid_request("'command' must be a string");
      out.command = std::string(value.as_string());
      // A shell command is a C string: a NUL cannot be passed on, only cut it short.
      if (out.command.find('\0') != std::string::npos)
        return ApiError::invalid_request("'command' must not contain NUL characters");
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
  if (!input.contains("command") && !out.restart) return ApiError::invalid_request("'command' is required");
  return out;
}

boost::json::array output_blocks(std::string_view output_type, const std::vector<std::string>& file_ids) {
  boost::json::array blocks;
  blocks.reserve(file_ids.size());
  for (const auto& id : file_ids)
    blocks.push_back(boost::json::object{{"type", output_type}, {"file_id", id}});
  return blocks;
}

boost::json::object bash_result(const runtime::ExecResult& result,
                                const std::vector<std::string>& output_file_ids) {
  return boost::json::object{{"type", "bash_code_execution_result"},
                             {"stdout", to_valid_utf8(result.stdout_text)},
                             {"stderr", to_valid_utf8(result.stderr_text)},
                             {"return_code", result.return_code},
                             {"content", output_blocks("bash_code_execution_output", output_file_ids)}};
}

boost::json::object tool_error(std::string_view block_type, std::string_view error_code,
                               std::string_view explanation, bool include_detail) {
  boost::json::object error{{"type", block_type}, {"error_code", error_code}};
  // Anthropic's editor error has its reason in error_message (string or null); the
  // bash error has no such field.
  if (block_type == kEditorErrorType) error["error_message"] = explanation;
  if (include_detail)
    error["detail"] = boost::json::object{{"code", error_code}, {"explanation", explanation}};
  return error;
}

}  // namespace sandboxd::tools
