#include "api/mcp_tools.h"

#include <algorithm>

#include "api/api_calls.h"
#include "api/file_transfer.h"
#include "api/mcp_subscriptions.h"
#include "api/sandbox_network.h"
#include "base/base64.h"
#include "base/blocking.h"
#include "base/percent_encoding.h"
#include "base/sandbox_paths.h"
#include "base/utf8.h"
#include "messages/error_types.h"
#include "server/router.h"
#include "service/store_call.h"
#include "service/tool_calls.h"
#include "service/tool_tasks.h"
#include "store/keys.h"
#include "tools/bash_tool.h"

namespace sandboxd::api {

using service::ContainerFiles;
using service::DownloadRule;
using service::kCodeExecutionErrorType;
namespace {

namespace json = boost::json;

constexpr std::string_view kBashTool = "bash_code_execution";
constexpr std::string_view kEditorTool = "text_editor_code_execution";
constexpr std::string_view kPythonTool = "code_execution";  // the persistent Python
constexpr std::string_view kUriPrefix = "sandboxd://containers/";
// A file returned inside a message (download_file, resources/read) is at most this big
// (4 MiB as base64): a larger one is a resource_link and the Files API's download,
// which streams, so that a small request cannot make the server hold a large answer
// until a slow reader has taken it.
constexpr uint64_t kInlineFileLimit = 3u << 20;
constexpr size_t kResourcesPerPage = 100;
constexpr size_t kContainersPerResourcePage = 20;
// A command's result links at most this many of the outputs it wrote (list_files has all).
constexpr size_t kMaxOutputLinks = 100;

// --- schemas ---------------------------------------------------------------------
// Every output schema also admits the HTTP API's error object: a tool whose call the
// API refuses (a missing container, a quota) answers with that object and isError.
constexpr std::string_view kApiErrorSchema = R"({
  "type": "object",
  "properties": {
    "type": {"const": "error"},
    "error": {"type": "object", "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
              "required": ["type", "message"]}
  },
  "required": ["type", "error"]
})";

constexpr std::string_view kContainerArg =
    R"({"type": "string", "description": "The container id (1-128 characters of [A-Za-z0-9._:-]); default: the owner's container 'default'"})";

constexpr std::string_view kContainerSchema = R"({
  "type": "object",
  "properties": {
    "id": {"type": "string"}, "type": {"const": "container"}, "created_at": {"type": "string"},
    "expires_at": {"type": "string"}, "state": {"enum": ["running", "stopped"]},
    "usage": {"type": "object", "properties": {"bytes": {"type": "integer"}, "files": {"type": "integer"}}}
  },
  "required": ["id", "type", "state"]
})";

constexpr std::string_view kFileSchema = R"({
  "type": "object",
  "properties": {
    "id": {"type": "string"}, "type": {"const": "file"}, "filename": {"type": "string"},
    "mime_type": {"type": "string"}, "size_bytes": {"type": "integer"}, "created_at": {"type": "string"},
    "downloadable": {"type": "boolean"}, "etag": {"type": "string"}
  },
  "required": ["id", "type", "filename", "size_bytes"]
})";

std::string page_schema(std::string_view item) {
  return R"({"type": "object", "properties": {"data": {"type": "array", "items": )" + std::string(item) +
         R"(}, "has_more": {"type": "boolean"}, "first_id": {"type": ["string", "null"]},
            "last_id": {"type": ["string", "null"]}}, "required": ["data", "has_more"]})";
}

std::string tool_error_schema(std::string_view block_type) {
  return R"({"type": "object", "properties": {"type": {"const": ")" + std::string(block_type) +
         R"("}, "error_code": {"type": "string"},
            "detail": {"type": "object", "properties": {"code": {"type": "string"}, "explanation": {"type": "string"}}}},
            "required": ["type", "error_code"]})";
}

// {"type": "object", "anyOf": [...each, the API error]}
json::value output_schema(std::initializer_list<std::string> branches) {
  json::array any_of;
  for (const auto& branch : branches) any_of.push_back(json::parse(branch));
  any_of.push_back(json::parse(kApiErrorSchema));
  return json::object{{"type", "object"}, {"anyOf", std::move(any_of)}};
}

json::object tool(std::string_view name, std::string_view title, std::string_view description,
                  std::string input, json::value output, json::object annotations) {
  annotations["title"] = title;
  return json::object{{"name", name},
                      {"title", title},
                      {"description", description},
                      {"inputSchema", json::parse(input)},
                      {"outputSchema", std::move(output)},
                      {"annotations", std::move(annotations)}};
}

