#include "model/messages_request.h"

#include <set>

namespace sandboxd::model {
namespace {

namespace json = boost::json;

ApiError invalid(const std::string& path, const std::string& problem) {
  return ApiError::invalid_request(path + ": " + problem);
}

bool is_integer(const json::value& v) { return v.is_int64() || v.is_uint64(); }
int64_t integer(const json::value& v) {
  return v.is_int64() ? v.as_int64() : static_cast<int64_t>(std::min<uint64_t>(v.as_uint64(), INT64_MAX));
}

// Checks that `object` holds `field` of the right JSON kind.
std::optional<ApiError> need_string(const json::object& object, const char* field, const std::string& path) {
  auto* v = object.if_contains(field);
  if (!v) return invalid(path + "." + field, "Field required");
  if (!v->is_string()) return invalid(path + "." + field, "Input should be a valid string");
  return std::nullopt;
}
std::optional<ApiError> need_object(const json::object& object, const char* field, const std::string& path) {
  auto* v = object.if_contains(field);
  if (!v) return invalid(path + "." + field, "Field required");
  if (!v->is_object()) return invalid(path + "." + field, "Input should be a valid dictionary");
  return std::nullopt;
}

const std::set<std::string, std::less<>> kUserBlocks = {"text",          "image",       "document",
                                                        "search_result", "tool_result", "container_upload"};
const std::set<std::string, std::less<>> kAssistantBlocks = {"text",
                                                             "thinking",
                                                             "redacted_thinking",
                                                             "tool_use",
                                                             "server_tool_use",
                                                             "bash_code_execution_tool_result",
                                                             "text_editor_code_execution_tool_result",
                                                             "code_execution_tool_result"};

std::optional<ApiError> check_block(const json::value& value, const std::string& path, bool assistant) {
  if (!value.is_object()) return invalid(path, "Input should be a valid dictionary");
  const auto& block = value.as_object();
  auto* type_value = block.if_contains("type");
  if (!type_value) return invalid(path + ".type", "Field required");
  if (!type_value->is_string()) return invalid(path + ".type", "Input should be a valid string");
  std::string type(type_value->as_string());
  const auto& allowed = assistant ? kAssistantBlocks : kUserBlocks;
  if (!allowed.count(type)) {
    std::string expected;
    for (const auto& t : allowed) expected += (expected.empty() ? "'" : ", '") + t + "'";
    return invalid(path + ".type", "block type '" + type + "' is not allowed in a" +
                                       (assistant ? "n assistant" : " user") + " message (expected one of " +
                                       expected + ")");
  }
  if (type == "text") return need_string(block, "text", path);
  if (type == "image" || type == "document") return need_object(block, "source", path);
  if (type == "thinking") {
    if (auto e = need_string(block, "thinking", path)) return e;
    return need_string(block, "signature", path);
  }
  if (type == "redacted_thinking") return need_string(block, "data", path);
  if (type == "container_upload") return need_string(block, "file_id", path);
  if (type == "tool_use" || type == "server_tool_use") {
    if (auto e = need_string(block, "id", path)) return e;
    if (auto e = need_string(block, "name", path)) return e;
    if (type == "server_tool_use" && !is_sub_tool(block.at("name").as_string()))
      return invalid(path + ".name",
                     "unknown server tool '" + std::string(block.at("name").as_string()) + "'");
    return need_object(block, "input", path);
  }
  if (type == "tool_result") {
    if (auto e = need_string(block, "tool_use_id", path)) return e;
    if (auto* content = block.if_contains("content");
        content && !content->is_string() && !content->is_array())
      return invalid(path + ".content", "Input should be a valid string or list");
    if (auto* is_error = block.if_contains("is_error"); is_error && !is_error->is_bool())
      return invalid(path + ".is_error", "Input should be a valid boolean");
    return std::nullopt;
  }
  if (type.ends_with("_tool_result")) {  // a server tool result
    if (auto e = need_string(block, "tool_use_id", path)) return e;
    return need_object(block, "content", path);
  }
  return std::nullopt;
}

// The caller.tool_id of a tool_use block that code made (programmatic tool calling);
// empty for the model's own calls.
std::string code_caller_of(const json::object& block) {
  auto* caller = block.if_contains("caller");
  if (!caller || !caller->is_object()) return {};
  auto* type = caller->as_object().if_contains("type");
  auto* tool_id = caller->as_object().if_contains("tool_id");
  if (!type || !type->is_string() || type->as_string() == "direct" || !tool_id || !tool_id->is_string())
    return {};
  return std::string(tool_id->as_string());
}

std::optional<ApiError> check_caller(const json::object& block, const std::string& path) {
  auto* caller = block.if_contains("caller");
  if (!caller) return std::nullopt;
  if (!caller->is_object()) return invalid(path + ".caller", "Input should be a valid dictionary");
  auto* type = caller->as_object().if_contains("type");
  if (!type || !type->is_string()) return invalid(path + ".caller.type", "Field required");
  if (type->as_string() == "direct") return std::nullopt;
  if (!type->as_string().starts_with("code_execution_"))
    return invalid(path + ".caller.type", "Input should be 'direct' or a code execution tool version");
  return need_string(caller->as_object(), "tool_id", path + ".caller");
}

// The text a tool_result gives code that called a client tool: its string, or its text
// blocks joined (other blocks as JSON, which code can parse).
std::string tool_result_text(const json::object& block) {
  auto* content = block.if_contains("content");
  if (!content) return {};
  if (content->is_string()) return std::string(content->as_string());
  std::string text;
  bool only_text = true;
  for (const auto& b : content->as_array()) {
    if (!b.is_object()) continue;
    auto* type = b.as_object().if_contains("type");
    auto* t = b.as_object().if_contains("text");
    if (type && type->is_string() && type->as_string() == "text" && t && t->is_string())
      text += t->as_string();
    else
      only_text = false;
  }
  return only_text ? text : json::serialize(*content);
}

std::optional<ApiError> check_messages(const json::value& value, bool& has_server_blocks,
                                       std::optional<ResumedCode>& resumed) {
  if (!value.is_array()) return invalid("messages", "Input should be a valid list");
  const auto& messages = value.as_array();
  if (messages.empty()) return invalid("messages", "at least one message is required");
  // server_tool_use ids of code paused on client tool calls (tool_use blocks with its
  // id as caller.tool_id): their result comes in a later assistant message.
  std::set<std::string> awaiting;
  size_t last_assistant = messages.size();
  std::set<std::string> last_code_calls;  // tool_use ids code made, in the last assistant message
  for (size_t i = 0; i < messages.size(); ++i) {
    std::string path = "messages." + std::to_string(i);
    if (!messages[i].is_object()) return invalid(path, "Input should be a valid dictionary");
    const auto& message = messages[i].as_object();
    for (const auto& [key, v] : message)
      if (key != "role" && key != "content")
        return invalid(path + "." + std::string(key), "Extra inputs are not permitted");
    auto* role = message.if_contains("role");
    if (!role) return invalid(path + ".role", "Field required");
    if (!role->is_string() || (role->as_string() != "user" && role->as_string() != "assistant"))
      return invalid(path + ".role", "Input should be 'user' or 'assistant'");
    bool assistant = role->as_string() == "assistant";
    auto* content = message.if_contains("content");
    if (!content) return invalid(path + ".content", "Field required");
    if (assistant) {
      last_assistant = i;
      last_code_calls.clear();
    }
    if (content->is_string()) continue;
    if (!content->is_array()) return invalid(path + ".content", "Input should be a valid string or list");
    std::set<std::string> server_ids;
    std::set<std::string> callers;  // caller.tool_id of this message's tool_use blocks
    const auto& blocks = content->as_array();
    for (size_t j = 0; j < blocks.size(); ++j) {
      std::string block_path = path + ".content." + std::to_string(j);
      if (auto e = check_block(blocks[j], block_path, assistant)) return e;
      const auto& block = blocks[j].as_object();
      std::string_view type = block.at("type").as_string();
      if (type == "container_upload") {
        has_server_blocks = true;  // a file for the container: the code tool is needed
      } else if (type == "server_tool_use") {
        has_server_blocks = true;
        server_ids.insert(std::string(block.at("id").as_string()));
      } else if (type == "tool_use") {
        if (auto e = check_caller(block, block_path)) return e;
        if (std::string caller = code_caller_of(block); !caller.empty()) {
          has_server_blocks = true;
          if (!server_ids.count(caller) && !awaiting.count(caller))
            return invalid(block_path + ".caller.tool_id",
                           "'" + caller + "' names no server_tool_use block whose code is still running");
          callers.insert(caller);
          last_code_calls.insert(std::string(block.at("id").as_string()));
        }
      } else if (is_sub_tool_result(type)) {
        has_server_blocks = true;
        std::string id(block.at("tool_use_id").as_string());
        if (server_ids.erase(id) == 0 && awaiting.erase(id) == 0)
          return invalid(block_path + ".tool_use_id",
                         "'" + id + "' does not match an earlier server_tool_use block of this message");
      }
    }
    for (const auto& id : server_ids) {
      if (!callers.count(id))
        return invalid(path + ".content", "server_tool_use block '" + id + "' has no result block");
      awaiting.insert(id);  // its code waits on the client's tool results
    }
  }
  if (awaiting.empty()) return std::nullopt;
  // Code still waits: this request must answer its calls of the last assistant message.
  std::string waiting = *awaiting.begin();
  bool answered_here = false;
  if (last_assistant < messages.size() && !last_code_calls.empty())
    for (const auto& block : messages[last_assistant].as_object().at("content").as_array())
      if (block.as_object().at("type").as_string() == "tool_use" &&
          code_caller_of(block.as_object()) == *awaiting.begin())
        answered_here = true;
  if (awaiting.size() > 1 || !answered_here || last_assistant + 2 != messages.size())
    return invalid("messages", "server_tool_use block '" + waiting +
                                   "' has no result block (the tool calls its code made were not answered)");
  ResumedCode code;
  code.server_tool_id = waiting;
  const auto& reply = messages.back().as_object().at("content");
  if (reply.is_array())
    for (const auto& value : reply.as_array()) {
      const auto& block = value.as_object();
      if (block.at("type").as_string() != "tool_result") continue;
      std::string id(block.at("tool_use_id").as_string());
      if (!last_code_calls.count(id)) continue;  // a direct call's answer: the model's
      auto* is_error = block.if_contains("is_error");
      code.answers.push_back({id, tool_result_text(block), is_error && is_error->as_bool()});
    }
  resumed = std::move(code);
  return std::nullopt;
}

std::optional<ApiError> check_system(const json::value& value) {
  if (value.is_string()) return std::nullopt;
  if (!value.is_array()) return invalid("system", "Input should be a valid string or list");
  const auto& blocks = value.as_array();
  for (size_t i = 0; i < blocks.size(); ++i) {
    std::string path = "system." + std::to_string(i);
    if (!blocks[i].is_object()) return invalid(path, "Input should be a valid dictionary");
    const auto& block = blocks[i].as_object();
    auto* type = block.if_contains("type");
    if (!type || !type->is_string() || type->as_string() != "text")
      return invalid(path + ".type", "Input should be 'text'");
    if (auto e = need_string(block, "text", path)) return e;
  }
  return std::nullopt;
}

std::optional<ApiError> check_tools(const json::value& value, CodeToolVersion& code_tool) {
  if (!value.is_array()) return invalid("tools", "Input should be a valid list");
  std::set<std::string> names;
  const auto& tools = value.as_array();
  for (size_t i = 0; i < tools.size(); ++i) {
    std::string path = "tools." + std::to_string(i);
    if (!tools[i].is_object()) return invalid(path, "Input should be a valid dictionary");
    const auto& tool = tools[i].as_object();
    if (auto e = need_string(tool, "name", path)) return e;
    std::string name(tool.at("name").as_string());
    std::string type;
    if (auto* t = tool.if_contains("type")) {
      if (!t->is_string()) return invalid(path + ".type", "Input should be a valid string");
      type = std::string(t->as_string());
    }
    if (name == "code_execution" || type.starts_with("code_execution")) {
      if (type == "code_execution_v1") {
        code_tool = CodeToolVersion::kV1;
      } else if (type == "code_execution_20250825") {
        code_tool = CodeToolVersion::k20250825;
      } else if (type == "code_execution_20260120") {
        code_tool = CodeToolVersion::k20260120;
      } else if (type == "code_execution_20260521") {
        code_tool = CodeToolVersion::k20260521;
      } else {
        return invalid(path + ".type",
                       "the code_execution tool's type must be 'code_execution_v1', "
                       "'code_execution_20250825', 'code_execution_20260120' or "
                       "'code_execution_20260521', not '" +
                           type + "'");
      }
      if (name != "code_execution")
        return invalid(path + ".name", "the code execution tool must be named 'code_execution'");
    } else if (type.empty() || type == "custom") {
      if (name.empty() || name.size() > 128) return invalid(path + ".name", "must be 1 to 128 characters");
      for (char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
          return invalid(path + ".name", "String should match pattern '^[a-zA-Z0-9_-]{1,128}$'");
      if (is_sub_tool(name))
        return invalid(path + ".name", "'" + name + "' is reserved for the code_execution tool");
      if (auto e = need_object(tool, "input_schema", path)) return e;
      if (auto* d = tool.if_contains("description"); d && !d->is_string())
        return invalid(path + ".description", "Input should be a valid string");
    } else {
      return invalid(path + ".type", "tool type '" + type + "' is not supported by this server");
    }
    if (auto* callers = tool.if_contains("allowed_callers")) {
      static const std::set<std::string, std::less<>> kCallers = {
          "direct", "code_execution_20250825", "code_execution_20260120", "code_execution_20260521"};
      if (!callers->is_array()) return invalid(path + ".allowed_callers", "Input should be a valid list");
      for (size_t j = 0; j < callers->as_array().size(); ++j) {
        const auto& caller = callers->as_array()[j];
        if (!caller.is_string() || !kCallers.count(caller.as_string()))
          return invalid(path + ".allowed_callers." + std::to_string(j),
                         "Input should be 'direct', 'code_execution_20250825', 'code_execution_20260120' or "
                         "'code_execution_20260521'");
      }
    }
    if (!names.insert(name).second)
      return invalid("tools", "tool names must be unique ('" + name + "' repeats)");
  }
  return std::nullopt;
}

bool lists_caller(const json::object& tool, std::string_view caller) {
  auto* callers = tool.if_contains("allowed_callers");
  if (!callers || !callers->is_array()) return caller == "direct";  // the default: the model only
  for (const auto& c : callers->as_array())
    if (c.is_string() && c.as_string() == caller) return true;
  return false;
}

// Which client tools code may call (programmatic tool calling): those whose
// allowed_callers name this request's code tool version. Naming another version is a
// mistake the client should hear about, as is naming one without the code tool.
std::optional<ApiError> check_code_callers(const json::array& tools, MessagesRequest& request) {
  const std::string_view version = code_tool_type(request.code_tool);
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& tool = tools[i].as_object();
    if (tool.at("name").as_string() == "code_execution") continue;
    auto* callers = tool.if_contains("allowed_callers");
    if (!callers) continue;
    for (size_t j = 0; j < callers->as_array().size(); ++j) {
      std::string_view caller = callers->as_array()[j].as_string();
      if (caller == "direct") continue;
      if (caller != version)
        return invalid(
            "tools." + std::to_string(i) + ".allowed_callers." + std::to_string(j),
            "'" + std::string(caller) + "' is not the code execution tool of this request" +
                (version.empty() ? std::string(" (it has none)") : " ('" + std::string(version) + "')"));
    }
    if (lists_caller(tool, version) && !version.empty()) request.code_callable_tools.push_back(tool);
  }
  request.python_tool =
      request.code_tool == CodeToolVersion::k20260120 || request.code_tool == CodeToolVersion::k20260521 ||
      (request.code_tool == CodeToolVersion::k20250825 && !request.code_callable_tools.empty());
  return std::nullopt;
}

std::optional<ApiError> check_skills(const json::value& value, std::vector<SkillReference>& out) {
  if (!value.is_array()) return invalid("container.skills", "Input should be a valid list");
  const auto& skills = value.as_array();
  if (skills.size() > kMaxSkillsPerRequest)
    return invalid("container.skills", "at most " + std::to_string(kMaxSkillsPerRequest) +
                                           " skills per request, not " + std::to_string(skills.size()));
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < skills.size(); ++i) {
    std::string path = "container.skills." + std::to_string(i);
    if (!skills[i].is_object()) return invalid(path, "Input should be a valid dictionary");
    const auto& skill = skills[i].as_object();
    for (const auto& [key, v] : skill)
      if (key != "type" && key != "skill_id" && key != "version")
        return invalid(path + "." + std::string(key), "Extra inputs are not permitted");
    if (auto e = need_string(skill, "type", path)) return e;
    if (auto e = need_string(skill, "skill_id", path)) return e;
    SkillReference ref;
    ref.type = std::string(skill.at("type").as_string());
    if (ref.type != "custom" && ref.type != "anthropic")
      return invalid(path + ".type", "Input should be 'anthropic' or 'custom'");
    ref.skill_id = std::string(skill.at("skill_id").as_string());
    if (ref.skill_id.empty() || ref.skill_id.size() > 128)
      return invalid(path + ".skill_id", "must be 1 to 128 characters");
    ref.version = "latest";
    if (auto* v = skill.if_contains("version"); v && !v->is_null()) {
      if (!v->is_string() || v->as_string().empty() || v->as_string().size() > 64)
        return invalid(path + ".version", "Input should be 'latest' or a version string");
      ref.version = std::string(v->as_string());
    }
    if (!seen.insert({ref.type, ref.skill_id}).second)
      return invalid(path + ".skill_id", "skill '" + ref.skill_id + "' is listed more than once");
    out.push_back(std::move(ref));
  }
  return std::nullopt;
}

}  // namespace

