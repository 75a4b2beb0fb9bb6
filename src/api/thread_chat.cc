// Workspace thread chat (docs/http-api.md, "Code execution in the Workspace" in
// docs/contract.md): threads an owner creates, lists, renames and deletes; a message posted to a
// thread runs the /messages tool loop with the thread as the container and the stored
// conversation (its last workspace.maxHistoryTurns turns) as the history. Code execution
// is offered when the request uses Skills or asks for it in pgpt.tools, and never while
// features.codeExecution.enabled is false. Files the turn writes to outputs/ become the
// thread's artifacts and come back as zylon-resource blocks, in the stream and in the
// stored answer.

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>
#include <ctime>
#include <map>
#include <mutex>
#include <set>

#include "service/discovery.h"
#include "api/routes.h"
#include "service/store_call.h"
#include "api/thread_chat.h"
#include "service/tool_calls.h"
#include "api/tool_loop_support.h"
#include "base/sandbox_paths.h"
#include "base/utf8.h"
#include "model/sse.h"
#include "model/tool_loop.h"
#include "store/keys.h"
#include "store/thread_store.h"
#include "tools/bash_tool.h"

namespace sandboxd::api {
namespace {

namespace json = boost::json;

constexpr size_t kChatBodyLimit = 1u << 20;
constexpr size_t kMaxContentBytes = 256u << 10;
constexpr size_t kMaxTitleBytes = 200;
constexpr size_t kMaxSkills = 8;
constexpr int64_t kDefaultMaxTokens = 4096;
constexpr std::string_view kResourceBlock = "zylon-resource";

// What the model is told in a thread with code execution: where the user's files are
// and where deliverables go, so that they come back to the user as artifacts.
constexpr const char* kWorkspaceSystem =
    "You are the assistant of a chat workspace. Files the user uploaded are in /mnt/user-data/uploads/. "
    "Save every file the user should get (charts, tables, documents) in /mnt/user-data/outputs/: "
    "each one is shown to the user as an artifact they can preview and download.";

int64_t now_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

// Turns running now, one per thread: a second message waits for the first to finish,
// and a stop request finds the turn's cancellation here.
class RunningTurns {
 public:
  bool claim(const std::string& owner, const std::string& id,
             std::shared_ptr<runtime::Cancellation> cancellation) {
    std::lock_guard lock(mutex_);
    return running_.emplace(std::make_pair(owner, id), std::move(cancellation)).second;
  }
  void release(const std::string& owner, const std::string& id) {
    std::lock_guard lock(mutex_);
    running_.erase({owner, id});
  }
  // Cancels the thread's running turn; false when none runs.
  bool cancel(const std::string& owner, const std::string& id) {
    std::shared_ptr<runtime::Cancellation> cancellation;
    {
      std::lock_guard lock(mutex_);
      auto it = running_.find({owner, id});
      if (it == running_.end()) return false;
      cancellation = it->second;
    }
    cancellation->cancel();  // outside the lock: its callbacks may release other turns
    return true;
  }
  bool running(const std::string& owner, const std::string& id) {
    std::lock_guard lock(mutex_);
    return running_.contains({owner, id});
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<runtime::Cancellation>> running_;
};

struct ChatState {
  store::ThreadStore threads;
  RunningTurns running;
  explicit ChatState(std::shared_ptr<store::db::Database> database) : threads(std::move(database)) {}
};

// ---------------------------------------------------------------------------------
// JSON shapes

json::value parse_stored(const std::string& text) {
  boost::system::error_code ec;
  json::value value = json::parse(text, ec);
  return ec ? json::value(nullptr) : value;
}

json::object thread_json(const store::ThreadRecord& t) {
  return {{"id", t.id},
          {"type", "thread"},
          {"title", t.title},
          {"created_at", ContainerService::format_time(t.created_at)},
          {"updated_at", ContainerService::format_time(t.updated_at)}};
}

json::object message_json(const store::ThreadMessage& m) {
  json::object out{{"id", m.id},
                   {"type", "message"},
                   {"role", m.role},
                   {"content", parse_stored(m.content)},
                   {"created_at", ContainerService::format_time(m.created_at)}};
  json::value extra = parse_stored(m.extra);
  if (extra.is_object())
    for (const auto& [key, value] : extra.as_object()) out[key] = value;
  return out;
}

std::string download_url(const std::string& thread_id, const std::string& sandbox_path) {
  namespace urls = boost::urls;
  urls::encoding_opts opts;
  auto encode = [&](std::string_view s) { return urls::encode(s, urls::unreserved_chars + '/', opts); };
  return "/api/v1/app/thread/" + urls::encode(thread_id, urls::unreserved_chars, opts) +
         "/download-file?path=" + encode(sandbox_path);
}

// The zylon-resource block of an artifact: what the page needs to preview and
// download it (downloads still follow workspace.downloads at download time).
json::object resource_block(const std::string& thread_id, const store::ThreadArtifact& a, bool downloadable) {
  return {{"type", kResourceBlock},
          {"file_id", a.file_id},
          {"filename", a.filename},
          {"mime_type", a.mime},
          {"size_bytes", a.size},
          {"path", a.path},
          {"message_id", a.message_id},
          {"downloadable", downloadable},
          {"download_url", download_url(thread_id, a.path)}};
}

json::object artifact_json(const std::string& thread_id, const store::ThreadArtifact& a, bool downloadable) {
  json::object out = resource_block(thread_id, a, downloadable);
  out["type"] = "artifact";
  out["created_at"] = ContainerService::format_time(a.created_at);
  return out;
}

// A title from the first message: its first line, at most 80 bytes (cut on a UTF-8
// character boundary).
std::string title_from(std::string_view content) {
  while (!content.empty() && (content.front() == ' ' || content.front() == '\n' || content.front() == '\t'))
    content.remove_prefix(1);
  content = content.substr(0, content.find('\n'));
  if (content.size() <= 80) return std::string(content);
  size_t cut = 80;
  while (cut > 0 && (static_cast<unsigned char>(content[cut]) & 0xC0) == 0x80) --cut;
  return std::string(content.substr(0, cut)) + "…";
}

Result<std::string> read_title(const json::object& body) {
  auto* title = body.if_contains("title");
  if (!title || title->is_null()) return std::string();
  if (!title->is_string()) return ApiError::invalid_request("'title' must be a string");
  std::string text(title->as_string());
  if (text.size() > kMaxTitleBytes)
    return ApiError::invalid_request("'title' is longer than " + std::to_string(kMaxTitleBytes) + " bytes");
  for (unsigned char c : text)
    if (c < 0x20 || c == 0x7f) return ApiError::invalid_request("'title' must not hold control characters");
  return text;
}

// ---------------------------------------------------------------------------------
// The request of a turn

struct ChatRequest {
  std::string content;
  json::array skills;
  bool code_execution_requested = false;  // pgpt.tools names code_execution
  // The tool version pgpt.tools asks for (an Anthropic one drops `detail` from error
  // blocks, as /messages does); Zylon's own when it names none.
  std::string code_tool_type = "code_execution_v1";
  bool stream = false;
  std::string model = "default";
  int64_t max_tokens = kDefaultMaxTokens;
};

// The version a pgpt.tools entry names: its type, or the string itself ("" for the bare
// name "code_execution").
std::string requested_version(const json::value& tool) {
  auto version_of = [](std::string_view s) { return s.starts_with("code_execution_") ? std::string(s) : std::string(); };
  if (tool.is_string()) return version_of(tool.as_string());
  auto* type = tool.as_object().if_contains("type");
  return type && type->is_string() ? version_of(type->as_string()) : std::string();
}

bool is_code_execution_tool(const json::value& tool) {
  auto names = [](std::string_view s) {
    return s == "code_execution" || s == "code_execution_v1" || s == "code_execution_20250825" ||
           s == "code_execution_20260120" || s == "code_execution_20260521";
  };
  if (tool.is_string()) return names(tool.as_string());
  if (!tool.is_object()) return false;
  auto* name = tool.as_object().if_contains("name");
  auto* type = tool.as_object().if_contains("type");
  return (name && name->is_string() && names(name->as_string())) || (type && type->is_string() && names(type->as_string()));
}

Result<ChatRequest> parse_chat_request(const json::object& body) {
  ChatRequest request;
  for (const auto& [key, value] : body) {
    if (key == "content") {
      if (!value.is_string() || value.as_string().empty())
        return ApiError::invalid_request("'content' must be a non-empty string");
      if (value.as_string().size() > kMaxContentBytes)
        return ApiError::invalid_request("'content' is longer than " + std::to_string(kMaxContentBytes) + " bytes");
      request.content = std::string(value.as_string());
    } else if (key == "skills") {
      if (value.is_null()) continue;
      if (!value.is_array()) return ApiError::invalid_request("'skills' must be a list of {type, skill_id, version?}");
      if (value.as_array().size() > kMaxSkills)
        return ApiError::invalid_request("'skills' holds at most " + std::to_string(kMaxSkills) + " skills");
      for (size_t i = 0; i < value.as_array().size(); ++i) {
        const auto& skill = value.as_array()[i];
        auto* id = skill.is_object() ? skill.as_object().if_contains("skill_id") : nullptr;
        if (!id || !id->is_string() || id->as_string().empty())
          return ApiError::invalid_request("skills." + std::to_string(i) + ": must be an object with a 'skill_id'");
      }
      request.skills = value.as_array();
    } else if (key == "pgpt") {
      if (value.is_null()) continue;
      if (!value.is_object()) return ApiError::invalid_request("'pgpt' must be an object");
      for (const auto& [pkey, pvalue] : value.as_object()) {
        if (pkey != "tools") return ApiError::invalid_request("pgpt." + std::string(pkey) + ": unknown field");
        if (!pvalue.is_array()) return ApiError::invalid_request("'pgpt.tools' must be a list");
        for (size_t i = 0; i < pvalue.as_array().size(); ++i) {
          if (!is_code_execution_tool(pvalue.as_array()[i]))
            return ApiError::invalid_request("pgpt.tools." + std::to_string(i) +
                                             ": unknown tool; this workspace offers 'code_execution' "
                                             "(\"code_execution\" or {\"name\": \"code_execution\", \"type\": "
                                             "\"code_execution_v1\"})");
          request.code_execution_requested = true;
          if (auto version = requested_version(pvalue.as_array()[i]); !version.empty())
            request.code_tool_type = std::move(version);
        }
      }
    } else if (key == "stream") {
      if (!value.is_bool()) return ApiError::invalid_request("'stream' must be a boolean");
      request.stream = value.as_bool();
    } else if (key == "model") {
      if (!value.is_string() || value.as_string().empty()) return ApiError::invalid_request("'model' must be a non-empty string");
      request.model = std::string(value.as_string());
    } else if (key == "max_tokens") {
      if (!value.is_int64() || value.as_int64() < 1 || value.as_int64() > 1'000'000)
        return ApiError::invalid_request("'max_tokens' must be an integer from 1 to 1000000");
      request.max_tokens = value.as_int64();
    } else {
      return ApiError::invalid_request("Unknown field '" + std::string(key).substr(0, 100) + "'");
    }
  }
  if (request.content.empty()) return ApiError::invalid_request("'content' is required");
  return request;
}

// The stored conversation in upstream terms: the last `max_turns - 1` turns (the new
// message is the last turn). zylon-resource blocks are the workspace's, not the
// model's; without code execution in this turn, earlier code execution steps are left
// out (the model could not be given the tool their blocks belong to).
json::array history_for_upstream(const std::vector<store::ThreadMessage>& stored, int max_turns, bool code_execution) {
  size_t start = stored.size();
  int users = 0;
  while (start > 0 && users < max_turns - 1) {
    --start;
    if (stored[start].role == "user") ++users;
  }
  while (start < stored.size() && stored[start].role != "user") ++start;
  json::array out;
  for (size_t i = start; i < stored.size(); ++i) {
    json::value content = parse_stored(stored[i].content);
    if (content.is_array()) {
      json::array kept;
      for (const auto& block : content.as_array()) {
        if (!block.is_object()) continue;
        std::string_view type = block.as_object().if_contains("type") && block.at("type").is_string()
                                    ? std::string_view(block.at("type").as_string())
                                    : std::string_view();
        if (type == kResourceBlock) continue;
        if (!code_execution && (type == "server_tool_use" || type.ends_with("_code_execution_tool_result"))) continue;
        if (type == "text" && (!block.at("text").is_string() || block.at("text").as_string().empty())) continue;
        kept.push_back(block);
      }
      if (kept.empty()) kept.push_back(json::object{{"type", "text"}, {"text", "(no text)"}});
      content = std::move(kept);
    } else if (!content.is_string()) {
      continue;
    }
    out.push_back(json::object{{"role", stored[i].role}, {"content", std::move(content)}});
  }
  return out;
}

// ---------------------------------------------------------------------------------
// Artifacts: what a turn wrote under outputs/

struct Fingerprint {
  uint64_t size;
  std::string etag;
  int64_t mtime_ns;
  bool operator==(const Fingerprint&) const = default;
};
using OutputsSnapshot = std::map<std::string, Fingerprint>;

// Brings the index in line with the disk (a walk of the container's folders, as a
// listing does) and returns what outputs/ holds.
// The walk runs on the blocking pool (service/discovery.h).
asio::awaitable<OutputsSnapshot> snapshot_outputs(ApiContext& api, Container& container) {
  co_await sync_off_io_thread(api, container);
  const std::string prefix = std::string(kOutputsMount) + "/";
  OutputsSnapshot snapshot;
  auto query = [&api, &container] { return api.containers.metadata().files_of(container.storage); };
  auto records = co_await store_call(api, std::move(query));
  for (auto& record : records)
    if (record.path.rfind(prefix, 0) == 0)
      snapshot.emplace(record.path, Fingerprint{record.size, record.etag, record.mtime_ns});
  co_return snapshot;
}

asio::awaitable<std::vector<store::ThreadArtifact>> changed_outputs(ApiContext& api, Container& container,
                                                                   const OutputsSnapshot& before,
                                                                   const std::string& message_id) {
  std::vector<store::ThreadArtifact> out;
  const std::string prefix = std::string(kOutputsMount) + "/";
  co_await sync_off_io_thread(api, container);
  auto query = [&api, &container] { return api.containers.metadata().files_of(container.storage); };
  auto records = co_await store_call(api, std::move(query));
  for (auto& record : records) {
    if (record.path.rfind(prefix, 0) != 0) continue;
    auto it = before.find(record.path);
    if (it != before.end() && it->second == Fingerprint{record.size, record.etag, record.mtime_ns}) continue;
    store::ThreadArtifact artifact;
    artifact.file_id = store::file_id_for_path(record.path);
    artifact.path = record.path;
    artifact.filename = record.path.substr(record.path.rfind('/') + 1);
    artifact.mime = record.mime;
    artifact.size = record.size;
    artifact.message_id = message_id;
    artifact.created_at = now_seconds();
    out.push_back(std::move(artifact));
  }
  co_return out;
}

// ---------------------------------------------------------------------------------
// A turn

// Everything one turn needs, alive until its stream ends. Its events pass through
// send(): the answer is rebuilt from them as an SDK would, and at the answer's
// message_delta the outputs are compared, the zylon-resource blocks sent and the turn
// stored, before the client learns that the message ended.
class Turn : public model::EventSink {
 public:
  Turn(ApiContext& api, std::shared_ptr<ChatState> state, std::string owner, std::string thread_id,
       std::shared_ptr<runtime::Cancellation> cancellation)
      : cancellation(std::move(cancellation)),
        api_(api),
        state_(std::move(state)),
        owner_(std::move(owner)),
        thread_id_(std::move(thread_id)) {}
  ~Turn() override {
    if (watch) watch->stop();
    release();
  }