json::array make_tools() {
  const std::string container(kContainerArg);
  json::array tools;
  tools.push_back(tool(
      kBashTool, "Run a bash command",
      "Runs a bash command in the container's sandbox (Linux; the working directory /home/agent/workspace "
      "persists "
      "between calls, uploads are read-only at /mnt/user-data/uploads, files written to "
      "/mnt/user-data/outputs are "
      "returned as resource links). A command that fails is a normal result with its return code. With a "
      "progress "
      "token, the output is sent as progress notifications while the command runs; cancelling the request "
      "kills it.",
      R"({"type": "object", "properties": {
            "command": {"type": "string", "description": "The bash command to run"},
            "timeout": {"type": "integer", "minimum": 1, "maximum": 86400, "description": "Seconds before the command is killed; default: the server's"},
            "restart": {"type": "boolean", "description": "Restart the sandbox and empty the workspace first"},
            "container": )" +
          container + R"(}})",
      output_schema({R"({"type": "object", "properties": {"type": {"const": "bash_code_execution_result"},
                         "stdout": {"type": "string"}, "stderr": {"type": "string"}, "return_code": {"type": "integer"}},
                         "required": ["type", "stdout", "stderr", "return_code"]})",
                     tool_error_schema(tools::kBashErrorType)}),
      {{"readOnlyHint", false}, {"destructiveHint", true}, {"openWorldHint", false}}));
  tools.push_back(tool(
      kEditorTool, "View or edit a file",
      "Views a file or folder (view, with an optional view_range [first, last]), creates a file (create, "
      "with "
      "file_text), replaces a unique string (str_replace, old_str and new_str) or inserts text after a line "
      "(insert, insert_line and insert_text). Relative paths are taken from /home/agent/workspace.",
      R"({"type": "object", "properties": {
            "command": {"enum": ["view", "create", "str_replace", "insert"]},
            "path": {"type": "string"},
            "file_text": {"type": "string"}, "old_str": {"type": "string"}, "new_str": {"type": "string"},
            "insert_line": {"type": "integer", "minimum": 0}, "insert_text": {"type": "string"},
            "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
            "container": )" +
          container + R"(}, "required": ["command", "path"]})",
      output_schema(
          {R"({"type": "object", "properties": {"type": {"enum": ["text_editor_code_execution_view_result",
                         "text_editor_code_execution_create_result", "text_editor_code_execution_str_replace_result"]}},
                         "required": ["type"]})",
           tool_error_schema(tools::kEditorErrorType)}),
      {{"readOnlyHint", false}, {"destructiveHint", true}, {"openWorldHint", false}}));
  tools.push_back(tool(
      kPythonTool, "Run Python in a persistent kernel",
      "Runs Python code in the container's persistent IPython kernel: variables, imports and open files "
      "are kept from one call to the next while the sandbox runs (a stop, restart or crash starts a fresh "
      "kernel). stdout holds the printed output and the last expression's value; an exception is return "
      "code 1 with its traceback in stderr; a timeout interrupts this call only.",
      R"({"type": "object", "properties": {
            "code": {"type": "string", "description": "The Python code to run"},
            "timeout": {"type": "integer", "minimum": 1, "maximum": 86400, "description": "Seconds before the call is interrupted; default: the server's"},
            "restart": {"type": "boolean", "description": "Start a fresh kernel first"},
            "container": )" +
          container + R"(}})",
      output_schema({R"({"type": "object", "properties": {"type": {"const": "code_execution_result"},
                         "stdout": {"type": "string"}, "stderr": {"type": "string"}, "return_code": {"type": "integer"}},
                         "required": ["type", "stdout", "stderr", "return_code"]})",
                     tool_error_schema(kCodeExecutionErrorType)}),
      {{"readOnlyHint", false}, {"destructiveHint", true}, {"openWorldHint", false}}));
  tools.push_back(
      tool("list_containers", "List containers",
           "Lists the owner's containers, oldest first, a page at a time (after_id: the last id of the "
           "previous page).",
           R"({"type": "object", "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                                                           "after_id": {"type": "string"}}})",
           output_schema({page_schema(kContainerSchema)}), {{"readOnlyHint", true}}));
  tools.push_back(tool("list_files", "List files",
                       "Lists a container's uploads and outputs by creation time. prefix is a key prefix "
                       "('outputs/' for the outputs; "
                       "'data/' for uploads under data/); after_id and before_id page through it.",
                       R"({"type": "object", "properties": {"container": )" + container + R"(,
            "prefix": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
            "after_id": {"type": "string"}, "before_id": {"type": "string"}}})",
                       output_schema({page_schema(kFileSchema)}), {{"readOnlyHint", true}}));
  tools.push_back(tool("upload_file", "Upload a file",
                       "Stores a file in the container at a key: 'name.csv' or 'folder/name.csv' lands in "
                       "/mnt/user-data/uploads/, "
                       "'outputs/...' in /mnt/user-data/outputs/. Give the body as text (UTF-8) or as "
                       "content_base64, not both.",
                       R"({"type": "object", "properties": {"container": )" + container + R"(,
            "path": {"type": "string", "description": "The file's key"},
            "text": {"type": "string"}, "content_base64": {"type": "string", "contentEncoding": "base64"}},
            "required": ["path"]})",
                       output_schema({std::string(kFileSchema)}),
                       {{"readOnlyHint", false}, {"destructiveHint", true}}));
  tools.push_back(
      tool("download_file", "Download a file",
           "Returns a file of the container (by file_id, or by its path: the sandbox path such as "
           "/mnt/user-data/outputs/chart.png or the key upload_file takes, such as outputs/chart.png) "
           "with its content: text for UTF-8 text, else base64; a file over 3 MiB is not returned inline "
           "(encoding 'link': a resource link, and 'download', the Files API path that serves it).",
           R"({"type": "object", "properties": {"container": )" + container + R"(,
            "file_id": {"type": "string"}, "path": {"type": "string"}}})",
           output_schema({R"({"type": "object", "properties": {"file": )" + std::string(kFileSchema) + R"(,
                         "encoding": {"enum": ["text", "base64", "link"]}, "content": {"type": "string"},
                         "download": {"type": "string"}},
                         "required": ["file", "encoding"]})"}),
           {{"readOnlyHint", true}}));
  tools.push_back(tool("delete_file", "Delete a file", "Deletes one file of the container by its id.",
                       R"({"type": "object", "properties": {"container": )" + container +
                           R"(, "file_id": {"type": "string"}}, "required": ["file_id"]})",
                       output_schema({R"({"type": "object", "properties": {"id": {"type": "string"},
                                          "type": {"const": "file_deleted"}}, "required": ["id", "type"]})"}),
                       {{"readOnlyHint", false}, {"destructiveHint", true}, {"idempotentHint", true}}));
  tools.push_back(tool(
      "stop_container", "Stop a container",
      "Stops the container's sandbox (running commands end); its files are kept.",
      R"({"type": "object", "properties": {"container": )" + container + R"(}, "required": ["container"]})",
      output_schema({std::string(kContainerSchema)}),
      {{"readOnlyHint", false}, {"destructiveHint", true}, {"idempotentHint", true}}));
  tools.push_back(tool(
      "delete_container", "Delete a container", "Deletes the container: its sandbox and every file in it.",
      R"({"type": "object", "properties": {"container": )" + container + R"(}, "required": ["container"]})",
      output_schema({R"({"type": "object", "properties": {"id": {"type": "string"},
                                          "type": {"const": "container_deleted"}}, "required": ["id", "type"]})"}),
      {{"readOnlyHint", false}, {"destructiveHint", true}, {"idempotentHint", true}}));
  return tools;
}