Result<MessagesRequest> parse_messages_request(json::object body,
                                               bool (*valid_container_id)(std::string_view)) {
  static const std::set<std::string, std::less<>> kKnown = {
      "model",       "messages",    "max_tokens", "system",         "stream",
      "temperature", "top_p",       "top_k",      "stop_sequences", "metadata",
      "tools",       "tool_choice", "thinking",   "container",      "service_tier"};
  for (const auto& [key, v] : body)
    if (!kKnown.count(key)) return invalid(std::string(key), "Extra inputs are not permitted");
  MessagesRequest request;
  auto* model = body.if_contains("model");
  if (!model) return invalid("model", "Field required");
  if (!model->is_string() || model->as_string().empty())
    return invalid("model", "Input should be a non-empty string");
  request.model = std::string(model->as_string());
  auto* max_tokens = body.if_contains("max_tokens");
  if (!max_tokens) return invalid("max_tokens", "Field required");
  if (!is_integer(*max_tokens) || integer(*max_tokens) < 1)
    return invalid("max_tokens", "Input should be an integer greater than or equal to 1");
  auto* messages = body.if_contains("messages");
  if (!messages) return invalid("messages", "Field required");
  bool has_server_blocks = false;
  if (auto e = check_messages(*messages, has_server_blocks, request.resumed_code)) return *e;
  if (auto* system = body.if_contains("system"))
    if (auto e = check_system(*system)) return *e;
  if (auto* stream = body.if_contains("stream")) {
    if (!stream->is_bool()) return invalid("stream", "Input should be a valid boolean");
    request.stream = stream->as_bool();
  }
  if (auto* t = body.if_contains("temperature");
      t && (!t->is_number() || t->to_number<double>() < 0 || t->to_number<double>() > 1))
    return invalid("temperature", "Input should be a number from 0 to 1");
  if (auto* t = body.if_contains("top_p");
      t && (!t->is_number() || t->to_number<double>() < 0 || t->to_number<double>() > 1))
    return invalid("top_p", "Input should be a number from 0 to 1");
  if (auto* t = body.if_contains("top_k"); t && (!is_integer(*t) || integer(*t) < 0))
    return invalid("top_k", "Input should be a non-negative integer");
  if (auto* s = body.if_contains("stop_sequences")) {
    if (!s->is_array()) return invalid("stop_sequences", "Input should be a valid list");
    for (size_t i = 0; i < s->as_array().size(); ++i)
      if (!s->as_array()[i].is_string())
        return invalid("stop_sequences." + std::to_string(i), "Input should be a valid string");
  }
  if (auto* m = body.if_contains("metadata"); m && !m->is_object())
    return invalid("metadata", "Input should be a valid dictionary");
  if (auto* t = body.if_contains("thinking"); t && !t->is_object())
    return invalid("thinking", "Input should be a valid dictionary");
  if (auto* tools = body.if_contains("tools")) {
    if (auto e = check_tools(*tools, request.code_tool)) return *e;
    if (auto e = check_code_callers(tools->as_array(), request)) return *e;
  }
  if (auto* choice = body.if_contains("tool_choice")) {
    if (!choice->is_object()) return invalid("tool_choice", "Input should be a valid dictionary");
    auto* type = choice->as_object().if_contains("type");
    static const std::set<std::string, std::less<>> kChoices = {"auto", "any", "tool", "none"};
    if (!type || !type->is_string() || !kChoices.count(type->as_string()))
      return invalid("tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'");
    if (type->as_string() == "tool") {
      if (auto e = need_string(choice->as_object(), "name", "tool_choice")) return *e;
    }
  }
  if (auto* container = body.if_contains("container"); container && !container->is_null()) {
    const json::value* id = container;
    if (container->is_object()) {
      for (const auto& [key, v] : container->as_object())
        if (key != "id" && key != "skills")
          return invalid("container." + std::string(key), "Extra inputs are not permitted");
      id = container->as_object().if_contains("id");
      if (id && id->is_null()) id = nullptr;
      if (auto* skills = container->as_object().if_contains("skills"); skills && !skills->is_null())
        if (auto e = check_skills(*skills, request.skills)) return *e;
    }
    if (id) {
      if (!id->is_string())
        return invalid("container", "Input should be a string or an object with a string 'id'");
      if (!valid_container_id(id->as_string()))
        return invalid("container",
                       "a container id is 1 to 128 characters of letters, digits, '.', '_', ':' and '-'");
      request.container = std::string(id->as_string());
    }
  }
  if (!request.skills.empty() && request.code_tool == CodeToolVersion::kNone)
    return invalid("container.skills",
                   "skills need the code execution tool: add {\"type\": \"code_execution_20250825\", "
                   "\"name\": \"code_execution\"} to tools");
  if (has_server_blocks && request.code_tool == CodeToolVersion::kNone)
    return invalid("tools",
                   "the messages hold code execution or container_upload blocks; include the "
                   "code_execution tool");
  if (request.resumed_code) {
    // The paused code lives in a container: without its id there is nothing to resume.
    if (!request.container) return ApiError::invalid_request(std::string(kContainerRequiredForPendingCode));
    if (!request.python_tool)
      return invalid("tools",
                     "the messages answer tool calls of code execution; include the code_execution tool "
                     "and the tools the code called (with allowed_callers)");
  }
  request.body = std::move(body);
  return request;
}

