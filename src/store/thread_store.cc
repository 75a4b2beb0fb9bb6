#include "store/thread_store.h"

#include <algorithm>
#include <stdexcept>

#include "base/utf8.h"
#include "store/schema.h"

namespace sandboxd::store {
namespace {

// The tables are in store/schema.cc. Messages keep their content as JSON text: the
// API's shapes, not a schema.
using db::Connection;
using db::Statement;
using db::Transaction;

// Owners and thread ids from outside (a URL) that are not UTF-8 name no stored thread;
// PostgreSQL would refuse them as parameters.
bool storable(const std::string& owner, const std::string& id) {
  return is_valid_utf8(owner) && is_valid_utf8(id);
}

constexpr const char* kThreadColumns = "owner, id, title, created_at, updated_at, seq";

ThreadRecord read_thread(const Statement& row) {
  return ThreadRecord{row.text(0), row.text(1), row.text(2), row.integer(3), row.integer(4), row.integer(5)};
}

void insert_message(Connection& conn, const std::string& owner, const std::string& id,
                    const ThreadMessage& m) {
  Statement insert(conn,
                   "INSERT INTO thread_messages (owner, thread_id, id, role, content, extra, created_at) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?)");
  insert.add(owner).add(id).add(m.id).add(m.role).add(m.content).add(m.extra.empty() ? "{}" : m.extra);
  insert.add(m.created_at).run();
}

}  // namespace

ThreadStore::ThreadStore(const std::string& db_path) : ThreadStore(db::open_sqlite(db_path)) {}

ThreadStore::ThreadStore(std::shared_ptr<db::Database> database) : db_(std::move(database)) {
  schema::migrate(*db_);
}

ThreadStore::~ThreadStore() = default;

bool ThreadStore::create(const ThreadRecord& record) {
  auto conn = db_->acquire();
  Statement insert(conn,
                   "INSERT INTO threads (owner, id, title, created_at, updated_at) VALUES (?, ?, ?, ?, ?) "
                   "ON CONFLICT (owner, id) DO NOTHING");
  insert.add(record.owner)
      .add(record.id)
      .add(record.title)
      .add(record.created_at)
      .add(record.created_at)
      .run();
  return insert.changes() > 0;
}

std::optional<ThreadRecord> ThreadStore::find(const std::string& owner, const std::string& id) {
  if (!storable(owner, id)) return std::nullopt;
  auto conn = db_->acquire();
  Statement query(conn, std::string("SELECT ") + kThreadColumns + " FROM threads WHERE owner = ? AND id = ?");
  query.add(owner).add(id);
  if (!query.step()) return std::nullopt;
  return read_thread(query);
}

size_t ThreadStore::count(const std::string& owner) {
  if (!storable(owner, "")) return 0;
  auto conn = db_->acquire();
  Statement query(conn, "SELECT COUNT(*) FROM threads WHERE owner = ?");
  query.add(owner);
  return query.step() ? static_cast<size_t>(query.integer(0)) : 0;
}

namespace {
// A LIKE pattern that matches `text` anywhere, its wildcards escaped with '\'.
std::string contains_pattern(const std::string& text) {
  std::string pattern = "%";
  for (char c : text) {
    if (c == '%' || c == '_' || c == '\\') pattern += '\\';
    pattern += c;
  }
  return pattern + "%";
}
}  // namespace

ThreadPage ThreadStore::list(const std::string& owner, size_t limit, const std::string& after_id,
                             const std::string& title_contains) {
  ThreadPage page;
  if (!storable(owner, after_id) || !is_valid_utf8(title_contains)) return page;
  auto conn = db_->acquire();
  std::string sql = std::string("SELECT ") + kThreadColumns + " FROM threads WHERE owner = ?";
  std::optional<int64_t> after_seq;
  if (!after_id.empty()) {
    Statement cursor(conn, "SELECT seq FROM threads WHERE owner = ? AND id = ?");
    cursor.add(owner).add(after_id);
    if (!cursor.step()) return page;
    after_seq = cursor.integer(0);
    sql += " AND seq < ?";
  }
  // LOWER on both sides: SQLite's LIKE ignores ASCII case, PostgreSQL's none.
  if (!title_contains.empty()) sql += " AND LOWER(title) LIKE LOWER(?) ESCAPE '\\'";
  sql += " ORDER BY seq DESC LIMIT ?";
  Statement query(conn, sql);
  query.add(owner);
  if (after_seq) query.add(*after_seq);
  if (!title_contains.empty()) query.add(contains_pattern(title_contains));
  query.add(static_cast<int64_t>(std::min<size_t>(limit, INT32_MAX) + 1));
  while (query.step()) page.threads.push_back(read_thread(query));
  if (page.threads.size() > limit) {
    page.has_more = true;
    page.threads.resize(limit);
  }
  return page;
}

bool ThreadStore::rename(const std::string& owner, const std::string& id, const std::string& title,
                         int64_t now) {
  if (!storable(owner, id)) return false;
  auto conn = db_->acquire();
  Statement update(conn, "UPDATE threads SET title = ?, updated_at = ? WHERE owner = ? AND id = ?");
  update.add(title).add(now).add(owner).add(id).run();
  return update.changes() > 0;
}

bool ThreadStore::remove(const std::string& owner, const std::string& id) {
  if (!storable(owner, id)) return false;
  auto conn = db_->acquire();
  Transaction transaction(conn);
  Statement remove_thread(conn, "DELETE FROM threads WHERE owner = ? AND id = ?");
  remove_thread.add(owner).add(id).run();
  bool existed = remove_thread.changes() > 0;
  Statement remove_messages(conn, "DELETE FROM thread_messages WHERE owner = ? AND thread_id = ?");
  remove_messages.add(owner).add(id).run();
  Statement remove_artifacts(conn, "DELETE FROM thread_artifacts WHERE owner = ? AND thread_id = ?");
  remove_artifacts.add(owner).add(id).run();
  transaction.commit();
  return existed;
}

bool ThreadStore::append_turn(const std::string& owner, const std::string& id, const ThreadMessage& user,
                              const ThreadMessage& assistant, const std::vector<ThreadArtifact>& artifacts,
                              const std::string& title_if_empty) {
  if (!storable(owner, id)) return false;
  auto conn = db_->acquire();
  Transaction transaction(conn);
  // A thread deleted while its turn ran keeps nothing of it.
  Statement touch(conn,
                  "UPDATE threads SET updated_at = ?, title = CASE WHEN title = '' THEN ? ELSE title END "
                  "WHERE owner = ? AND id = ?");
  touch.add(assistant.created_at).add(title_if_empty).add(owner).add(id).run();
  if (touch.changes() == 0) return false;
  insert_message(conn, owner, id, user);
  insert_message(conn, owner, id, assistant);
  for (const auto& a : artifacts) {
    Statement insert(conn,
                     "INSERT INTO thread_artifacts (owner, thread_id, file_id, path, filename, mime, size, "
                     "message_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    insert.add(owner).add(id).add(a.file_id).add_blob(a.path).add_blob(a.filename).add(a.mime);
    insert.add(static_cast<int64_t>(a.size)).add(a.message_id).add(a.created_at).run();
  }
  transaction.commit();
  return true;
}

std::vector<ThreadMessage> ThreadStore::messages(const std::string& owner, const std::string& id) {
  if (!storable(owner, id)) return {};
  auto conn = db_->acquire();
  Statement query(conn,
                  "SELECT id, role, content, extra, created_at FROM thread_messages "
                  "WHERE owner = ? AND thread_id = ? ORDER BY seq");
  query.add(owner).add(id);
  std::vector<ThreadMessage> out;
  while (query.step())
    out.push_back(
        ThreadMessage{query.text(0), query.text(1), query.text(2), query.text(3), query.integer(4)});
  return out;
}

std::vector<ThreadArtifact> ThreadStore::artifacts(const std::string& owner, const std::string& id) {
  if (!storable(owner, id)) return {};
  auto conn = db_->acquire();
  Statement query(conn,
                  "SELECT file_id, path, filename, mime, size, message_id, created_at FROM thread_artifacts "
                  "WHERE owner = ? AND thread_id = ? ORDER BY seq");
  query.add(owner).add(id);
  std::vector<ThreadArtifact> out;
  while (query.step())
    out.push_back(ThreadArtifact{query.text(0), query.blob(1), query.blob(2), query.text(3),
                                 static_cast<uint64_t>(query.integer(4)), query.text(5), query.integer(6)});
  return out;
}

}  // namespace sandboxd::store