  std::shared_ptr<runtime::Cancellation> cancellation;  // a stop request or the client leaving
  std::shared_ptr<Container> container;                 // when code execution is offered
  OutputsSnapshot outputs_before;
  std::unique_ptr<ContainerRunner> runner;
  std::unique_ptr<model::ToolLoop> loop;
  std::shared_ptr<server::DisconnectWatch> watch;
  store::ThreadMessage user;
  std::string request_text;  // the user's message as typed (user.content is its JSON)
  std::string model;

  model::EventSink* client = nullptr;  // the SSE stream, when the client asked for one
  bool stored = false;
  std::optional<ApiError> failure;  // an error event of the loop
  json::object answer;              // the stored assistant message, as answered

  // The turn was stopped (a stop request, or the client closed the stream) before the
  // answer ended: what was said so far is stored, marked stopped, and an open stream
  // ends as a finished one does.
  asio::awaitable<void> finish_stopped() {
    keep_complete_blocks();
    // Named objects, not temporaries in the co_await expressions (GCC 12 miscompiles
    // initializer lists there).
    json::object delta;
    delta["stop_reason"] = nullptr;
    delta["stop_sequence"] = nullptr;
    delta["stopped"] = true;
    json::object usage;
    usage["output_tokens"] = 0;
    json::object message_delta;
    message_delta["type"] = "message_delta";
    message_delta["delta"] = std::move(delta);
    message_delta["usage"] = std::move(usage);
    json::object message_stop;
    message_stop["type"] = "message_stop";
    const bool client_here = co_await finish(message_delta);
    if (client_here) co_await forward("message_stop", message_stop);
  }