// --- results ---------------------------------------------------------------------
json::object text_block(std::string text) {
  return json::object{{"type", "text"}, {"text", to_valid_utf8(text)}};
}

// A tool's answer: the object as structuredContent, and the content blocks.
json::object call_result(json::object structured, json::array content, bool is_error) {
  json::object out{{"content", std::move(content)}, {"structuredContent", std::move(structured)}};
  if (is_error) out["isError"] = true;
  return out;
}

// The serialised object as the text block (what a client without structured output reads).
json::object json_result(json::object structured) {
  json::array content{text_block(json::serialize(structured))};
  return call_result(std::move(structured), std::move(content), false);
}

// The HTTP API's error response for a call it refused, as the tool's error result.
json::object api_error_result(const ApiError& error) {
  json::object structured{
      {"type", "error"},
      {"error", {{"type", messages::anthropic_error(error.kind).type}, {"message", error.message}}}};
  json::array content{text_block(error.message)};
  return call_result(std::move(structured), std::move(content), true);
}

bool is_error_block(const json::object& block) {
  auto* type = block.if_contains("type");
  return type && type->is_string() && type->as_string().ends_with("_tool_result_error");
}

std::string error_block_text(const json::object& block) {
  if (auto* detail = block.if_contains("detail"); detail && detail->is_object())
    if (auto* explanation = detail->as_object().if_contains("explanation");
        explanation && explanation->is_string())
      return std::string(explanation->as_string());
  return std::string(block.at("error_code").as_string());
}

std::string bash_text(const json::object& result) {
  std::string text(result.at("stdout").as_string());
  if (!text.empty() && text.back() != '\n') text += '\n';
  if (std::string_view err = result.at("stderr").as_string(); !err.empty()) {
    text += "[stderr]\n";
    text += err;
    if (text.back() != '\n') text += '\n';
  }
  text += "[return code " + json::serialize(result.at("return_code")) + "]";
  return text;
}

std::string editor_text(const json::object& result, std::string_view path) {
  std::string_view type = result.at("type").as_string();
  if (type == "text_editor_code_execution_view_result") return std::string(result.at("content").as_string());
  if (type == "text_editor_code_execution_create_result")
    return (result.at("is_file_update").as_bool() ? "Updated " : "Created ") + std::string(path);
  std::string text;
  if (auto* lines = result.if_contains("lines"); lines && lines->is_array())
    for (const auto& line : lines->as_array())
      if (line.is_string()) text += std::string(line.as_string()) + "\n";
  return text.empty() ? "Edited " + std::string(path) : text;
}

// --- arguments -------------------------------------------------------------------
std::optional<std::string> string_arg(const json::object& args, std::string_view key) {
  auto* value = args.if_contains(key);
  if (!value || !value->is_string()) return std::nullopt;
  return std::string(value->as_string());
}

// Refuses keys the tool does not take and values of the wrong type, as the HTTP API's 400.
Result<void> check_args(const json::object& args,
                        std::initializer_list<std::pair<std::string_view, json::kind>> allowed) {
  for (const auto& [key, value] : args) {
    auto it = std::find_if(allowed.begin(), allowed.end(),
                           [&key](const auto& entry) { return entry.first == key; });
    if (it == allowed.end()) return ApiError::invalid_request("Unknown argument '" + std::string(key) + "'");
    const bool integer = it->second == json::kind::int64 && (value.is_int64() || value.is_uint64());
    if (value.kind() != it->second && !integer)
      return ApiError::invalid_request("'" + std::string(key) + "' must be " +
                                       (it->second == json::kind::string ? "a string" : "an integer"));
  }
  return {};
}

Result<size_t> limit_arg(const json::object& args) {
  auto* value = args.if_contains("limit");
  if (!value) return size_t{20};
  const int64_t n = value->is_int64() ? value->as_int64() : value->is_uint64() ? 1001 : 0;
  if (n < 1 || n > 1000) return ApiError::invalid_request("'limit' must be an integer from 1 to 1000");
  return static_cast<size_t>(n);
}

std::string container_arg(const json::object& args) {
  return string_arg(args, "container").value_or(ContainerService::default_id());
}