// ---------------------------------------------------------------------------------
std::string_view code_tool_type(CodeToolVersion version) {
  switch (version) {
    case CodeToolVersion::kNone:
      return "";
    case CodeToolVersion::kV1:
      return "code_execution_v1";
    case CodeToolVersion::k20250825:
      return "code_execution_20250825";
    case CodeToolVersion::k20260120:
      return "code_execution_20260120";
    case CodeToolVersion::k20260521:
      return "code_execution_20260521";
  }
  return "";
}

size_t current_turn_start(const json::array& messages) {
  for (size_t i = messages.size(); i-- > 0;) {
    const auto& message = messages[i].as_object();
    if (message.at("role").as_string() != "user") continue;
    const auto& content = message.at("content");
    if (content.is_string()) return i;
    for (const auto& block : content.as_array())
      if (block.as_object().at("type").as_string() != "tool_result") return i;
  }
  return 0;
}

std::string server_tool_id(std::string_view upstream_id) {
  std::string_view rest = upstream_id.starts_with("toolu_") ? upstream_id.substr(6) : upstream_id;
  std::string id = "srvtoolu_";
  for (char c : rest)
    id.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' ? c : '_');
  return id;
}

bool result_is_error(const json::object& content) {
  auto* type = content.if_contains("type");
  return type && type->is_string() && type->as_string().ends_with("_tool_result_error");
}

