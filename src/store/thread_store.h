// Workspace chat threads (docs/http-api.md): each thread's title, its conversation (every
// message with its content blocks as JSON text) and its artifacts (files a turn wrote
// to outputs/), kept in the metadata database beside the containers and files, so a
// conversation outlives a restart. The thread's files are the container's (owner, id).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/database.h"

namespace sandboxd::store {

// Every thread's id starts with it, and its container has the thread's id: a container
// whose id does not start with it is no thread's, which callers know without a query.
inline constexpr std::string_view kThreadIdPrefix = "thread_";

struct ThreadRecord {
  std::string owner;
  std::string id;  // also the container id
  std::string title;
  int64_t created_at = 0;  // unix seconds
  int64_t updated_at = 0;  // unix seconds: the last message, rename or creation
  int64_t seq = 0;         // creation order (unique): newest first sorts by it
};

struct ThreadMessage {
  std::string id;       // "msg_..."
  std::string role;     // "user" | "assistant"
  std::string content;  // JSON: a string or an array of content blocks
  std::string extra;    // JSON object: stop_reason, usage, model (assistant); "{}" otherwise
  int64_t created_at = 0;
};

struct ThreadArtifact {
  std::string file_id;  // base64url of the sandbox path
  std::string path;     // /mnt/user-data/outputs/...
  std::string filename;
  std::string mime;
  uint64_t size = 0;
  std::string message_id;  // the assistant message of the turn that wrote it
  int64_t created_at = 0;
};

struct ThreadPage {
  std::vector<ThreadRecord> threads;
  bool has_more = false;
};

// Thread-safe (SQLite: a connection of its own on the metadata database, serialised by
// a mutex; PostgreSQL: a pooled connection per call). Throws std::runtime_error on
// database failures.
class ThreadStore {
 public:
  explicit ThreadStore(const std::string& db_path);
  // Any database; its schema is migrated first.
  explicit ThreadStore(std::shared_ptr<db::Database> database);
  ~ThreadStore();
  ThreadStore(const ThreadStore&) = delete;
  ThreadStore& operator=(const ThreadStore&) = delete;

  // Inserts a new thread; false when (owner, id) exists already.
  bool create(const ThreadRecord& record);
  std::optional<ThreadRecord> find(const std::string& owner, const std::string& id);
  // Newest first; `after_id` (exclusive) continues a page. An unknown cursor gives an
  // empty page. A non-empty `title_contains` keeps the threads whose title holds it,
  // ignoring case (its % and _ are literal characters, not patterns).
  ThreadPage list(const std::string& owner, size_t limit, const std::string& after_id,
                  const std::string& title_contains = "");
  // How many threads the owner has.
  size_t count(const std::string& owner);
  bool rename(const std::string& owner, const std::string& id, const std::string& title, int64_t now);
  // Removes the thread, its messages and its artifacts; false when there was none.
  bool remove(const std::string& owner, const std::string& id);

  // Appends one turn (the user's message, the answer, the answer's artifacts) in one
  // transaction, so a conversation never holds a question without its answer; sets the
  // title when the thread has none yet. False (nothing stored) when the thread is gone.
  bool append_turn(const std::string& owner, const std::string& id, const ThreadMessage& user,
                   const ThreadMessage& assistant, const std::vector<ThreadArtifact>& artifacts,
                   const std::string& title_if_empty);
  // In order, oldest first.
  std::vector<ThreadMessage> messages(const std::string& owner, const std::string& id);
  std::vector<ThreadArtifact> artifacts(const std::string& owner, const std::string& id);

 private:
  std::shared_ptr<db::Database> db_;
};

}  // namespace sandboxd::store