// --- the outputs a command wrote -------------------------------------------------
json::object resource_link(const Container& container, const store::FileRecord& record) {
  const std::string name = to_valid_utf8(record.path.substr(record.path.rfind('/') + 1));
  return json::object{{"type", "resource_link"},
                      {"uri", mcp_file_uri(container.id, record.path)},
                      {"name", name},
                      {"title", to_valid_utf8(record.path)},
                      {"mimeType", record.mime.empty() ? "application/octet-stream" : record.mime},
                      {"size", record.size}};
}

// The outputs a command wrote, as its result lists them by file id (the index sync
// after every command finds them): their records, read on the blocking pool only when
// there are any, so a command that writes none costs no walk and no thread hop here.
asio::awaitable<std::vector<store::FileRecord>> outputs_listed_in(ApiContext& api, Container& container,
                                                                  const json::object& result) {
  std::vector<std::string> paths;
  if (auto* content = result.if_contains("content"); content && content->is_array())
    for (const auto& block : content->as_array()) {
      auto* file_id = block.is_object() ? block.as_object().if_contains("file_id") : nullptr;
      if (!file_id || !file_id->is_string() || paths.size() >= kMaxOutputLinks) continue;
      if (auto path = store::path_for_file_id(file_id->as_string())) paths.push_back(std::move(*path));
    }
  if (paths.empty()) co_return std::vector<store::FileRecord>{};
  auto stat_all = [&api, &container, paths = std::move(paths)] {
    std::vector<store::FileRecord> written;
    for (const auto& path : paths)
      if (auto record = api.files.stat_file(container.storage, container.paths, path))
        written.push_back(std::move(*record));
    return written;
  };
  co_return co_await run_blocking(std::move(stat_all));
}

// --- the tools -------------------------------------------------------------------
asio::awaitable<json::object> call_code_tool(ApiContext& api, const std::string& owner, int nesting_depth,
                                             std::string_view name, json::object args,
                                             McpCallOptions& options) {
  std::string container_id = container_arg(args);
  if (auto* value = args.if_contains("container"); value && !value->is_string())
    co_return api_error_result(ApiError::invalid_request("'container' must be a string"));
  args.erase("container");
  auto container = co_await api.containers.lifecycle().async_open(owner, container_id, /*create=*/true);
  if (!container) co_return api_error_result(container.error());
  auto content = co_await run_sub_tool(api, *container, name, args, options.cancellation, nesting_depth,
                                       options.on_output, options.on_notice);
  if (!content) {  // refused by capacity: the block /messages shows the model
    auto block = tools::tool_error(name == kEditorTool   ? tools::kEditorErrorType
                                   : name == kPythonTool ? kCodeExecutionErrorType
                                                         : tools::kBashErrorType,
                                   "too_many_requests", content.error().message, true);
    json::array text{text_block(content.error().message)};
    co_return call_result(std::move(block), std::move(text), true);
  }
  if (is_error_block(*content)) {
    json::array text{text_block(error_block_text(*content))};
    co_return call_result(std::move(*content), std::move(text), true);
  }
  json::array blocks;
  if (name == kBashTool || name == kPythonTool) {
    blocks.push_back(text_block(bash_text(*content)));
    for (const auto& record : co_await outputs_listed_in(api, **container, *content))
      blocks.push_back(resource_link(**container, record));
  } else {
    blocks.push_back(text_block(editor_text(*content, string_arg(args, "path").value_or(""))));
  }
  co_return call_result(std::move(*content), std::move(blocks), false);
}

// An existing container of the owner's, its files local (restored from the bucket when
// need be).
asio::awaitable<Result<std::shared_ptr<Container>>> existing_container(ApiContext& api, RequestContext& ctx,
                                                                       const json::object& args) {
  ContainerFiles files(api);
  auto container = co_await files.open_ready(ctx.owner, container_arg(args), /*create=*/false);
  if (container) api.containers.lifecycle().touch(**container);
  co_return container;
}

bool is_text_type(std::string_view mime) {
  if (mime.starts_with("text/")) return true;
  for (std::string_view type :
       {"application/json", "application/xml", "application/javascript", "application/x-sh",
        "application/x-yaml", "application/yaml", "image/svg+xml"})
    if (mime.starts_with(type)) return true;
  return mime.find("+json") != std::string_view::npos || mime.find("+xml") != std::string_view::npos;
}

