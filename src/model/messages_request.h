// A /messages request: validated the way the Anthropic API validates it (a 400 with
// the field's path), and translated for the upstream model: the code_execution tool
// becomes two ordinary tools, and earlier server_tool_use / *_tool_result blocks in
// the history become the tool_use / tool_result turns the upstream model knows.
#pragma once

#include <boost/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/skill_reference.h"

namespace sandboxd::model {

// The code execution tool's `type`: Zylon's code_execution_v1, or one of Anthropic's
// versions (20260120 and 20260521 add the persistent Python sub-tool).
enum class CodeToolVersion { kNone, kV1, k20250825, k20260120, k20260521 };

// The tool type as the client names it ("" for kNone).
std::string_view code_tool_type(CodeToolVersion version);
// Error blocks' `detail` is a Zylon extension: Anthropic-compatible responses, i.e. every
// Anthropic tool version, leave it out.
inline bool omits_detail(CodeToolVersion version) {
  return version != CodeToolVersion::kNone && version != CodeToolVersion::kV1;
}

inline constexpr std::string_view kBashTool = "bash_code_execution";
inline constexpr std::string_view kEditorTool = "text_editor_code_execution";
inline bool is_sub_tool(std::string_view name) { return name == kBashTool || name == kEditorTool; }

inline constexpr size_t kMaxSkillsPerRequest = 8;

struct MessagesRequest {
  boost::json::object body;  // as the client sent it (validated)
  std::string model;
  bool stream = false;
  CodeToolVersion code_tool = CodeToolVersion::kNone;
  std::optional<std::string> container;  // the requested container id
  std::vector<SkillReference> skills;    // container.skills
};

// Validates a request body. `valid_container_id` tells whether an id is acceptable.
Result<MessagesRequest> parse_messages_request(boost::json::object body,
                                                       bool (*valid_container_id)(std::string_view));

// The upstream request body: the client's parameters, the upstream model name, the
// history translated, the sub-tools in place of code_execution.
boost::json::object upstream_body(const MessagesRequest& request, const std::string& upstream_model, bool stream);

// The client's history in upstream terms (see the header comment).
boost::json::array translate_history(const boost::json::array& messages);

// Where the turn being generated begins: the index of the last user message that holds
// more than tool_result blocks (a client tool's answer and a pause_turn continuation go
// on the turn before them). container_upload blocks from there on are this turn's; those
// of finished turns were placed when those turns ran (as Anthropic treats them).
size_t current_turn_start(const boost::json::array& messages);

// The two sub-tools as ordinary tool definitions, with the sandbox contract in their
// descriptions.
boost::json::array sub_tool_definitions();

// What the model reads as the result of a sub-tool call (a tool_result's content).
std::string result_text_for_model(const boost::json::object& content);
bool result_is_error(const boost::json::object& content);

// The server_tool_use id shown for an upstream tool_use id: "toolu_X" -> "srvtoolu_X".
std::string server_tool_id(std::string_view upstream_id);

}  // namespace sandboxd::model