  asio::awaitable<bool> send(std::string_view event, const json::object& data) override {
    if (event == "message_start") {
      if (auto* m = data.if_contains("message"); m && m->is_object())
        if (auto* id = m->as_object().if_contains("id"); id && id->is_string()) message_id_ = std::string(id->as_string());
    } else if (event == "content_block_start") {
      if (auto* block = data.if_contains("content_block"); block && block->is_object()) {
        if (is_workspace_block(block->as_object())) {
          // A block of the workspace's own type that the model made up (a file and a
          // download_url of its choosing): artifacts come only from files this turn was
          // seen to write. Its place (the index) is kept with an empty text block, so
          // the stream's numbering stays whole; nothing of it is sent or stored.
          json::object replaced = data;
          replaced["content_block"] = json::object{{"type", "text"}, {"text", ""}};
          content_.push_back(replaced["content_block"]);
          co_return co_await forward(event, replaced);
        }
        content_.push_back(*block);
      }
    } else if (event == "content_block_delta") {
      apply_delta(data);
    } else if (event == "content_block_stop") {
      finish_block(data);
    } else if (event == "message_delta") {
      co_return co_await finish(data);
    } else if (event == "error") {
      std::string type = "api_error", message = "The turn failed";
      if (auto* e = data.if_contains("error"); e && e->is_object()) {
        if (auto* t = e->as_object().if_contains("type"); t && t->is_string()) type = std::string(t->as_string());
        if (auto* m = e->as_object().if_contains("message"); m && m->is_string()) message = std::string(m->as_string());
      }
      auto status = type == "overloaded_error" ? static_cast<http::status>(529)
                    : type == "invalid_request_error" ? http::status::bad_request
                                                      : http::status::bad_gateway;
      failure = ApiError{status, type, message, {}};
    }
    co_return co_await forward(event, data);
  }