// The size of `text` as a JSON string's content (escapes counted: a control byte is six).
uint64_t json_escaped_size(std::string_view text) {
  uint64_t size = 0;
  for (unsigned char c : text) {
    if (c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f')
      size += 2;
    else if (c < 0x20)
      size += 6;
    else
      size += 1;
  }
  return size;
}

// A file as a message carries it: as text (UTF-8 text whose JSON form is no larger than
// its base64), as base64 (encoded once, whichever blocks carry it), or, beyond
// kInlineFileLimit, not at all: a link, and the Files API's download.
struct InlineFile {
  enum class Form { kText, kBase64, kLink };
  store::FileRecord record;
  Form form = Form::kLink;
  std::string content;  // the text or the base64; empty for a link
};

const char* form_name(InlineFile::Form form) {
  return form == InlineFile::Form::kText ? "text" : form == InlineFile::Form::kBase64 ? "base64" : "link";
}

// Where the Files API serves the file (with the owner's token).
std::string download_path(const Container& container, const store::FileRecord& record) {
  return "/api/gpt/v1/files/" + store::file_id_for_path(record.path) +
         "/content?scope_id=" + percent_encode(container.id, false);
}

std::string too_large_to_inline(const Container& container, const store::FileRecord& record) {
  return to_valid_utf8(record.path) + " is " + std::to_string(record.size) + " bytes, more than the " +
         std::to_string(kInlineFileLimit) + " a message carries: download it from the Files API, GET " +
         download_path(container, record);
}

asio::awaitable<Result<InlineFile>> inline_file(ApiContext& api, Container& container,
                                                const std::string& id) {
  auto record = co_await find_file(api, container, id);
  if (!record) co_return record.error();
  // The same files may be downloaded as through the Files API (a thread's container
  // follows the organisation's settings whichever door is used).
  ContainerFiles files(api);
  const DownloadRule rule = co_await files.download_rule(container);
  if (!rule.allows(record->path)) co_return rule.refusal(record->path);
  InlineFile file{std::move(*record)};
  if (file.record.size > kInlineFileLimit) co_return file;
  auto body = co_await files.read_bytes(container, file.record, kInlineFileLimit);
  if (!body) {
    // Grown past the limit since its record was made: a link too.
    if (body.error().kind == ErrorKind::too_large) co_return file;
    co_return body.error();
  }
  if (is_text_type(file.record.mime) && is_valid_utf8(*body) &&
      json_escaped_size(*body) <= (body->size() + 2) / 3 * 4) {
    file.form = InlineFile::Form::kText;
    file.content = std::move(*body);
  } else {
    file.form = InlineFile::Form::kBase64;
    file.content = base64_encode(*body);
  }
  co_return file;
}

// resources/read's {uri, mimeType, text | blob}; a file too large to carry is refused
// (413) with where to download it.
Result<json::object> resource_contents(const Container& container, InlineFile file) {
  if (file.form == InlineFile::Form::kLink)
    return ApiError::too_large(too_large_to_inline(container, file.record));
  json::object out{{"uri", mcp_file_uri(container.id, file.record.path)},
                   {"mimeType", file.record.mime.empty() ? "application/octet-stream" : file.record.mime}};
  out[file.form == InlineFile::Form::kText ? "text" : "blob"] = std::move(file.content);
  return out;
}

asio::awaitable<json::object> call_file_tool(ApiContext& api, RequestContext& ctx, std::string_view name,
                                             const json::object& args) {
  using K = json::kind;
  if (name == "list_containers") {
    if (auto ok = check_args(args, {{"limit", K::int64}, {"after_id", K::string}}); !ok)
      co_return api_error_result(ok.error());
    auto limit = limit_arg(args);
    if (!limit) co_return api_error_result(limit.error());
    co_return json_result(
        co_await list_containers_page(api, ctx, *limit, string_arg(args, "after_id").value_or("")));
  }
  if (name == "list_files") {
    if (auto ok = check_args(args, {{"container", K::string},
                                    {"prefix", K::string},
                                    {"limit", K::int64},
                                    {"after_id", K::string},
                                    {"before_id", K::string}});
        !ok)
      co_return api_error_result(ok.error());
    auto limit = limit_arg(args);
    if (!limit) co_return api_error_result(limit.error());
    auto container = co_await existing_container(api, ctx, args);
    if (!container) co_return api_error_result(container.error());
    FileListQuery query{string_arg(args, "prefix").value_or(""), *limit, string_arg(args, "after_id"),
                        string_arg(args, "before_id")};
    auto page = co_await list_files_page(api, **container, query);
    if (!page) co_return api_error_result(page.error());
    co_return json_result(std::move(*page));
  }
  if (name == "upload_file") {
    if (auto ok = check_args(args, {{"container", K::string},
                                    {"path", K::string},
                                    {"text", K::string},
                                    {"content_base64", K::string}});
        !ok)
      co_return api_error_result(ok.error());
    auto key = string_arg(args, "path");
    auto text = string_arg(args, "text");
    auto encoded = string_arg(args, "content_base64");
    if (!key) co_return api_error_result(ApiError::invalid_request("'path' (the file's key) is required"));
    if (text.has_value() == encoded.has_value())
      co_return api_error_result(
          ApiError::invalid_request("Give exactly one of 'text' and 'content_base64'"));
    std::optional<std::string> body = text;
    if (encoded) body = base64_decode(*encoded);
    if (!body) co_return api_error_result(ApiError::invalid_request("'content_base64' is not valid base64"));
    ContainerFiles files(api);
    auto container = co_await files.open_ready(ctx.owner, container_arg(args), /*create=*/true);
    if (container) api.containers.lifecycle().touch(**container);
    if (!container) co_return api_error_result(container.error());
    auto record = co_await files.store_bytes(**container, *key, *body);
    if (!record) co_return api_error_result(record.error());
    const DownloadRule rule = co_await files.download_rule(**container);
    co_return json_result(file_object((*container)->id, *record, rule));
  }
  if (name == "download_file") {
    if (auto ok = check_args(args, {{"container", K::string}, {"file_id", K::string}, {"path", K::string}});
        !ok)
      co_return api_error_result(ok.error());
    auto id = string_arg(args, "file_id");
    auto path = string_arg(args, "path");
    if (id.has_value() == path.has_value())
      co_return api_error_result(ApiError::invalid_request("Give exactly one of 'file_id' and 'path'"));
    // A sandbox path (/mnt/user-data/outputs/x.csv), or the key upload_file and list_files
    // name files by (outputs/x.csv; data.csv is an upload).
    if (path)
      id = store::file_id_for_path(path->starts_with('/') ? *path : store::sandbox_path_for_key(*path));
    auto container = co_await existing_container(api, ctx, args);
    if (!container) co_return api_error_result(container.error());
    auto file = co_await inline_file(api, **container, *id);
    if (!file) {
      // An upload is there for code in the sandbox to read, not to be downloaded: say
      // so, and how to reach it, rather than a bare refusal.
      if (file.error().kind == ErrorKind::forbidden)
        if (auto sandbox_path = store::path_for_file_id(*id);
            sandbox_path && sandbox_path->starts_with(std::string(kUploadsMount) + "/"))
          co_return api_error_result(ApiError::permission(
              to_valid_utf8(*sandbox_path) + " is an uploaded file: " + file.error().message +
              ". Code in the sandbox reads it at that path (bash_code_execution, e.g. cat or cp it into "
              "/mnt/user-data/outputs/ to download a copy)"));
      co_return api_error_result(file.error());
    }
    ContainerFiles files(api);
    const DownloadRule rule = co_await files.download_rule(**container);
    // The content once, in structuredContent; the content blocks link to the file.
    json::object structured{{"file", file_object((*container)->id, file->record, rule)},
                            {"encoding", form_name(file->form)}};
    std::string summary = to_valid_utf8(file->record.path) + " (" + file->record.mime + ", " +
                          std::to_string(file->record.size) + " bytes)";
    if (file->form == InlineFile::Form::kLink) {
      structured["download"] = download_path(**container, file->record);
      summary = too_large_to_inline(**container, file->record);
    } else {
      structured["content"] = std::move(file->content);
    }
    json::array content{text_block(summary), resource_link(**container, file->record)};
    co_return call_result(std::move(structured), std::move(content), false);
  }
  if (name == "delete_file") {
    if (auto ok = check_args(args, {{"container", K::string}, {"file_id", K::string}}); !ok)
      co_return api_error_result(ok.error());
    auto id = string_arg(args, "file_id");
    if (!id) co_return api_error_result(ApiError::invalid_request("'file_id' is required"));
    auto container = co_await existing_container(api, ctx, args);
    if (!container) co_return api_error_result(container.error());
    auto deleted = co_await delete_file(api, **container, *id);
    if (!deleted) co_return api_error_result(deleted.error());
    co_return json_result(std::move(*deleted));
  }
  // stop_container, delete_container: the container is named, never a default.
  if (auto ok = check_args(args, {{"container", K::string}}); !ok) co_return api_error_result(ok.error());
  auto id = string_arg(args, "container");
  if (!id) co_return api_error_result(ApiError::invalid_request("'container' is required"));
  auto container = co_await api.containers.lifecycle().async_open(ctx.owner, *id, /*create=*/false);
  if (!container) co_return api_error_result(container.error());
  if (name == "stop_container") {
    co_await api.containers.lifecycle().stop(*container);
    co_return json_result(co_await describe_container(api.containers, **container));
  }
  co_await api.containers.lifecycle().remove(*container);
  co_return json_result(json::object{{"id", (*container)->id}, {"type", "container_deleted"}});
}

// The resources/list cursor: where the next page starts (opaque to the client).
struct ResourceCursor {
  std::string after_container;            // the containers listing resumes after this id ("" first)
  std::optional<std::string> after_file;  // within the first container of that listing
};

std::string encode_cursor(const ResourceCursor& cursor) {
  json::object out{{"c", cursor.after_container}};
  if (cursor.after_file) out["f"] = *cursor.after_file;
  return store::base64url_encode(json::serialize(out));
}

Result<ResourceCursor> decode_cursor(std::string_view text) {
  auto bad = ApiError::invalid_request("Invalid cursor");
  auto raw = store::base64url_decode(text);
  if (!raw) return bad;
  boost::system::error_code ec;
  auto value = json::parse(*raw, ec);
  if (ec || !value.is_object()) return bad;
  auto* after = value.as_object().if_contains("c");
  if (!after || !after->is_string()) return bad;
  ResourceCursor cursor{std::string(after->as_string()), std::nullopt};
  if (auto* file = value.as_object().if_contains("f")) {
    if (!file->is_string()) return bad;
    cursor.after_file = std::string(file->as_string());
  }
  return cursor;
}

}  // namespace

