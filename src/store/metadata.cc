#include "store/metadata.h"

#include <sqlite3.h>

#include <algorithm>
#include <ctime>
#include <stdexcept>

#include "store/sqlite.h"

namespace sandboxd::store {
namespace {

constexpr int kSchemaVersion = 1;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS containers (
  owner        TEXT    NOT NULL,
  id           TEXT    NOT NULL,
  storage      TEXT    NOT NULL UNIQUE,
  created_at   INTEGER NOT NULL,
  last_used_at INTEGER NOT NULL,
  PRIMARY KEY (owner, id)
);
CREATE INDEX IF NOT EXISTS containers_by_creation ON containers (owner, created_at, id);

CREATE TABLE IF NOT EXISTS files (
  storage    TEXT    NOT NULL,
  path       TEXT    NOT NULL,
  created_at INTEGER NOT NULL,
  seq        INTEGER NOT NULL,
  size       INTEGER NOT NULL,
  etag       TEXT    NOT NULL,
  mime       TEXT    NOT NULL,
  mtime_ns   INTEGER NOT NULL,
  PRIMARY KEY (storage, path)
);
CREATE INDEX IF NOT EXISTS files_by_creation ON files (storage, created_at, seq);

-- seq comes from here rather than from MAX(seq)+1 so it never goes backwards when
-- the newest row is deleted.
CREATE TABLE IF NOT EXISTS counters (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL
);
INSERT OR IGNORE INTO counters (name, value) VALUES ('file_seq', 0);
)sql";

constexpr const char* kFileColumns = "storage, path, created_at, seq, size, etag, mime, mtime_ns";
constexpr const char* kContainerColumns = "owner, id, storage, created_at, last_used_at";

using sqlite::Statement;
using sqlite::Transaction;
using sqlite::exec;

FileRecord read_file_row(const Statement& row) {
  FileRecord record;
  record.storage = row.text(0);
  record.path = row.text(1);
  record.created_at = row.integer(2);
  record.seq = row.integer(3);
  record.size = static_cast<uint64_t>(row.integer(4));
  record.etag = row.text(5);
  record.mime = row.text(6);
  record.mtime_ns = row.integer(7);
  return record;
}

ContainerRecord read_container_row(const Statement& row) {
  ContainerRecord record;
  record.owner = row.text(0);
  record.id = row.text(1);
  record.storage = row.text(2);
  record.created_at = row.integer(3);
  record.last_used_at = row.integer(4);
  return record;
}

// The smallest string greater than every string starting with `prefix`, so that a
// prefix match becomes the range [prefix, upper). nullopt when there is no such bound
// (empty prefix or all 0xff bytes). Paths compare as bytes (BINARY collation).
std::optional<std::string> prefix_upper_bound(std::string prefix) {
  while (!prefix.empty()) {
    auto last = static_cast<unsigned char>(prefix.back());
    if (last != 0xff) {
      prefix.back() = static_cast<char>(last + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::nullopt;
}

// A WHERE fragment (with its bound values) matching paths under any of the prefixes.
struct PrefixFilter {
  std::string sql;
  std::vector<std::string> values;
};

PrefixFilter prefix_filter(const std::vector<std::string>& prefixes) {
  PrefixFilter filter;
  if (prefixes.empty()) return filter;  // no filter: every file
  filter.sql = " AND (";
  for (size_t i = 0; i < prefixes.size(); ++i) {
    if (i > 0) filter.sql += " OR ";
    auto upper = prefix_upper_bound(prefixes[i]);
    filter.sql += upper ? "(path >= ? AND path < ?)" : "(path >= ?)";
    filter.values.push_back(prefixes[i]);
    if (upper) filter.values.push_back(*upper);
  }
  filter.sql += ")";
  return filter;
}

struct Position {
  int64_t created_at;
  int64_t seq;
};

std::optional<Position> file_position(sqlite3* db, const std::string& storage, const std::string& path) {
  Statement query(db, "SELECT created_at, seq FROM files WHERE storage = ? AND path = ?");
  query.bind(1, storage).bind(2, path);
  if (!query.step()) return std::nullopt;
  return Position{query.integer(0), query.integer(1)};
}

int64_t next_file_seq(sqlite3* db) {
  Statement bump(db, "UPDATE counters SET value = value + 1 WHERE name = 'file_seq' RETURNING value");
  if (!bump.step()) throw std::runtime_error("metadata: file_seq counter is missing");
  int64_t seq = bump.integer(0);
  bump.run();
  return seq;
}

void create_schema(sqlite3* db) {
  Statement version_query(db, "PRAGMA user_version");
  int64_t version = version_query.step() ? version_query.integer(0) : 0;
  if (version > kSchemaVersion) {
    throw std::runtime_error("metadata: database schema version " + std::to_string(version) +
                             " is newer than this sandboxd supports (" + std::to_string(kSchemaVersion) + ")");
  }
  Transaction transaction(db);
  exec(db, kSchema);
  exec(db, ("PRAGMA user_version = " + std::to_string(kSchemaVersion)).c_str());
  transaction.commit();
}

}  // namespace

Metadata::Metadata(const std::string& db_path) : db_(sqlite::open_database(db_path)) {
  try {
    create_schema(db_);
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

Metadata::~Metadata() { sqlite3_close(db_); }

std::optional<ContainerRecord> Metadata::find_container(const std::string& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  Statement query(db_, std::string("SELECT ") + kContainerColumns + " FROM containers WHERE owner = ? AND id = ?");
  query.bind(1, owner).bind(2, id);
  if (!query.step()) return std::nullopt;
  return read_container_row(query);
}

ContainerRecord Metadata::create_container(const ContainerRecord& record) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_);
  Statement insert(db_, std::string("INSERT INTO containers (") + kContainerColumns +
                            ") VALUES (?, ?, ?, ?, ?) ON CONFLICT (owner, id) DO NOTHING");
  insert.bind(1, record.owner).bind(2, record.id).bind(3, record.storage);
  insert.bind(4, record.created_at).bind(5, record.last_used_at);
  insert.run();
  Statement query(db_, std::string("SELECT ") + kContainerColumns + " FROM containers WHERE owner = ? AND id = ?");
  query.bind(1, record.owner).bind(2, record.id);
  if (!query.step()) throw std::runtime_error("metadata: container vanished after insert");
  ContainerRecord stored = read_container_row(query);
  transaction.commit();
  return stored;
}

void Metadata::touch_container(const std::string& owner, const std::string& id, int64_t now) {
  std::lock_guard lock(mutex_);
  Statement update(db_, "UPDATE containers SET last_used_at = ? WHERE owner = ? AND id = ?");
  update.bind(1, now).bind(2, owner).bind(3, id);
  update.run();
}

// A missing after_id yields an empty page: the cursor names a position that no longer
// exists, and guessing one could skip or repeat containers.
std::vector<ContainerRecord> Metadata::list_containers(const std::string& owner, size_t limit,
                                                       const std::string& after_id) {
  std::lock_guard lock(mutex_);
  std::vector<ContainerRecord> out;
  std::string sql = std::string("SELECT ") + kContainerColumns + " FROM containers WHERE owner = ?";
  std::optional<int64_t> after_created;
  if (!after_id.empty()) {
    Statement cursor(db_, "SELECT created_at FROM containers WHERE owner = ? AND id = ?");
    cursor.bind(1, owner).bind(2, after_id);
    if (!cursor.step()) return out;
    after_created = cursor.integer(0);
    sql += " AND (created_at, id) > (?, ?)";
  }
  sql += " ORDER BY created_at, id LIMIT ?";
  Statement query(db_, sql);
  query.add(owner);
  if (after_created) query.add(*after_created).add(after_id);
  query.add(static_cast<int64_t>(std::min<size_t>(limit, INT64_MAX)));
  while (query.step()) out.push_back(read_container_row(query));
  return out;
}

std::vector<ContainerRecord> Metadata::all_containers() {
  std::lock_guard lock(mutex_);
  Statement query(db_, std::string("SELECT ") + kContainerColumns + " FROM containers ORDER BY owner, created_at, id");
  std::vector<ContainerRecord> out;
  while (query.step()) out.push_back(read_container_row(query));
  return out;
}

void Metadata::delete_container(const std::string& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_);
  Statement find(db_, "SELECT storage FROM containers WHERE owner = ? AND id = ?");
  find.bind(1, owner).bind(2, id);
  if (!find.step()) return;
  std::string storage = find.text(0);
  Statement delete_files(db_, "DELETE FROM files WHERE storage = ?");
  delete_files.bind(1, storage).run();
  Statement delete_row(db_, "DELETE FROM containers WHERE owner = ? AND id = ?");
  delete_row.bind(1, owner).bind(2, id).run();
  transaction.commit();
}

std::optional<FileRecord> Metadata::find_file(const std::string& storage, const std::string& path) {
  std::lock_guard lock(mutex_);
  Statement query(db_, std::string("SELECT ") + kFileColumns + " FROM files WHERE storage = ? AND path = ?");
  query.bind(1, storage).bind(2, path);
  if (!query.step()) return std::nullopt;
  return read_file_row(query);
}

void Metadata::put_file(const FileRecord& record, bool reset_created) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_);
  if (fence_) fence_(db_, record.storage);
  bool exists = file_position(db_, record.storage, record.path).has_value();
  if (exists && !reset_created) {
    Statement update(db_, "UPDATE files SET size = ?, etag = ?, mime = ?, mtime_ns = ? WHERE storage = ? AND path = ?");
    update.bind(1, static_cast<int64_t>(record.size)).bind(2, record.etag).bind(3, record.mime);
    update.bind(4, record.mtime_ns).bind(5, record.storage).bind(6, record.path);
    update.run();
  } else {
    int64_t created_at = record.created_at != 0 ? record.created_at : static_cast<int64_t>(std::time(nullptr));
    Statement insert(db_, std::string("INSERT OR REPLACE INTO files (") + kFileColumns +
                              ") VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, record.storage).bind(2, record.path).bind(3, created_at).bind(4, next_file_seq(db_));
    insert.bind(5, static_cast<int64_t>(record.size)).bind(6, record.etag).bind(7, record.mime);
    insert.bind(8, record.mtime_ns);
    insert.run();
  }
  transaction.commit();
}

bool Metadata::delete_file(const std::string& storage, const std::string& path) {
  std::lock_guard lock(mutex_);
  std::optional<Transaction> fenced;  // the fence and the delete, at once
  if (fence_) fenced.emplace(db_), fence_(db_, storage);
  Statement remove(db_, "DELETE FROM files WHERE storage = ? AND path = ?");
  remove.bind(1, storage).bind(2, path).run();
  const bool deleted = sqlite3_changes(db_) > 0;
  if (fenced) fenced->commit();
  return deleted;
}

size_t Metadata::delete_prefix(const std::string& storage, const std::string& path_prefix) {
  std::lock_guard lock(mutex_);
  std::optional<Transaction> fenced;  // the fence and the delete, at once
  if (fence_) fenced.emplace(db_), fence_(db_, storage);
  PrefixFilter filter = prefix_filter({path_prefix});
  Statement remove(db_, "DELETE FROM files WHERE storage = ?" + filter.sql);
  remove.add(storage);
  for (const auto& value : filter.values) remove.add(value);
  remove.run();
  const size_t deleted = static_cast<size_t>(sqlite3_changes(db_));
  if (fenced) fenced->commit();
  return deleted;
}

// Pages over (created_at, seq), which is unique because seq is. With only before_path
// the query walks backwards from the cursor (so the page is the `limit` rows right
// before it) and the result is flipped back to ascending order. A cursor path with no
// row gives an empty page: the position it named is gone.
FilePage Metadata::list_files(const std::string& storage, const std::vector<std::string>& path_prefixes,
                              size_t limit, const std::optional<std::string>& after_path,
                              const std::optional<std::string>& before_path) {
  std::lock_guard lock(mutex_);
  FilePage page;
  std::optional<Position> after, before;
  if (after_path && !(after = file_position(db_, storage, *after_path))) return page;
  if (before_path && !(before = file_position(db_, storage, *before_path))) return page;
  bool backwards = before && !after;

  PrefixFilter filter = prefix_filter(path_prefixes);
  std::string sql = std::string("SELECT ") + kFileColumns + " FROM files WHERE storage = ?";
  if (after) sql += " AND (created_at, seq) > (?, ?)";
  if (before) sql += " AND (created_at, seq) < (?, ?)";
  sql += filter.sql;
  sql += backwards ? " ORDER BY created_at DESC, seq DESC" : " ORDER BY created_at, seq";
  sql += " LIMIT ?";

  Statement query(db_, sql);
  query.add(storage);
  if (after) query.add(after->created_at).add(after->seq);
  if (before) query.add(before->created_at).add(before->seq);
  for (const auto& value : filter.values) query.add(value);
  // One row beyond the page tells whether there is more.
  size_t wanted = std::min<size_t>(limit, INT64_MAX - 1) + 1;
  query.add(static_cast<int64_t>(wanted));

  while (query.step()) page.files.push_back(read_file_row(query));
  if (page.files.size() > limit) {
    page.has_more = true;
    page.files.resize(limit);
  }
  if (backwards) std::reverse(page.files.begin(), page.files.end());
  return page;
}

std::vector<FileRecord> Metadata::files_of(const std::string& storage) {
  std::lock_guard lock(mutex_);
  Statement query(db_, std::string("SELECT ") + kFileColumns + " FROM files WHERE storage = ? ORDER BY created_at, seq");
  query.bind(1, storage);
  std::vector<FileRecord> out;
  while (query.step()) out.push_back(read_file_row(query));
  return out;
}

uint64_t Metadata::total_bytes() {
  std::lock_guard lock(mutex_);
  Statement query(db_, "SELECT COALESCE(SUM(size), 0) FROM files");
  return query.step() ? static_cast<uint64_t>(query.integer(0)) : 0;
}

uint64_t Metadata::owner_bytes(const std::string& owner) {
  std::lock_guard lock(mutex_);
  Statement query(db_, "SELECT COALESCE(SUM(f.size), 0) FROM containers c JOIN files f ON f.storage = c.storage "
                       "WHERE c.owner = ?");
  query.bind(1, owner);
  return query.step() ? static_cast<uint64_t>(query.integer(0)) : 0;
}

}  // namespace sandboxd::store