 private:
  void release() {
    if (released_) return;
    released_ = true;
    state_->running.release(owner_, thread_id_);
  }

  // A stopped answer keeps only what a later turn can give the model back: a code
  // execution call without its result, or a thinking block without its signature,
  // would make the upstream refuse the conversation.
  void keep_complete_blocks() {
    std::set<std::string> answered;
    for (const auto& block : content_)
      if (auto* id = block.is_object() ? block.as_object().if_contains("tool_use_id") : nullptr;
          id && id->is_string())
        answered.emplace(id->as_string());
    json::array kept;
    for (size_t i = 0; i < content_.size(); ++i) {
      const auto& block = content_[i];
      if (!block.is_object()) continue;
      const auto& b = block.as_object();
      auto* type = b.if_contains("type");
      std::string_view kind =
          type && type->is_string() ? std::string_view(type->as_string()) : std::string_view();
      if (kind == "server_tool_use") {
        auto* id = b.if_contains("id");
        if (partial_json_.contains(static_cast<int64_t>(i)) || !id || !id->is_string() ||
            !answered.contains(std::string(id->as_string())))
          continue;
      }
      if (kind == "thinking") {
        auto* signature = b.if_contains("signature");
        if (!signature || !signature->is_string() || signature->as_string().empty()) continue;
      }
      kept.push_back(block);
    }
    content_ = std::move(kept);
    partial_json_.clear();
  }