const json::array& mcp_tools() {
  static const json::array tools = make_tools();
  return tools;
}

bool mcp_tool_streams(std::string_view name) { return name == kBashTool; }

bool mcp_tool_may_run_long(std::string_view name) { return name == kBashTool || name == kPythonTool; }

std::string mcp_file_uri(std::string_view container, std::string_view sandbox_path) {
  if (!sandbox_path.empty() && sandbox_path.front() == '/') sandbox_path.remove_prefix(1);
  return std::string(kUriPrefix) + percent_encode(container, false) + "/files/" +
         percent_encode(sandbox_path, true);
}

asio::awaitable<Result<json::object>> mcp_call_tool(ApiContext& api, RequestContext& ctx, json::object params,
                                                    McpCallOptions options) {
  auto* name_value = params.if_contains("name");
  if (!name_value || !name_value->is_string())
    co_return ApiError::invalid_request("tools/call needs a tool 'name'");
  const std::string name(name_value->as_string());
  json::object args(params.storage());  // moved, not copied: it stays charged to the owner
  if (auto* value = params.if_contains("arguments"); value && !value->is_null()) {
    if (!value->is_object()) co_return ApiError::invalid_request("'arguments' must be an object");
    args = std::move(value->as_object());
  }
  const auto& tools = mcp_tools();
  const bool known = std::any_of(tools.begin(), tools.end(), [&name](const json::value& t) {
    return t.as_object().at("name").as_string() == name;
  });
  if (!known) co_return ApiError::invalid_request("Unknown tool: " + name.substr(0, 200));
  if (name == kBashTool || name == kEditorTool || name == kPythonTool) {
    const SandboxCaller* caller = sandbox_caller(ctx);
    co_return co_await call_code_tool(api, ctx.owner, caller ? caller->nesting_depth : 0, name,
                                      std::move(args), options);
  }
  co_return co_await call_file_tool(api, ctx, name, args);
}