std::string result_text_for_model(const json::object& content) {
  if (result_is_error(content)) {
    std::string text = "Error";
    if (auto* code = content.if_contains("error_code"); code && code->is_string())
      text += " (" + std::string(code->as_string()) + ")";
    std::string why;
    if (auto* detail = content.if_contains("detail"); detail && detail->is_object())
      if (auto* explanation = detail->as_object().if_contains("explanation");
          explanation && explanation->is_string())
        why = std::string(explanation->as_string());
    // A history block in Anthropic's shape has no detail; the editor's error_message says why.
    if (auto* message = content.if_contains("error_message"); why.empty() && message && message->is_string())
      why = std::string(message->as_string());
    if (!why.empty()) text += ": " + why;
    return text;
  }
  // The result without its type tag, as JSON: lossless, and plain for a model to read.
  json::object fields = content;
  fields.erase("type");
  return json::serialize(fields);
}

namespace {
// A tool_use block as the upstream gets it: `caller: {"type": "direct"}`, which responses
// carry as Anthropic's type does, says only that the model called it, and an upstream
// that never offered programmatic calls may not know the field.
json::object without_direct_caller(const json::object& block) {
  json::object out = block;
  if (auto* caller = out.if_contains("caller"); caller && caller->is_object())
    if (auto* type = caller->as_object().if_contains("type");
        type && type->is_string() && type->as_string() == "direct")
      out.erase("caller");
  return out;
}
}  // namespace

