#include "service/workspace_chat.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>
#include <chrono>
#include <ctime>
#include <set>

#include "base/sandbox_paths.h"
#include "messages/error_types.h"
#include "service/discovery.h"
#include "service/store_call.h"
#include "store/keys.h"

namespace sandboxd::service {
namespace {

namespace json = boost::json;

// What the model is told in a thread with code execution: where the user's files are
// and where deliverables go, so that they come back to the user as artifacts.
constexpr const char* kWorkspaceSystem =
    "You are the assistant of a chat workspace. Files the user uploaded are in /mnt/user-data/uploads/. "
    "Save every file the user should get (charts, tables, documents) in /mnt/user-data/outputs/: "
    "each one is shown to the user as an artifact they can preview and download.";

int64_t now_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

ApiError thread_not_found(const std::string& id) {
  return ApiError::not_found("Thread not found: " + id.substr(0, 200));
}

std::string download_url(const std::string& thread_id, const std::string& sandbox_path) {
  namespace urls = boost::urls;
  urls::encoding_opts opts;
  auto encode = [&](std::string_view s) { return urls::encode(s, urls::unreserved_chars + '/', opts); };
  return "/api/v1/app/thread/" + urls::encode(thread_id, urls::unreserved_chars, opts) +
         "/download-file?path=" + encode(sandbox_path);
}

bool is_workspace_block(const json::object& block) {
  auto* type = block.if_contains("type");
  return type && type->is_string() && type->as_string() == kResourceBlock;
}

}  // namespace

json::value stored_json(const std::string& text) {
  boost::system::error_code ec;
  json::value value = json::parse(text, ec);
  return ec ? json::value(nullptr) : value;
}

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

std::string title_from(std::string_view content) {
  while (!content.empty() && (content.front() == ' ' || content.front() == '\n' || content.front() == '\t'))
    content.remove_prefix(1);
  content = content.substr(0, content.find('\n'));
  if (content.size() <= 80) return std::string(content);
  size_t cut = 80;
  while (cut > 0 && (static_cast<unsigned char>(content[cut]) & 0xC0) == 0x80) --cut;
  return std::string(content.substr(0, cut)) + "…";
}

json::array history_for_upstream(const std::vector<store::ThreadMessage>& stored, int max_turns,
                                 bool code_execution) {
  size_t start = stored.size();
  int users = 0;
  while (start > 0 && users < max_turns - 1) {
    --start;
    if (stored[start].role == "user") ++users;
  }
  while (start < stored.size() && stored[start].role != "user") ++start;
  json::array out;
  for (size_t i = start; i < stored.size(); ++i) {
    json::value content = stored_json(stored[i].content);
    if (content.is_array()) {
      json::array kept;
      for (const auto& block : content.as_array()) {
        if (!block.is_object()) continue;
        std::string_view type = block.as_object().if_contains("type") && block.at("type").is_string()
                                    ? std::string_view(block.at("type").as_string())
                                    : std::string_view();
        if (type == kResourceBlock) continue;
        if (!code_execution && (type == "server_tool_use" || type.ends_with("_code_execution_tool_result")))
          continue;
        if (type == "text" && (!block.at("text").is_string() || block.at("text").as_string().empty()))
          continue;
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
// Running turns

bool RunningTurns::claim(const std::string& owner, const std::string& id,
                         std::shared_ptr<runtime::Cancellation> cancellation) {
  std::lock_guard lock(mutex_);
  return running_.emplace(std::make_pair(owner, id), std::move(cancellation)).second;
}

void RunningTurns::release(const std::string& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  running_.erase({owner, id});
}

bool RunningTurns::cancel(const std::string& owner, const std::string& id) {
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

bool RunningTurns::running(const std::string& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  return running_.contains({owner, id});
}

// ---------------------------------------------------------------------------------
// Threads

WorkspaceChat::WorkspaceChat(Services& services, std::shared_ptr<store::db::Database> database)
    : services_(services), threads_(std::move(database)) {}

asio::awaitable<Result<store::ThreadRecord>> WorkspaceChat::find(const std::string& owner,
                                                                 const std::string& id) {
  auto query = [this, &owner, &id] { return threads_.find(owner, id); };
  auto thread = co_await store_call(services_, std::move(query));
  if (!thread) co_return thread_not_found(id);
  co_return *thread;
}

asio::awaitable<Result<store::ThreadRecord>> WorkspaceChat::create(const std::string& owner,
                                                                   const std::string& title) {
  store::ThreadRecord record{
      owner, std::string(store::kThreadIdPrefix) + services_.containers.new_id().substr(5),
      title, now_seconds(),
      0,     0};
  record.updated_at = record.created_at;
  auto create = [this, &owner, &record]() -> Result<store::ThreadRecord> {
    std::lock_guard creating(services_.quotas.creation_mutex());  // the count and the insert together
    auto room = OwnerQuotas::room_for_one_more(threads_.count(owner), services_.config()->threads_per_owner,
                                               "threads", "quotas.threadsPerOwner", "threads_quota");
    if (!room) return room.error();
    // A thread's turns run in a container of the thread's id: one that could not get
    // its container is refused now, naming the quota, not at its first turn.
    room = OwnerQuotas::room_for_one_more(
        services_.containers.metadata().containers_claimed(owner), services_.config()->containers_per_owner,
        "containers (threads included)", "quotas.containersPerOwner", "containers_quota");
    if (!room) return room.error();
    if (!threads_.create(record)) return ApiError::internal();
    return *threads_.find(owner, record.id);
  };
  co_return co_await store_call(services_, std::move(create));
}

asio::awaitable<store::ThreadPage> WorkspaceChat::list(const std::string& owner, size_t limit,
                                                       const std::string& after_id,
                                                       const std::string& title_query) {
  auto query = [this, &owner, limit, &after_id, &title_query] {
    return threads_.list(owner, limit, after_id, title_query);
  };
  co_return co_await store_call(services_, std::move(query));
}

asio::awaitable<std::vector<store::ThreadMessage>> WorkspaceChat::messages(const std::string& owner,
                                                                           const std::string& id) {
  auto query = [this, &owner, &id] { return threads_.messages(owner, id); };
  co_return co_await store_call(services_, std::move(query));
}

asio::awaitable<Result<store::ThreadRecord>> WorkspaceChat::rename(const std::string& owner,
                                                                   const std::string& id,
                                                                   const std::string& title) {
  auto rename = [this, &owner, &id, &title]() -> std::optional<store::ThreadRecord> {
    if (!threads_.rename(owner, id, title, now_seconds())) return std::nullopt;
    return threads_.find(owner, id);
  };
  auto renamed = co_await store_call(services_, std::move(rename));
  if (!renamed) co_return thread_not_found(id);
  co_return *renamed;
}

asio::awaitable<void> WorkspaceChat::remove(const store::ThreadRecord& thread) {
  if (auto container =
          co_await services_.containers.lifecycle().async_open(thread.owner, thread.id, /*create=*/false))
    co_await services_.containers.lifecycle().remove(*container);
  auto remove = [this, &thread] { threads_.remove(thread.owner, thread.id); };
  co_await store_call(services_, std::move(remove));
}

asio::awaitable<std::vector<store::ThreadArtifact>> WorkspaceChat::artifacts(const std::string& owner,
                                                                             const std::string& id) {
  auto query = [this, &owner, &id] { return threads_.artifacts(owner, id); };
  co_return co_await store_call(services_, std::move(query));
}

asio::awaitable<std::vector<ThreadFile>> WorkspaceChat::files(const std::string& owner,
                                                              const std::string& id) {
  std::vector<ThreadFile> files;
  auto opened = co_await services_.containers.lifecycle().async_open(owner, id, /*create=*/false);
  if (!opened) co_return files;
  std::shared_ptr<Container> container = *opened;
  co_await sync_off_io_thread(services_, *container);
  auto query = [this, &container] { return services_.containers.metadata().files_of(container->storage); };
  auto records = co_await store_call(services_, std::move(query));
  const std::string uploads = std::string(kUploadsMount) + "/", outputs = std::string(kOutputsMount) + "/";
  for (auto& record : records) {
    const bool upload = record.path.starts_with(uploads);
    if (!upload && !record.path.starts_with(outputs)) continue;
    files.push_back(ThreadFile{std::move(record), upload});
  }
  co_return files;
}

asio::awaitable<bool> WorkspaceChat::stop_turn(const std::string& owner, const std::string& id) {
  const bool was_running = running_.cancel(owner, id);
  asio::steady_timer pause(co_await asio::this_coro::executor);
  for (int i = 0; was_running && i < 400 && running_.running(owner, id); ++i) {
    pause.expires_after(std::chrono::milliseconds(25));
    boost::system::error_code ec;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return was_running;
}

asio::awaitable<Result<std::shared_ptr<WorkspaceTurn>>> WorkspaceChat::begin_turn(
    const store::ThreadRecord& thread, TurnRequest request, std::shared_ptr<const ops::Config> config,
    std::string user_message_id, std::string answer_id) {
  // Skills add code execution, pgpt.tools may ask for it, and the Workspace flag
  // removes it either way (ordinary chat goes on).
  const bool code_execution =
      config->code_execution_enabled && (request.code_execution_requested || !request.skills.empty());

  auto cancellation = std::make_shared<runtime::Cancellation>();
  if (!running_.claim(thread.owner, thread.id, cancellation))
    co_return ApiError::rate_limited(
        "A message is being answered in this thread; send the next one when it has finished", 1);
  auto turn = std::make_shared<WorkspaceTurn>(shared_from_this(), thread.owner, thread.id, cancellation,
                                              std::move(answer_id));
  turn->user_ = store::ThreadMessage{std::move(user_message_id), "user",
                                     json::serialize(json::value(request.content)), "{}", now_seconds()};
  turn->request_text_ = request.content;
  turn->model_ = request.model;

  auto stored_messages = co_await messages(thread.owner, thread.id);
  json::array history = history_for_upstream(stored_messages, config->max_history_turns, code_execution);
  history.push_back(json::object{{"role", "user"}, {"content", request.content}});
  json::object upstream{{"model", request.model},
                        {"max_tokens", request.max_tokens},
                        {"messages", std::move(history)},
                        {"stream", true}};
  if (code_execution) {
    auto opened =
        co_await services_.containers.lifecycle().async_open(thread.owner, thread.id, /*create=*/true);
    if (!opened) co_return opened.error();
    turn->container_ = *opened;
    turn->outputs_before_ = co_await turn->snapshot_outputs();
    upstream["tools"] =
        json::array{json::object{{"name", "code_execution"}, {"type", request.code_tool_type}}};
    upstream["system"] = kWorkspaceSystem;
    // The Skills seam: container.skills is what /messages takes for Skills (the same
    // shape); the request parser and the loop give them to the sandbox.
    json::object container{{"id", thread.id}};
    if (!request.skills.empty()) container["skills"] = std::move(request.skills);
    upstream["container"] = std::move(container);
  }
  turn->upstream_request_ = std::move(upstream);
  co_return turn;
}

// ---------------------------------------------------------------------------------
// A turn

WorkspaceTurn::WorkspaceTurn(std::shared_ptr<WorkspaceChat> chat, std::string owner, std::string thread_id,
                             std::shared_ptr<runtime::Cancellation> cancellation, std::string answer_id)
    : chat_(std::move(chat)),
      owner_(std::move(owner)),
      thread_id_(std::move(thread_id)),
      cancellation_(std::move(cancellation)),
      message_id_(std::move(answer_id)) {}

WorkspaceTurn::~WorkspaceTurn() { release(); }

void WorkspaceTurn::release() {
  if (released_) return;
  released_ = true;
  chat_->running_.release(owner_, thread_id_);
}

// Brings the index in line with the disk (a walk of the container's folders, as a
// listing does, on the blocking pool: service/discovery.h) and returns what outputs/
// holds.
asio::awaitable<WorkspaceTurn::OutputsSnapshot> WorkspaceTurn::snapshot_outputs() {
  Services& services = chat_->services_;
  co_await sync_off_io_thread(services, *container_);
  const std::string prefix = std::string(kOutputsMount) + "/";
  OutputsSnapshot snapshot;
  auto query = [&services, this] { return services.containers.metadata().files_of(container_->storage); };
  auto records = co_await store_call(services, std::move(query));
  for (auto& record : records)
    if (record.path.rfind(prefix, 0) == 0)
      snapshot.emplace(record.path, Fingerprint{record.size, record.etag, record.mtime_ns});
  co_return snapshot;
}

asio::awaitable<std::vector<store::ThreadArtifact>> WorkspaceTurn::changed_outputs() {
  Services& services = chat_->services_;
  std::vector<store::ThreadArtifact> out;
  const std::string prefix = std::string(kOutputsMount) + "/";
  co_await sync_off_io_thread(services, *container_);
  auto query = [&services, this] { return services.containers.metadata().files_of(container_->storage); };
  auto records = co_await store_call(services, std::move(query));
  for (auto& record : records) {
    if (record.path.rfind(prefix, 0) != 0) continue;
    auto it = outputs_before_.find(record.path);
    if (it != outputs_before_.end() && it->second == Fingerprint{record.size, record.etag, record.mtime_ns})
      continue;
    store::ThreadArtifact artifact;
    artifact.file_id = store::file_id_for_path(record.path);
    artifact.path = record.path;
    artifact.filename = record.path.substr(record.path.rfind('/') + 1);
    artifact.mime = record.mime;
    artifact.size = record.size;
    artifact.message_id = message_id_;
    artifact.created_at = now_seconds();
    out.push_back(std::move(artifact));
  }
  co_return out;
}

std::optional<json::object> WorkspaceTurn::record(std::string_view event, const json::object& data) {
  if (event == "message_start") {
    if (auto* m = data.if_contains("message"); m && m->is_object())
      if (auto* id = m->as_object().if_contains("id"); id && id->is_string())
        message_id_ = std::string(id->as_string());
  } else if (event == "content_block_start") {
    if (auto* block = data.if_contains("content_block"); block && block->is_object()) {
      if (is_workspace_block(block->as_object())) {
        // A block of the workspace's own type that the model made up (a file and a
        // download_url of its choosing): artifacts come only from files this turn was
        // seen to write. Its place (the index) is kept with an empty text block, so the
        // stream's numbering stays whole; nothing of it is sent or stored.
        json::object replaced = data;
        replaced["content_block"] = json::object{{"type", "text"}, {"text", ""}};
        content_.start(replaced["content_block"].as_object());
        return replaced;
      }
      content_.start(block->as_object());
    }
  } else if (event == "content_block_delta" || event == "content_block_stop") {
    // What the loop streams it has already checked; a block it never started is ignored.
    auto* index = data.if_contains("index");
    if (index && index->is_int64() && index->as_int64() >= 0) {
      const auto at = static_cast<size_t>(index->as_int64());
      auto* delta = data.if_contains("delta");
      if (event == "content_block_stop")
        content_.stop(at);
      else if (delta)
        content_.apply(at, *delta);
    }
  } else if (event == "error") {
    std::string type = "api_error", message = "The turn failed";
    if (auto* e = data.if_contains("error"); e && e->is_object()) {
      if (auto* t = e->as_object().if_contains("type"); t && t->is_string())
        type = std::string(t->as_string());
      if (auto* m = e->as_object().if_contains("message"); m && m->is_string())
        message = std::string(m->as_string());
    }
    failure_ = ApiError{messages::kind_of_stream_error(type), message, {}};
  }
  return std::nullopt;
}

void WorkspaceTurn::drop_incomplete_blocks() {
  std::set<std::string> answered;
  for (const auto& block : content_.blocks())
    if (auto* id = block.is_object() ? block.as_object().if_contains("tool_use_id") : nullptr;
        id && id->is_string())
      answered.emplace(id->as_string());
  json::array kept;
  for (size_t i = 0; i < content_.size(); ++i) {
    const auto& block = content_.blocks()[i];
    if (!block.is_object()) continue;
    const auto& b = block.as_object();
    auto* type = b.if_contains("type");
    std::string_view kind =
        type && type->is_string() ? std::string_view(type->as_string()) : std::string_view();
    if (kind == "server_tool_use") {
      auto* id = b.if_contains("id");
      if (content_.input_unfinished(i) || !id || !id->is_string() ||
          !answered.contains(std::string(id->as_string())))
        continue;
    }
    if (kind == "thinking") {
      auto* signature = b.if_contains("signature");
      if (!signature || !signature->is_string() || signature->as_string().empty()) continue;
    }
    kept.push_back(block);
  }
  content_.take();  // what was unfinished is gone with its block
  content_.blocks() = std::move(kept);
}

asio::awaitable<std::vector<std::pair<int64_t, json::object>>> WorkspaceTurn::add_artifacts() {
  std::vector<std::pair<int64_t, json::object>> blocks;
  if (!container_) co_return blocks;
  const bool downloadable = chat_->services_.config()->download_generated;
  artifacts_ = co_await changed_outputs();
  for (const auto& artifact : artifacts_) {
    json::object block = resource_block(thread_id_, artifact, downloadable);
    const auto index = static_cast<int64_t>(content_.size());
    content_.start(block);
    blocks.emplace_back(index, std::move(block));
  }
  co_return blocks;
}

asio::awaitable<Result<WorkspaceTurn::Answer>> WorkspaceTurn::store(const json::object& message_delta) {
  json::object extra{{"model", model_}};
  Answer answer;
  if (auto* delta = message_delta.if_contains("delta"); delta && delta->is_object()) {
    for (const auto& [key, value] : delta->as_object()) {
      if (key == "container")
        answer.container = value;
      else
        extra[key] = value;
    }
  }
  if (auto* usage = message_delta.if_contains("usage")) extra["usage"] = *usage;
  if (cancellation_->cancelled()) extra["stopped"] = true;
  answer.message = store::ThreadMessage{message_id_, "assistant", json::serialize(content_.blocks()),
                                        json::serialize(extra), now_seconds()};
  auto append = [this, &answer] {
    return chat_->threads_.append_turn(owner_, thread_id_, user_, answer.message, artifacts_,
                                       title_from(request_text_));
  };
  stored_ = co_await store_call(chat_->services_, std::move(append));
  release();  // stored: the thread takes its next message, a stop request returns
  if (!stored_) {
    failure_ = ApiError::not_found("Thread not found: " + thread_id_ + " (deleted while it answered)");
    co_return *failure_;
  }
  co_return answer;
}

}  // namespace sandboxd::service