  asio::awaitable<bool> forward(std::string_view event, const json::object& data) {
    if (!client) co_return true;
    co_return co_await client->send(event, data);
  }

  static bool is_workspace_block(const json::object& block) {
    auto* type = block.if_contains("type");
    return type && type->is_string() && type->as_string() == kResourceBlock;
  }

  json::object* block_at(const json::object& data) {
    auto* index = data.if_contains("index");
    if (!index || !index->is_int64() || index->as_int64() < 0 || static_cast<size_t>(index->as_int64()) >= content_.size())
      return nullptr;
    auto& block = content_[static_cast<size_t>(index->as_int64())];
    return block.is_object() ? &block.as_object() : nullptr;
  }

  void apply_delta(const json::object& data) {
    auto* block = block_at(data);
    auto* delta = data.if_contains("delta");
    if (!block || !delta || !delta->is_object()) return;
    const auto& d = delta->as_object();
    auto text_of = [&](const char* key) {
      auto* v = d.if_contains(key);
      return v && v->is_string() ? std::string(v->as_string()) : std::string();
    };
    auto append = [&](const char* key, const std::string& text) {
      auto* have = block->if_contains(key);
      block->insert_or_assign(key, (have && have->is_string() ? std::string(have->as_string()) : std::string()) + text);
    };
    std::string type = text_of("type");
    if (type == "text_delta") append("text", text_of("text"));
    else if (type == "thinking_delta") append("thinking", text_of("thinking"));
    else if (type == "signature_delta") block->insert_or_assign("signature", text_of("signature"));
    else if (type == "input_json_delta") partial_json_[data.at("index").as_int64()] += text_of("partial_json");
  }

  void finish_block(const json::object& data) {
    auto* block = block_at(data);
    if (!block) return;
    auto it = partial_json_.find(data.at("index").as_int64());
    if (it == partial_json_.end()) return;
    boost::system::error_code ec;
    json::value input = it->second.empty() ? json::value(json::object{}) : json::parse(it->second, ec);
    if (!ec) block->insert_or_assign("input", std::move(input));
    partial_json_.erase(it);
  }

  // The answer is complete: artifacts, then the stored turn, then the end of the message.
  asio::awaitable<bool> finish(const json::object& message_delta) {
    const auto config = api_.config();
    std::vector<store::ThreadArtifact> artifacts;
    if (container) artifacts = co_await changed_outputs(api_, *container, outputs_before, message_id_);
    bool client_here = true;
    for (const auto& artifact : artifacts) {
      json::object block = resource_block(thread_id_, artifact, config->download_generated);
      const auto index = static_cast<int64_t>(content_.size());
      content_.push_back(block);
      json::object start{{"type", "content_block_start"}, {"index", index}, {"content_block", block}};
      json::object stop{{"type", "content_block_stop"}, {"index", index}};
      if (client_here) client_here = co_await forward("content_block_start", start);
      if (client_here) client_here = co_await forward("content_block_stop", stop);
    }
    json::object extra{{"model", model}};
    json::value container_now;  // {id, expires_at}: answered, not stored (it rolls)
    if (auto* delta = message_delta.if_contains("delta"); delta && delta->is_object()) {
      for (const auto& [key, value] : delta->as_object()) {
        if (key == "container") container_now = value;
        else extra[key] = value;
      }
    }
    if (auto* usage = message_delta.if_contains("usage")) extra["usage"] = *usage;
    if (cancellation->cancelled()) extra["stopped"] = true;
    store::ThreadMessage assistant{message_id_, "assistant", json::serialize(content_), json::serialize(extra),
                                   now_seconds()};
    auto append = [this, &assistant, &artifacts] {
      return state_->threads.append_turn(owner_, thread_id_, user, assistant, artifacts, title_from(request_text));
    };
    stored = co_await store_call(api_, std::move(append));
    release();  // stored: the thread takes its next message, a stop request returns
    if (!stored) failure = ApiError::not_found("Thread not found: " + thread_id_ + " (deleted while it answered)");
    answer = message_json(assistant);
    answer["thread_id"] = thread_id_;
    if (!container_now.is_null()) answer["container"] = container_now;
    if (!client_here) co_return false;
    co_return co_await forward("message_delta", message_delta);
  }