json::array translate_history(const json::array& messages) {
  json::array out;
  // The calls code made to client tools (programmatic tool calling) and their results
  // are the code's business: the model sees only the code and its final result.
  std::set<std::string, std::less<>> code_calls;
  for (const auto& message : messages)
    if (const auto& content = message.as_object().at("content"); content.is_array())
      for (const auto& block : content.as_array())
        if (block.as_object().at("type").as_string() == "tool_use" &&
            !code_caller_of(block.as_object()).empty())
          code_calls.insert(std::string(block.as_object().at("id").as_string()));
  auto code_call_block = [&](const json::object& block) {
    std::string_view type = block.at("type").as_string();
    if (type == "tool_use") return code_calls.count(block.at("id").as_string()) > 0;
    if (type == "tool_result") return code_calls.count(block.at("tool_use_id").as_string()) > 0;
    return false;
  };
  // Appends a message, merging into the previous one when the roles repeat (a tool
  // result turn followed by the client's own user turn).
  auto append = [&](const char* role, json::array content) {
    if (content.empty()) return;
    if (!out.empty() && out.back().as_object().at("role").as_string() == role) {
      auto& previous = out.back().as_object()["content"];
      if (previous.is_string())
        previous = json::array{json::object{{"type", "text"}, {"text", previous.as_string()}}};
      for (auto& block : content) previous.as_array().push_back(std::move(block));
      return;
    }
    out.push_back(json::object{{"role", role}, {"content", std::move(content)}});
  };
  for (const auto& message_value : messages) {
    const auto& message = message_value.as_object();
    std::string role(message.at("role").as_string());
    const auto& content = message.at("content");
    if (role == "user" || content.is_string()) {
      json::array blocks;
      if (content.is_string())
        blocks.push_back(json::object{{"type", "text"}, {"text", content.as_string()}});
      else
        for (const auto& block : content.as_array())
          if (!code_call_block(block.as_object())) blocks.push_back(block);
      append(role.c_str(), std::move(blocks));
      continue;
    }
    json::array turn, results;
    for (const auto& block_value : content.as_array()) {
      const auto& block = block_value.as_object();
      std::string_view type = block.at("type").as_string();
      if (code_call_block(block)) continue;
      if (type == "server_tool_use") {
        if (!results.empty()) {  // a new step after results: close the step
          append("assistant", std::move(turn));
          append("user", std::move(results));
          turn = {};
          results = {};
        }
        turn.push_back(json::object{{"type", "tool_use"},
                                    {"id", block.at("id")},
                                    {"name", block.at("name")},
                                    {"input", block.at("input")}});
      } else if (is_sub_tool_result(type)) {
        const auto& result = block.at("content").as_object();
        json::object tool_result{{"type", "tool_result"},
                                 {"tool_use_id", block.at("tool_use_id")},
                                 {"content", result_text_for_model(result)}};
        if (result_is_error(result)) tool_result["is_error"] = true;
        results.push_back(std::move(tool_result));
      } else if (type == "tool_use" && !results.empty()) {
        // A client tool called in the same model turn as the server tools before it:
        // it stays in that turn, and the client's result joins the results after it.
        turn.push_back(without_direct_caller(block));
      } else {
        if (!results.empty()) {
          append("assistant", std::move(turn));
          append("user", std::move(results));
          turn = {};
          results = {};
        }
        turn.push_back(type == "tool_use" ? without_direct_caller(block) : block);
      }
    }
    append("assistant", std::move(turn));
    append("user", std::move(results));
  }
  return out;
}