asio::awaitable<Result<json::object>> mcp_call_long_tool(ApiContext& api, std::string owner,
                                                         int nesting_depth, json::object params,
                                                         McpCallOptions options) {
  auto* name_value = params.if_contains("name");
  if (!name_value || !name_value->is_string() || !mcp_tool_may_run_long(name_value->as_string()))
    co_return ApiError::invalid_request("a task runs bash_code_execution or code_execution");
  const std::string name(name_value->as_string());
  json::object args;
  if (auto* value = params.if_contains("arguments"); value && !value->is_null()) {
    if (!value->is_object()) co_return ApiError::invalid_request("'arguments' must be an object");
    args = std::move(value->as_object());
  }
  co_return co_await call_code_tool(api, owner, nesting_depth, name, std::move(args), options);
}

int mcp_nesting_depth(const RequestContext& ctx) {
  const SandboxCaller* caller = sandbox_caller(ctx);
  return caller ? caller->nesting_depth : 0;
}

asio::awaitable<Result<json::object>> mcp_list_resources(ApiContext& api, RequestContext& ctx,
                                                         const json::object& params) {
  ResourceCursor cursor;
  if (auto* value = params.if_contains("cursor"); value && !value->is_null()) {
    if (!value->is_string()) co_return ApiError::invalid_request("Invalid cursor");
    auto decoded = decode_cursor(value->as_string());
    if (!decoded) co_return decoded.error();
    cursor = std::move(*decoded);
  }
  json::array resources;
  std::optional<ResourceCursor> next;
  auto records = co_await api.containers.lifecycle().async_list(ctx.owner, kContainersPerResourcePage + 1,
                                                                cursor.after_container);
  const bool more_containers = records.size() > kContainersPerResourcePage;
  if (more_containers) records.pop_back();
  std::string previous = cursor.after_container;
  for (size_t i = 0; i < records.size() && !next; ++i) {
    ContainerFiles files(api);
    auto container = co_await files.open_ready(ctx.owner, records[i].id, /*create=*/false);
    if (container) {
      FileListQuery query{"", kResourcesPerPage - resources.size(), i == 0 ? cursor.after_file : std::nullopt,
                          std::nullopt};
      auto page = co_await list_files_page(api, **container, query);
      if (!page) co_return page.error();
      for (auto& file : page->at("data").as_array()) {
        auto& object = file.as_object();
        auto path = store::path_for_file_id(object.at("id").as_string());
        if (!path) continue;
        resources.push_back(json::object{{"uri", mcp_file_uri(records[i].id, *path)},
                                         {"name", object.at("filename")},
                                         {"title", to_valid_utf8(*path)},
                                         {"description", "In container " + records[i].id},
                                         {"mimeType", object.at("mime_type")},
                                         {"size", object.at("size_bytes")}});
      }
      if (page->at("has_more").as_bool())
        next = ResourceCursor{previous, std::string(page->at("last_id").as_string())};
      else if (resources.size() >= kResourcesPerPage && (i + 1 < records.size() || more_containers))
        next = ResourceCursor{records[i].id, std::nullopt};
    }
    previous = records[i].id;
  }
  if (!next && more_containers) next = ResourceCursor{previous, std::nullopt};
  json::object out{{"resources", std::move(resources)}};
  if (next) out["nextCursor"] = encode_cursor(*next);
  co_return out;
}

