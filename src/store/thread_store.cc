#include "store/thread_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <stdexcept>

#include "store/sqlite.h"

namespace sandboxd::store {
namespace {

// The thread tables live in the metadata database (sandboxd.db) but are created and
// versioned here: CREATE IF NOT EXISTS only, so the metadata's own schema version is
// untouched. Messages keep their content as JSON text: the API's shapes, not a schema.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS threads (
  owner      TEXT    NOT NULL,
  id         TEXT    NOT NULL,
  title      TEXT    NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  UNIQUE (owner, id)
);
CREATE TABLE IF NOT EXISTS thread_messages (
  owner      TEXT    NOT NULL,
  thread_id  TEXT    NOT NULL,
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  id         TEXT    NOT NULL,
  role       TEXT    NOT NULL,
  content    TEXT    NOT NULL,
  extra      TEXT    NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS thread_messages_by_thread ON thread_messages (owner, thread_id, seq);
CREATE TABLE IF NOT EXISTS thread_artifacts (
  owner      TEXT    NOT NULL,
  thread_id  TEXT    NOT NULL,
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  file_id    TEXT    NOT NULL,
  path       TEXT    NOT NULL,
  filename   TEXT    NOT NULL,
  mime       TEXT    NOT NULL,
  size       INTEGER NOT NULL,
  message_id TEXT    NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS thread_artifacts_by_thread ON thread_artifacts (owner, thread_id, seq);
)sql";

using sqlite::Statement;
using sqlite::Transaction;
using sqlite::exec;

constexpr const char* kThreadColumns = "owner, id, title, created_at, updated_at, seq";

ThreadRecord read_thread(const Statement& row) {
  return ThreadRecord{row.text(0), row.text(1), row.text(2), row.integer(3), row.integer(4), row.integer(5)};
}

void insert_message(sqlite3* db, const std::string& owner, const std::string& id, const ThreadMessage& m) {
  Statement insert(db, "INSERT INTO thread_messages (owner, thread_id, id, role, content, extra, created_at) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)");
  insert.add(owner).add(id).add(m.id).add(m.role).add(m.content).add(m.extra.empty() ? "{}" : m.extra);
  insert.add(m.created_at).run();
}

}  // namespace

ThreadStore::ThreadStore(const std::string& db_path) : db_(sqlite::open_database(db_path)) {
  try {
    Transaction transaction(db_);
    exec(db_, kSchema);
    transaction.commit();
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

ThreadStore::~ThreadStore() { sqlite3_close(db_); }

bool ThreadStore::create(const ThreadRecord& record) {
  std::lock_guard lock(mutex_);
  Statement insert(db_, "INSERT INTO threads (owner, id, title, created_at, updated_at) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT (owner, id) DO NOTHING");
  insert.add(record.owner).add(record.id).add(record.title).add(record.created_at).add(record.created_at).run();
  return sqlite3_changes(db_) > 0;
}

std::optional<ThreadRecord> ThreadStore::find(const std::string& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement query(db_, std::string("SELECT ") + kThreadColumns + " FROM threads WHERE owner = ? AND id = ?");
  query.add(owner).add(id);
  if (!query.step()) return std::nullopt;
  return read_thread(query);
}

size_t ThreadStore::count(const std::string& owner) {
  std::lock_guard lock(mutex_);
  Statement query(db_, "SELECT COUNT(*) FROM threads WHERE owner = ?");
  query.add(owner);
  return query.step() ? static_cast<size_t>(query.integer(0)) : 0;
}

ThreadPage ThreadStore::list(const std::string& owner, size_t limit, const std::string& after_id) {
  std::lock_guard lock(mutex_);
  ThreadPage page;
  std::string sql = std::string("SELECT ") + kThreadColumns + " FROM threads WHERE owner = ?";
  std::optional<int64_t> after_seq;
  if (!after_id.empty()) {
    Statement cursor(db_, "SELECT seq FROM threads WHERE owner = ? AND id = ?");
    cursor.add(owner).add(after_id);
    if (!cursor.step()) return page;
    after_seq = cursor.integer(0);
    sql += " AND seq < ?";
  }
  sql += " ORDER BY seq DESC LIMIT ?";
  Statement query(db_, sql);
  query.add(owner);
  if (after_seq) query.add(*after_seq);
  query.add(static_cast<int64_t>(std::min<size_t>(limit, INT32_MAX) + 1));
  while (query.step()) page.threads.push_back(read_thread(query));
  if (page.threads.size() > limit) {
    page.has_more = true;
    page.threads.resize(limit);
  }
  return page;
}

bool ThreadStore::rename(const std::string& owner, const std::string& id, const std::string& title, int64_t now) {
  std::lock_guard lock(mutex_);
  Statement update(db_, "UPDATE threads SET title = ?, updated_at = ? WHERE owner = ? AND id = ?");
  update.add(title).add(now).add(owner).add(id).run();
  return sqlite3_changes(db_) > 0;
}

bool ThreadStore::remove(const std::string& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_);
  Statement remove_thread(db_, "DELETE FROM threads WHERE owner = ? AND id = ?");
  remove_thread.add(owner).add(id).run();
  bool existed = sqlite3_changes(db_) > 0;
  Statement remove_messages(db_, "DELETE FROM thread_messages WHERE owner = ? AND thread_id = ?");
  remove_messages.add(owner).add(id).run();
  Statement remove_artifacts(db_, "DELETE FROM thread_artifacts WHERE owner = ? AND thread_id = ?");
  remove_artifacts.add(owner).add(id).run();
  transaction.commit();
  return existed;
}

bool ThreadStore::append_turn(const std::string& owner, const std::string& id, const ThreadMessage& user,
                              const ThreadMessage& assistant, const std::vector<ThreadArtifact>& artifacts,
                              const std::string& title_if_empty) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_);
  // A thread deleted while its turn ran keeps nothing of it.
  Statement touch(db_, "UPDATE threads SET updated_at = ?, title = CASE WHEN title = '' THEN ? ELSE title END "
                       "WHERE owner = ? AND id = ?");
  touch.add(assistant.created_at).add(title_if_empty).add(owner).add(id).run();
  if (sqlite3_changes(db_) == 0) return false;
  insert_message(db_, owner, id, user);
  insert_message(db_, owner, id, assistant);
  for (const auto& a : artifacts) {
    Statement insert(db_, "INSERT INTO thread_artifacts (owner, thread_id, file_id, path, filename, mime, size, "
                          "message_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    insert.add(owner).add(id).add(a.file_id).add(a.path).add(a.filename).add(a.mime);
    insert.add(static_cast<int64_t>(a.size)).add(a.message_id).add(a.created_at).run();
  }
  transaction.commit();
  return true;
}

std::vector<ThreadMessage> ThreadStore::messages(const std::string& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement query(db_, "SELECT id, role, content, extra, created_at FROM thread_messages "
                       "WHERE owner = ? AND thread_id = ? ORDER BY seq");
  query.add(owner).add(id);
  std::vector<ThreadMessage> out;
  while (query.step())
    out.push_back(ThreadMessage{query.text(0), query.text(1), query.text(2), query.text(3), query.integer(4)});
  return out;
}

std::vector<ThreadArtifact> ThreadStore::artifacts(const std::string& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement query(db_, "SELECT file_id, path, filename, mime, size, message_id, created_at FROM thread_artifacts "
                       "WHERE owner = ? AND thread_id = ? ORDER BY seq");
  query.add(owner).add(id);
  std::vector<ThreadArtifact> out;
  while (query.step())
    out.push_back(ThreadArtifact{query.text(0), query.text(1), query.text(2), query.text(3),
                                 static_cast<uint64_t>(query.integer(4)), query.text(5), query.integer(6)});
  return out;
}

}  // namespace sandboxd::store