namespace {
// The persistent Python's definition: what persists, and the functions the code may
// call (programmatic tool calling), so that any upstream model knows they exist.
json::object python_tool_definition(const json::array& code_callable) {
  json::object schema{{"type", "object"},
                      {"properties",
                       {{"code",
                         {{"type", "string"},
                          {"description", "The Python code to run (one cell; top-level await works)."}}}}},
                      {"required", json::array{"code"}}};
  std::string description =
      "Run Python code in the sandbox's persistent IPython kernel. Variables, imports, open files and "
      "threads survive from one call to the next while the sandbox runs (a restart of the sandbox loses "
      "them). The result has what the code printed and the value of its last expression as a REPL shows "
      "it; a traceback on an exception. Files it saves to /mnt/user-data/outputs/ are returned to the "
      "user. The same sandbox and folders as bash_code_execution.";
  if (!code_callable.empty()) {
    description +=
        "\n\nThe code can call these tools as async functions: `result = await name(arg=value, ...)` with "
        "the tool's input fields as keyword arguments (or one dict). Each returns the tool's result as a "
        "string (often JSON: parse it with json.loads) and raises ToolCallError when the tool failed. "
        "Several calls may run at once with asyncio.gather. Their results reach only the code: print what "
        "you need to see.";
    for (const auto& value : code_callable) {
      const auto& tool = value.as_object();
      description += "\n- async def " + std::string(tool.at("name").as_string()) + "(**input)";
      if (auto* d = tool.if_contains("description"); d && d->is_string())
        description += ": " + std::string(d->as_string());
      if (auto* s = tool.if_contains("input_schema")) description += " Input schema: " + json::serialize(*s);
    }
  }
  return json::object{
      {"name", kPythonTool}, {"description", description}, {"input_schema", std::move(schema)}};
}
}  // namespace