  ApiContext& api_;
  std::shared_ptr<ChatState> state_;
  std::string owner_, thread_id_;
  std::string message_id_ = model::new_message_id();
  json::array content_;
  std::map<int64_t, std::string> partial_json_;
  bool released_ = false;
};

// ---------------------------------------------------------------------------------
// Routes

asio::awaitable<Result<store::ThreadRecord>> find_thread(ApiContext& api, ChatState& state, RequestContext& ctx) {
  auto query = [&state, &ctx] { return state.threads.find(ctx.owner, ctx.params["thread_id"]); };
  auto thread = co_await store_call(api, std::move(query));
  if (!thread) co_return ApiError::not_found("Thread not found: " + ctx.params["thread_id"].substr(0, 200));
  co_return *thread;
}

asio::awaitable<Result<Response>> create_thread(ApiContext& api, ChatState& state, RequestContext& ctx) {
  auto body = co_await ctx.read_body(64 * 1024);
  if (!body) co_return body.error();
  json::object object;
  if (!body->empty()) {
    auto parsed = parse_json_object(*body);
    if (!parsed) co_return parsed.error();
    object = std::move(*parsed);
  }
  for (const auto& [key, value] : object)
    if (key != "title") co_return ApiError::invalid_request("Unknown field '" + std::string(key).substr(0, 100) + "'");
  auto title = read_title(object);
  if (!title) co_return title.error();
  store::ThreadRecord record{ctx.owner, std::string(store::kThreadIdPrefix) + api.containers.new_id().substr(5), *title, now_seconds(), 0, 0};
  record.updated_at = record.created_at;
  auto create = [&api, &state, &ctx, &record]() -> Result<store::ThreadRecord> {
    std::lock_guard creating(api.quotas.creation_mutex());  // the count and the insert together
    auto room = OwnerQuotas::room_for_one_more(state.threads.count(ctx.owner), api.config()->threads_per_owner,
                                               "threads", "quotas.threadsPerOwner", "threads_quota");
    if (!room) return room.error();
    // A thread's turns run in a container of the thread's id: one that could not get
    // its container is refused now, naming the quota, not at its first turn.
    room = OwnerQuotas::room_for_one_more(api.containers.metadata().containers_claimed(ctx.owner),
                                          api.config()->containers_per_owner, "containers (threads included)",
                                          "quotas.containersPerOwner", "containers_quota");
    if (!room) return room.error();
    if (!state.threads.create(record)) return ApiError::internal();
    return *state.threads.find(ctx.owner, record.id);
  };
  auto created = co_await store_call(api, std::move(create));
  if (!created) co_return created.error();
  co_return json_ok(thread_json(*created), http::status::created);
}

asio::awaitable<Result<Response>> list_threads(ApiContext& api, ChatState& state, RequestContext& ctx) {
  auto limit = page_limit(ctx);
  if (!limit) co_return limit.error();
  // `q`: the threads whose title holds it (ignoring case), for the page's search box.
  std::string title_query = ctx.query_value("q").value_or("");
  if (title_query.size() > kMaxTitleBytes)
    co_return ApiError::invalid_request("'q' is longer than " + std::to_string(kMaxTitleBytes) + " bytes");
  if (!is_valid_utf8(title_query)) co_return ApiError::invalid_request("'q' must be UTF-8 text");
  auto query = [&state, &ctx, &limit, &title_query] {
    return state.threads.list(ctx.owner, *limit, ctx.query_value("after_id").value_or(""), title_query);
  };
  auto page = co_await store_call(api, std::move(query));
  json::array data;
  for (const auto& t : page.threads) data.push_back(thread_json(t));
  json::object out{{"data", data}, {"has_more", page.has_more}};
  out["first_id"] = page.threads.empty() ? json::value(nullptr) : json::value(page.threads.front().id);
  out["last_id"] = page.threads.empty() ? json::value(nullptr) : json::value(page.threads.back().id);
  co_return json_ok(out);
}

asio::awaitable<Result<Response>> get_thread(ApiContext& api, ChatState& state, RequestContext& ctx) {
  auto thread = co_await find_thread(api, state, ctx);
  if (!thread) co_return thread.error();
  json::object out = thread_json(*thread);
  json::array messages;
  auto query = [&state, &ctx, &thread] { return state.threads.messages(ctx.owner, thread->id); };
  auto stored = co_await store_call(api, std::move(query));
  for (const auto& m : stored) messages.push_back(message_json(m));
  out["messages"] = std::move(messages);
  co_return json_ok(out);
}

asio::awaitable<Result<Response>> rename_thread(ApiContext& api, ChatState& state, RequestContext& ctx) {
  auto body = co_await ctx.read_body(64 * 1024);
  if (!body) co_return body.error();
  auto object = parse_json_object(*body);
  if (!object) co_return object.error();
  for (const auto& [key, value] : *object)
    if (key != "title") co_return ApiError::invalid_request("Unknown field '" + std::string(key).substr(0, 100) + "'");
  if (!object->contains("title")) co_return ApiError::invalid_request("'title' is required");
  auto title = read_title(*object);
  if (!title) co_return title.error();
  auto rename = [&state, &ctx, &title]() -> std::optional<store::ThreadRecord> {
    if (!state.threads.rename(ctx.owner, ctx.params["thread_id"], *title, now_seconds())) return std::nullopt;
    return state.threads.find(ctx.owner, ctx.params["thread_id"]);
  };
  auto renamed = co_await store_call(api, std::move(rename));
  if (!renamed) co_return ApiError::not_found("Thread not found: " + ctx.params["thread_id"].substr(0, 200));
  co_return json_ok(thread_json(*renamed));
}

asio::awaitable<Result<Response>> delete_thread(ApiContext& api, ChatState& state, RequestContext& ctx) {
  auto thread = co_await find_thread(api, state, ctx);
  if (!thread) co_return thread.error();
  // The container first: a turn running now has its command killed with the sandbox.
  if (auto container = co_await api.containers.async_open(ctx.owner, thread->id, /*create=*/false))
    co_await api.containers.remove(*container);
  auto remove = [&state, &ctx, &thread] { state.threads.remove(ctx.owner, thread->id); };
  co_await store_call(api, std::move(remove));
  co_return json_ok(json::object{{"id", thread->id}, {"type", "thread_deleted"}, {"deleted", true}});
}

asio::awaitable<Result<Response>> list_artifacts(ApiContext& api, ChatState& state, RequestContext& ctx) {
  auto thread = co_await find_thread(api, state, ctx);
  if (!thread) co_return thread.error();
  const bool downloadable = api.config()->download_generated;
  json::array data;
  auto query = [&state, &ctx, &thread] { return state.threads.artifacts(ctx.owner, thread->id); };
  auto artifacts = co_await store_call(api, std::move(query));
  for (const auto& a : artifacts) data.push_back(artifact_json(thread->id, a, downloadable));
  co_return json_ok(json::object{{"data", data}});
}

// Stops the thread's running turn: its command is killed, what was said so far is
// stored marked stopped. Answers once the turn has been stored (bounded: a turn that
// takes longer is still stopping), so a reload right after shows it.
asio::awaitable<Result<Response>> stop_turn(ApiContext& api, ChatState& state, RequestContext& ctx) {
  auto thread = co_await find_thread(api, state, ctx);
  if (!thread) co_return thread.error();
  const bool was_running = state.running.cancel(ctx.owner, thread->id);
  asio::steady_timer pause(co_await asio::this_coro::executor);
  for (int i = 0; was_running && i < 400 && state.running.running(ctx.owner, thread->id); ++i) {
    pause.expires_after(std::chrono::milliseconds(25));
    boost::system::error_code ec;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return json_ok(json::object{{"id", thread->id}, {"type", "thread_turn_stop"}, {"stopped", was_running}});
}

// The thread's files: what the user uploaded and what turns wrote to outputs/, with
// the organisation's download settings for each kind.
asio::awaitable<Result<Response>> list_files(ApiContext& api, ChatState& state, RequestContext& ctx) {
  auto thread = co_await find_thread(api, state, ctx);
  if (!thread) co_return thread.error();
  const auto config = api.config();
  json::array data;
  auto opened = co_await api.containers.async_open(ctx.owner, thread->id, /*create=*/false);
  if (opened) {
    std::shared_ptr<Container> container = *opened;
    co_await sync_off_io_thread(api, *container);
    auto query = [&api, &container] { return api.containers.metadata().files_of(container->storage); };
    auto records = co_await store_call(api, std::move(query));
    const std::string uploads = std::string(kUploadsMount) + "/", outputs = std::string(kOutputsMount) + "/";
    for (const auto& record : records) {
      const bool upload = record.path.starts_with(uploads);
      if (!upload && !record.path.starts_with(outputs)) continue;
      data.push_back(
          json::object{{"type", "thread_file"},
                       {"file_id", store::file_id_for_path(record.path)},
                       {"filename", record.path.substr(record.path.rfind('/') + 1)},
                       {"path", record.path},
                       {"kind", upload ? "upload" : "output"},
                       {"mime_type", record.mime},
                       {"size_bytes", record.size},
                       {"downloadable", upload ? config->download_uploaded : config->download_generated},
                       {"created_at", ContainerService::format_time(record.created_at)}});
    }
  }
  co_return json_ok(json::object{{"data", data}});
}

// The operator's settings the page shows (not secrets).
asio::awaitable<Result<Response>> features(ApiContext& api, ChatState&, RequestContext&) {
  const auto config = api.config();
  co_return json_ok(json::object{
      {"code_execution",
       {{"enabled", config->code_execution_enabled}, {"available", api.containers.code_execution_available()}}},
      {"downloads",
       {{"generated_resources", config->download_generated}, {"uploaded_resources", config->download_uploaded}}},
      {"model", {{"configured", !config->model_base_url.empty() && api.upstream != nullptr}}},
      {"max_upload_bytes", config->max_upload_bytes},
      {"max_history_turns", config->max_history_turns}});
}

asio::awaitable<Result<Response>> post_message(ApiContext& api, std::shared_ptr<ChatState> state,
                                               RequestContext& ctx) {
  auto body = co_await ctx.read_body(kChatBodyLimit);
  if (!body) co_return body.error();
  auto object = parse_json_object(*body);
  if (!object) co_return object.error();
  auto request = parse_chat_request(*object);
  if (!request) co_return request.error();
  auto thread = co_await find_thread(api, *state, ctx);
  if (!thread) co_return thread.error();
  const auto config = api.config();
  if (config->model_base_url.empty() || !api.upstream)
    co_return ApiError::invalid_request("No upstream model is configured: set model.baseUrl in sandboxd's configuration");

  // Seed 000/002: Skills add code execution, pgpt.tools may ask for it, and the
  // Workspace flag removes it either way (ordinary chat goes on).
  const bool code_execution =
      config->code_execution_enabled && (request->code_execution_requested || !request->skills.empty());

  auto cancellation = std::make_shared<runtime::Cancellation>();
  if (!state->running.claim(ctx.owner, thread->id, cancellation))
    co_return ApiError{http::status::too_many_requests, "rate_limit_error",
                       "A message is being answered in this thread; send the next one when it has finished", 1};
  auto turn = std::make_shared<Turn>(api, state, ctx.owner, thread->id, cancellation);
  turn->user = store::ThreadMessage{model::new_message_id(), "user", json::serialize(json::value(request->content)),
                                    "{}", now_seconds()};
  turn->request_text = request->content;
  turn->model = request->model;

  auto history = [&state, &ctx, &thread] { return state->threads.messages(ctx.owner, thread->id); };
  auto stored_messages = co_await store_call(api, std::move(history));
  json::array messages = history_for_upstream(std::move(stored_messages), config->max_history_turns, code_execution);
  messages.push_back(json::object{{"role", "user"}, {"content", request->content}});
  json::object upstream{{"model", request->model},
                        {"max_tokens", request->max_tokens},
                        {"messages", std::move(messages)},
                        {"stream", true}};
  if (code_execution) {
    auto opened = co_await api.containers.async_open(ctx.owner, thread->id, /*create=*/true);
    if (!opened) co_return opened.error();
    turn->container = *opened;
    turn->outputs_before = co_await snapshot_outputs(api, *turn->container);
    upstream["tools"] = json::array{json::object{{"name", "code_execution"}, {"type", request->code_tool_type}}};
    upstream["system"] = kWorkspaceSystem;
    // The Skills seam: container.skills is what /messages takes for Skills (the
    // same shape); the request parser and the loop give them to the sandbox.
    json::object container{{"id", thread->id}};
    if (!request->skills.empty()) container["skills"] = request->skills;
    upstream["container"] = std::move(container);
  }
  auto parsed = model::parse_messages_request(std::move(upstream), &ContainerService::valid_id);
  if (!parsed) co_return parsed.error();
  std::string upstream_model = parsed->model;
  if (auto it = config->model_names.find(parsed->model); it != config->model_names.end()) upstream_model = it->second;

  turn->runner = std::make_unique<ContainerRunner>(api, turn->container, turn->cancellation, /*depth=*/0);
  model::LoopSettings settings = loop_settings(*config);
  settings.stream_execution_output = true;  // the page shows a running command's output
  turn->loop = std::make_unique<model::ToolLoop>(api.upstream, std::move(settings), std::move(*parsed),
                                                 upstream_model, *turn->runner, turn->cancellation);
  turn->watch = server::DisconnectWatch::start(ctx.stream().socket(),
                                               [cancellation = turn->cancellation] { cancellation->cancel(); });
  auto opened = co_await turn->loop->open();
  if (!opened) co_return opened.error();
  if (!request->stream) {
    co_await turn->loop->stream(*turn);
    if (!turn->stored && turn->cancellation->cancelled()) co_await turn->finish_stopped();
    turn->watch->stop();
    if (!turn->stored)
      co_return turn->failure ? *turn->failure : ApiError{http::status::bad_gateway, "api_error", "The turn did not finish", {}};
    co_return json_ok(turn->answer);
  }
  server::StreamResponse response;
  response.header.result(http::status::ok);
  response.header.version(11);
  response.header.set(http::field::content_type, "text/event-stream");
  response.header.set(http::field::cache_control, "no-cache");
  response.produce = [turn](server::ChunkWriter& writer) -> asio::awaitable<void> {
    SseSink sink(writer);
    turn->client = &sink;
    co_await turn->loop->stream(*turn);
    if (!turn->stored && turn->cancellation->cancelled()) co_await turn->finish_stopped();
    turn->client = nullptr;
    turn->watch->stop();
  };
  co_return response;
}

template <typename Fn>
server::Handler with_state(ApiContext& api, std::shared_ptr<ChatState> state, Fn fn) {
  return [&api, state, fn](RequestContext& ctx) { return fn(api, *state, ctx); };
}

}  // namespace

void register_thread_chat_routes(server::HttpServer& http, ApiContext& api,
                                 std::shared_ptr<store::db::Database> database) {
  auto state = std::make_shared<ChatState>(std::move(database));
  api.threads = &state->threads;  // the routes keep `state` alive as long as the server
  const std::string base = "/api/v1/app/thread";
  http.route(http::verb::post, base, "threads.create", with_state(api, state, create_thread));
  http.route(http::verb::get, base, "threads.list", with_state(api, state, list_threads));
  http.route(http::verb::get, base + "/{thread_id}", "threads.get", with_state(api, state, get_thread));
  http.route(http::verb::patch, base + "/{thread_id}", "threads.rename", with_state(api, state, rename_thread));
  http.route(http::verb::delete_, base + "/{thread_id}", "threads.delete", with_state(api, state, delete_thread));
  http.route(http::verb::get, base + "/{thread_id}/artifacts", "threads.artifacts",
             with_state(api, state, list_artifacts));
  http.route(http::verb::get, base + "/{thread_id}/files", "threads.files",
             with_state(api, state, list_files));
  http.route(http::verb::post, base + "/{thread_id}/stop", "threads.stop", with_state(api, state, stop_turn));
  http.route(http::verb::post, base + "/{thread_id}/messages", "threads.message",
             [&api, state](RequestContext& ctx) { return post_message(api, state, ctx); });
  http.route(http::verb::get, "/api/v1/app/features", "workspace.features", with_state(api, state, features));
}

}  // namespace sandboxd::api
