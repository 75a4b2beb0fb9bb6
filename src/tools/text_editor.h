// text_editor_code_execution (docs/http-api.md): view, create, str_replace and insert, on the
// host side of the container's mounts, whether or not its sandbox runs.
#pragma once

#include <sys/types.h>

#include <boost/json/object.hpp>
#include <cstddef>

#include "base/sandbox_paths.h"

namespace sandboxd::tools {

struct EditorOptions {
  uid_t uid = 101000;  // host ids of agent: files the editor creates belong to agent
  gid_t gid = 101000;
  size_t max_view_bytes = 10u << 20;  // a file larger than this is refused by view
  bool include_detail = true;         // false for code_execution_20250825 (Anthropic shape)
};

// Runs one editor call. `input` is the sub-tool input ({"command": "view", "path": ...}).
// Returns the `content` object of a text_editor_code_execution_tool_result block:
//   {"type":"text_editor_code_execution_view_result","file_type":"text","content":...,
//    "num_lines":N,"start_line":S,"total_lines":T}
//   {"type":"text_editor_code_execution_create_result","is_file_update":bool}
//   {"type":"text_editor_code_execution_str_replace_result","old_start":..,"old_lines":..,
//    "new_start":..,"new_lines":..,"lines":["-old","+new"]}
//   (insert answers with the same str_replace_result shape)
// or an error:
//   {"type":"text_editor_code_execution_tool_result_error","error_code":"unavailable",
//    "error_message":"File not found: /home/agent/workspace/x",
//    "detail":{"code":"unavailable","explanation":"File not found: /home/agent/workspace/x"}}
// (error_code "invalid_tool_input" for a malformed input).
boost::json::object run_text_editor(const ContainerPaths& paths, const boost::json::object& input,
                                    const EditorOptions& options);

}  // namespace sandboxd::tools