namespace {
// Bash and the editor, which every version has.
json::array bash_and_editor_definitions() {
  static const json::array kTools = [] {
    json::object bash_schema{
        {"type", "object"},
        {"properties",
         {{"command", {{"type", "string"}, {"description", "The bash command to run (bash -c)."}}},
          {"timeout",
           {{"type", "integer"},
            {"minimum", 1},
            {"maximum", 86400},
            {"description", "Seconds before the command is killed (default 60); it then returns code 124."}}},
          {"restart",
           {{"type", "boolean"},
            {"description",
             "Stop every process in the sandbox and empty /home/agent/workspace before running."}}}}},
        {"required", json::array{"command"}}};
    json::object editor_schema{
        {"type", "object"},
        {"properties",
         {{"command",
           {{"type", "string"},
            {"enum", json::array{"view", "create", "str_replace", "insert"}},
            {"description",
             "view a file or list a directory; create (or overwrite) a file; str_replace one "
             "exact, unique string; insert text after a line."}}},
          {"path",
           {{"type", "string"},
            {"description",
             "The file or directory. Relative paths resolve against /home/agent/workspace/."}}},
          {"view_range",
           {{"type", "array"},
            {"items", {{"type", "integer"}}},
            {"minItems", 2},
            {"maxItems", 2},
            {"description", "view: [start, end] lines, 1-based; end -1 means the end of the file."}}},
          {"file_text", {{"type", "string"}, {"description", "create: the whole content of the file."}}},
          {"old_str",
           {{"type", "string"},
            {"description", "str_replace: the exact text to replace; it must occur once."}}},
          {"new_str", {{"type", "string"}, {"description", "str_replace: the replacement text."}}},
          {"insert_line",
           {{"type", "integer"},
            {"minimum", 0},
            {"description", "insert: the line after which to insert (0 = start)."}}},
          {"insert_text", {{"type", "string"}, {"description", "insert: the text to insert."}}}}},
        {"required", json::array{"command", "path"}}};
    const char* sandbox =
        " The sandbox is a Linux container with bash, Python 3 and common data libraries. "
        "/home/agent/workspace/ is the working directory (read-write, scratch). "
        "/mnt/user-data/uploads/ holds the user's uploaded files (read-only). "
        "Save deliverables the user should download to /mnt/user-data/outputs/. "
        "/mnt/skills/ holds read-only skills, one folder per skill. "
        "Files persist between calls and later requests; processes, environment variables and the current "
        "directory do not. There is no internet access: packages cannot be installed.";
    return json::array{
        json::object{
            {"name", kBashTool},
            {"description", std::string("Run a shell command in the sandbox. Each call runs in a new bash "
                                        "shell; output beyond 1 MiB is truncated.") +
                                sandbox},
            {"input_schema", bash_schema}},
        json::object{
            {"name", kEditorTool},
            {"description", std::string("View, create and edit text files in the sandbox. uploads/ and "
                                        "skills/ are read-only; paths outside the sandbox folders are "
                                        "refused.") +
                                sandbox},
            {"input_schema", editor_schema}}};
  }();
  return kTools;
}
}  // namespace