asio::awaitable<Result<json::object>> mcp_complete(ApiContext& api, RequestContext& ctx,
                                                   const json::object& params) {
  constexpr size_t kMaxValues = 100;  // the protocol's cap on one answer
  const auto* ref = params.if_contains("ref");
  const auto* argument = params.if_contains("argument");
  if (!ref || !ref->is_object() || !argument || !argument->is_object())
    co_return ApiError::invalid_request("completion/complete needs a 'ref' and an 'argument'");
  const auto* type = ref->as_object().if_contains("type");
  const auto* uri = ref->as_object().if_contains("uri");
  const std::string template_uri = std::string(kUriPrefix) + "{container}/files/{+path}";
  if (!type || *type != "ref/resource" || !uri || !uri->is_string() || uri->as_string() != template_uri)
    co_return ApiError::invalid_request("Completions are offered for the resource template " + template_uri +
                                        " only");
  const auto* name = argument->as_object().if_contains("name");
  const auto* value = argument->as_object().if_contains("value");
  if (!name || !name->is_string() || !value || !value->is_string())
    co_return ApiError::invalid_request("'argument' needs a string 'name' and 'value'");
  const std::string typed(value->as_string());
  json::array values;
  bool more = false;
  auto add = [&](std::string candidate) {
    if (!candidate.starts_with(typed)) return;
    if (values.size() == kMaxValues) {
      more = true;
      return;
    }
    values.emplace_back(to_valid_utf8(candidate));
  };
  if (name->as_string() == "container") {
    // The owner's containers (a page of them: the rest by typing more of the id).
    for (auto& record : co_await api.containers.lifecycle().async_list(ctx.owner, 1000, "")) add(record.id);
  } else if (name->as_string() == "path") {
    // The files of the container already chosen (context.arguments.container, else the
    // default one), their paths as the template takes them (no leading '/').
    std::string container_id = ContainerService::default_id();
    if (const auto* context = params.if_contains("context"); context && context->is_object())
      if (const auto* arguments = context->as_object().if_contains("arguments");
          arguments && arguments->is_object())
        if (const auto* chosen = arguments->as_object().if_contains("container");
            chosen && chosen->is_string())
          container_id = std::string(chosen->as_string());
    ContainerFiles files(api);
    auto container = co_await files.open_ready(ctx.owner, container_id, /*create=*/false);
    if (container) {
      FileListQuery query{store::key_for_sandbox_path("/" + typed).value_or(""), 1000, std::nullopt,
                          std::nullopt};
      auto page = co_await list_files_page(api, **container, query);
      if (!page) co_return page.error();
      for (auto& file : page->at("data").as_array())
        if (auto path = store::path_for_file_id(file.as_object().at("id").as_string())) add(path->substr(1));
      more = more || page->at("has_more").as_bool();
    }
  } else {
    co_return ApiError::invalid_request("The template's arguments are 'container' and 'path'");
  }
  json::object completion{{"values", std::move(values)}, {"hasMore", more}};
  co_return json::object{{"completion", std::move(completion)}};
}

std::string mcp_container_of_request(std::string_view method, const json::object& params) {
  if (method == "resources/read") {
    const auto* uri = params.if_contains("uri");
    if (!uri || !uri->is_string() || !uri->as_string().starts_with(kUriPrefix)) return "";
    std::string_view rest = std::string_view(uri->as_string()).substr(kUriPrefix.size());
    std::string container_id;
    const auto slash = rest.find("/files/");
    if (slash == std::string_view::npos || !server::percent_decode(rest.substr(0, slash), container_id))
      return "";
    return container_id;
  }
  if (method == "tasks/get" || method == "tasks/cancel" || method == "tasks/update") {
    // A task runs (and is kept) where its container is held: its id names the container.
    const auto* task_id = params.if_contains("taskId");
    return task_id && task_id->is_string() ? service::ToolTasks::container_of(task_id->as_string()) : "";
  }
  if (method == "subscriptions/listen") return mcp_container_of_listen(params);
  if (method != "tools/call") return "";
  const auto* name = params.if_contains("name");
  const auto* args = params.if_contains("arguments");
  if (!name || !name->is_string() || name->as_string() == "list_containers") return "";
  static const json::object kNone;
  const json::object& arguments = args && args->is_object() ? args->as_object() : kNone;
  if (name->as_string() == "stop_container" || name->as_string() == "delete_container") {
    const auto* container = arguments.if_contains("container");
    return container && container->is_string() ? std::string(container->as_string()) : std::string();
  }
  const auto* container = arguments.if_contains("container");
  if (container && !container->is_null() && !container->is_string()) return "";
  return container_arg(arguments);
}

json::object mcp_resource_templates() {
  return json::object{
      {"resourceTemplates",
       json::array{
           json::object{{"uriTemplate", std::string(kUriPrefix) + "{container}/files/{+path}"},
                        {"name", "container-file"},
                        {"title", "A file of a container"},
                        {"description",
                         "A file of one of your containers by its sandbox path without the leading '/', e.g. "
                         "sandboxd://containers/default/files/mnt/user-data/outputs/report.csv"}}}}};
}

asio::awaitable<Result<json::object>> mcp_read_resource(ApiContext& api, RequestContext& ctx,
                                                        const json::object& params) {
  auto* uri_value = params.if_contains("uri");
  if (!uri_value || !uri_value->is_string())
    co_return ApiError::invalid_request("resources/read needs a 'uri'");
  const std::string uri(uri_value->as_string());
  auto not_found = ApiError::not_found("Resource not found: " + to_valid_utf8(uri.substr(0, 300)));
  if (!uri.starts_with(kUriPrefix)) co_return not_found;
  std::string_view rest = std::string_view(uri).substr(kUriPrefix.size());
  const auto slash = rest.find("/files/");
  if (slash == std::string_view::npos) co_return not_found;
  std::string container_id, path;
  const bool decoded = server::percent_decode(rest.substr(0, slash), container_id) &&
                       server::percent_decode(rest.substr(slash + 7), path);
  if (!decoded || !ContainerService::valid_id(container_id)) co_return not_found;
  ContainerFiles files(api);
  auto container = co_await files.open_ready(ctx.owner, container_id, /*create=*/false);
  if (container) api.containers.lifecycle().touch(**container);
  if (!container) co_return container.error();
  auto file = co_await inline_file(api, **container, store::file_id_for_path("/" + path));
  // Named by the URI the client asked for (the file's internal id means nothing to it).
  if (!file && file.error().kind == ErrorKind::not_found) co_return not_found;
  if (!file) co_return file.error();
  auto contents = resource_contents(**container, std::move(*file));
  if (!contents) co_return contents.error();
  co_return json::object{{"contents", json::array{std::move(*contents)}}};
}

}  // namespace sandboxd::api