json::array sub_tool_definitions(bool python, const json::array& code_callable) {
  json::array tools = bash_and_editor_definitions();
  if (python) tools.push_back(python_tool_definition(code_callable));
  return tools;
}

json::object upstream_body(const MessagesRequest& request, const std::string& upstream_model, bool stream) {
  json::object out;
  for (const auto& [key, value] : request.body) {
    if (key == "container" || key == "tools" || key == "messages" || key == "stream" || key == "model")
      continue;
    out[key] = value;
  }
  out["model"] = upstream_model;
  out["messages"] = translate_history(request.body.at("messages").as_array());
  json::array tools;
  if (auto* client_tools = request.body.if_contains("tools")) {
    for (const auto& tool : client_tools->as_array()) {
      if (tool.as_object().at("name").as_string() == "code_execution") {
        for (const auto& sub : sub_tool_definitions(request.python_tool, request.code_callable_tools))
          tools.push_back(sub);
        continue;
      }
      // A tool only code may call is not the model's to call: it reads about it in the
      // Python sub-tool's description instead.
      if (!lists_caller(tool.as_object(), "direct")) continue;
      json::object plain = tool.as_object();
      plain.erase("type");             // "custom" is the default
      plain.erase("allowed_callers");  // the upstream calls it directly; code's calls are sandboxd's
      tools.push_back(std::move(plain));
    }
  }
  if (!tools.empty()) out["tools"] = std::move(tools);
  if (auto* choice = out.if_contains("tool_choice"); choice && choice->is_object()) {
    auto& c = choice->as_object();
    // Forcing code_execution means forcing one of its sub-tools.
    if (c.at("type").as_string() == "tool" && c.at("name").as_string() == "code_execution") {
      json::object any{{"type", "any"}};
      if (auto* p = c.if_contains("disable_parallel_tool_use")) any["disable_parallel_tool_use"] = *p;
      *choice = std::move(any);
    }
  }
  if (stream) out["stream"] = true;
  return out;
}

}  // namespace sandboxd::model
