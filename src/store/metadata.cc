#include "store/metadata.h"

#include <algorithm>
#include <ctime>
#include <stdexcept>

#include "base/utf8.h"
#include "store/file_cache.h"
#include "store/schema.h"

namespace sandboxd::store {
namespace {

constexpr const char* kFileColumns = "storage, path, created_at, seq, size, etag, mime, mtime_ns";
constexpr const char* kContainerColumns = "owner, id, storage, created_at, last_used_at, egress";

using db::Connection;
using db::Statement;
using db::Transaction;

FileRecord read_file_row(const Statement& row) {
  FileRecord record;
  record.storage = row.text(0);
  record.path = row.blob(1);
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
  record.egress = row.text(5);
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

std::optional<Position> file_position(Connection& conn, const std::string& storage, const std::string& path) {
  Statement query(conn, "SELECT created_at, seq FROM files WHERE storage = ? AND path = ?");
  query.bind(1, storage).bind_blob(2, path);
  if (!query.step()) return std::nullopt;
  return Position{query.integer(0), query.integer(1)};
}

int64_t next_file_seq(Connection& conn) {
  Statement bump(conn, "UPDATE counters SET value = value + 1 WHERE name = 'file_seq' RETURNING value");
  if (!bump.step()) throw std::runtime_error("metadata: file_seq counter is missing");
  int64_t seq = bump.integer(0);
  bump.run();
  return seq;
}

// PostgreSQL's TEXT holds only UTF-8 and refuses other bytes in a parameter; no stored
// owner or id can be such bytes (ids are checked where they are made), so a lookup with
// them finds nothing, on either backend, instead of failing.
bool storable(const std::string& a, const std::string& b = {}) {
  return is_valid_utf8(a) && is_valid_utf8(b);
}

}  // namespace

Metadata::Metadata(const std::string& db_path) : Metadata(db::open_sqlite(db_path)) {}

Metadata::Metadata(std::shared_ptr<db::Database> database) : db_(std::move(database)) {
  schema::migrate(*db_);
}

Metadata::~Metadata() = default;

std::optional<ContainerRecord> Metadata::find_container(const std::string& owner, const std::string& id) {
  if (!storable(owner, id)) return std::nullopt;
  auto conn = db_->acquire();
  Statement query(conn,
                  std::string("SELECT ") + kContainerColumns + " FROM containers WHERE owner = ? AND id = ?");
  query.bind(1, owner).bind(2, id);
  if (!query.step()) return std::nullopt;
  return read_container_row(query);
}

// A single host's container lists are held as the file records are (cluster mode: never,
// other replicas make an owner's containers): each write under the owner's stripe,
// applied after it commits, the owner forgotten when one fails.
namespace {
std::string owner_key(const std::string& owner) { return "owner/" + owner; }
}  // namespace

bool Metadata::holds_containers() const { return cache_ && !cache_scope_; }

ContainerRecord Metadata::create_container(const ContainerRecord& record) {
  if (!holds_containers()) return insert_container(record);
  std::lock_guard stripe(stripe_of(owner_key(record.owner)));
  try {
    ContainerRecord stored = insert_container(record);
    cache_->put_container(stored);
    return stored;
  } catch (...) {
    cache_->drop_owner(record.owner);
    throw;
  }
}

ContainerRecord Metadata::insert_container(const ContainerRecord& record) {
  auto conn = db_->acquire();
  Transaction transaction(conn);
  Statement insert(conn, std::string("INSERT INTO containers (") + kContainerColumns +
                             ") VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (owner, id) DO NOTHING");
  insert.bind(1, record.owner).bind(2, record.id).bind(3, record.storage);
  insert.bind(4, record.created_at).bind(5, record.last_used_at).bind(6, record.egress);
  insert.run();
  Statement query(conn,
                  std::string("SELECT ") + kContainerColumns + " FROM containers WHERE owner = ? AND id = ?");
  query.bind(1, record.owner).bind(2, record.id);
  if (!query.step()) throw std::runtime_error("metadata: container vanished after insert");
  ContainerRecord stored = read_container_row(query);
  transaction.commit();
  return stored;
}

void Metadata::touch_container(const std::string& owner, const std::string& id, int64_t now) {
  if (!storable(owner, id)) return;
  std::optional<std::lock_guard<std::mutex>> stripe;
  if (holds_containers()) stripe.emplace(stripe_of(owner_key(owner)));
  try {
    auto conn = db_->acquire();
    Statement update(conn, "UPDATE containers SET last_used_at = ? WHERE owner = ? AND id = ?");
    update.bind(1, now).bind(2, owner).bind(3, id);
    update.run();
    if (stripe) cache_->touch_container(owner, id, now);
  } catch (...) {
    if (stripe) cache_->drop_owner(owner);
    throw;
  }
}

bool Metadata::set_container_egress(const std::string& owner, const std::string& id,
                                    const std::string& storage, const std::string& egress) {
  if (!storable(owner, id)) return false;
  std::optional<std::lock_guard<std::mutex>> stripe;
  if (holds_containers()) stripe.emplace(stripe_of(owner_key(owner)));
  try {
    auto conn = db_->acquire();
    // The storage too: a container deleted and made again under the same id meanwhile
    // is another container, whose options this is not.
    Statement update(conn, "UPDATE containers SET egress = ? WHERE owner = ? AND id = ? AND storage = ?");
    update.add(egress).add(owner).add(id).add(storage);
    update.run();
    const bool changed = update.changes() > 0;
    // The owner's held list has the old options: it is read again when next listed.
    if (stripe) cache_->drop_owner(owner);
    return changed;
  } catch (...) {
    if (stripe) cache_->drop_owner(owner);
    throw;
  }
}

void Metadata::set_container_memory_bytes(const std::string& owner, const std::string& id,
                                          const std::string& storage, uint64_t bytes) {
  if (!storable(owner, id)) return;
  auto conn = db_->acquire();
  // (Not in ContainerRecord, so the held containers' cache has nothing to forget.)
  Statement update(conn, "UPDATE containers SET memory_bytes = ? WHERE owner = ? AND id = ? AND storage = ?");
  update.add(static_cast<int64_t>(bytes)).add(owner).add(id).add(storage);
  update.run();
}

std::vector<ContainerRecord> Metadata::list_containers(const std::string& owner, size_t limit,
                                                       const std::string& after_id) {
  if (holds_containers() && storable(owner, after_id)) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::vector<ContainerRecord> out;
      const auto state = cache_->list_containers(owner, limit, after_id, out);
      if (state == FileCache::State::kHeld) return out;
      if (state == FileCache::State::kTooLarge) break;
      if (attempt == 0) {
        std::lock_guard stripe(stripe_of(owner_key(owner)));
        if (cache_->list_containers(owner, 0, "", out) != FileCache::State::kMissing) continue;
        const size_t most = cache_->limits().max_records;
        auto all = list_containers_in_database(owner, most + 1, "");
        const bool too_large = all.size() > most;
        if (too_large) all.clear();
        cache_->install_containers(owner, std::move(all), too_large);
      }
    }
  }
  return list_containers_in_database(owner, limit, after_id);
}

std::optional<std::vector<ContainerRecord>> Metadata::cached_list_containers(const std::string& owner,
                                                                             size_t limit,
                                                                             const std::string& after_id) {
  if (!holds_containers() || !storable(owner, after_id)) return std::nullopt;
  std::vector<ContainerRecord> out;
  if (cache_->list_containers(owner, limit, after_id, out) != FileCache::State::kHeld) return std::nullopt;
  return out;
}

// A missing after_id yields an empty page: the cursor names a position that no longer
// exists, and guessing one could skip or repeat containers.
std::vector<ContainerRecord> Metadata::list_containers_in_database(const std::string& owner, size_t limit,
                                                                   const std::string& after_id) {
  std::vector<ContainerRecord> out;
  if (!storable(owner, after_id)) return out;
  auto conn = db_->acquire();
  std::string sql = std::string("SELECT ") + kContainerColumns + " FROM containers WHERE owner = ?";
  std::optional<int64_t> after_created;
  if (!after_id.empty()) {
    Statement cursor(conn, "SELECT created_at FROM containers WHERE owner = ? AND id = ?");
    cursor.bind(1, owner).bind(2, after_id);
    if (!cursor.step()) return out;
    after_created = cursor.integer(0);
    sql += " AND (created_at, id) > (?, ?)";
  }
  sql += " ORDER BY created_at, id LIMIT ?";
  Statement query(conn, sql);
  query.add(owner);
  if (after_created) query.add(*after_created).add(after_id);
  query.add(static_cast<int64_t>(std::min<size_t>(limit, INT64_MAX)));
  while (query.step()) out.push_back(read_container_row(query));
  return out;
}

uint64_t Metadata::containers_claimed(const std::string& owner, const std::string& except_id) {
  if (!storable(owner, except_id)) return 0;
  auto conn = db_->acquire();
  Statement query(conn,
                  "SELECT (SELECT COUNT(*) FROM containers WHERE owner = ?) + "
                  "(SELECT COUNT(*) FROM threads t WHERE t.owner = ? AND t.id <> ? AND NOT EXISTS "
                  "(SELECT 1 FROM containers c WHERE c.owner = t.owner AND c.id = t.id))");
  query.add(owner).add(owner).add(except_id);
  return query.step() ? static_cast<uint64_t>(query.integer(0)) : 0;
}

std::vector<ContainerRecord> Metadata::all_containers() {
  auto conn = db_->acquire();
  Statement query(
      conn, std::string("SELECT ") + kContainerColumns + " FROM containers ORDER BY owner, created_at, id");
  std::vector<ContainerRecord> out;
  while (query.step()) out.push_back(read_container_row(query));
  return out;
}

void Metadata::delete_container(const std::string& owner, const std::string& id) {
  if (!storable(owner, id)) return;
  if (cache_) {
    // Its records go from memory with the rows, under the container's stripe (taken
    // before a connection, as every write here does), so that no fill in between puts
    // them back.
    auto record = find_container(owner, id);
    if (!record) return;
    // Two stripes, the container's records' and (a single host) the owner's list's,
    // taken together (std::lock: no order to deadlock on), or one when they are one.
    std::mutex& files_stripe = stripe_of(record->storage);
    std::mutex& list_stripe = holds_containers() ? stripe_of(owner_key(owner)) : files_stripe;
    std::unique_lock files_lock(files_stripe, std::defer_lock), list_lock(list_stripe, std::defer_lock);
    if (&files_stripe == &list_stripe)
      files_lock.lock();
    else
      std::lock(files_lock, list_lock);
    // Its records are forgotten whatever happens; on a failure (an unknown outcome) the
    // owner's whole list too.
    struct Forget {
      FileCache& cache;
      const std::string& storage;
      ~Forget() { cache.drop(storage); }
    } forget{*cache_, record->storage};
    try {
      auto conn = db_->acquire();
      Transaction transaction(conn);
      Statement delete_files(conn, "DELETE FROM files WHERE storage = ?");
      delete_files.bind(1, record->storage).run();
      Statement delete_row(conn, "DELETE FROM containers WHERE owner = ? AND id = ? AND storage = ?");
      delete_row.bind(1, owner).bind(2, id).bind(3, record->storage).run();
      transaction.commit();
    } catch (...) {
      if (holds_containers()) cache_->drop_owner(owner);
      throw;
    }
    if (holds_containers()) cache_->erase_container(owner, id);
    return;
  }
  auto conn = db_->acquire();
  Transaction transaction(conn);
  Statement find(conn, "SELECT storage FROM containers WHERE owner = ? AND id = ?");
  find.bind(1, owner).bind(2, id);
  if (!find.step()) return;
  std::string storage = find.text(0);
  Statement delete_files(conn, "DELETE FROM files WHERE storage = ?");
  delete_files.bind(1, storage).run();
  Statement delete_row(conn, "DELETE FROM containers WHERE owner = ? AND id = ?");
  delete_row.bind(1, owner).bind(2, id).run();
  transaction.commit();
}

// --- the cache of file records ------------------------------------------------------

void Metadata::enable_file_cache(FileCacheLimits limits, CacheScope scope) {
  cache_ = limits.max_records > 0 ? std::make_unique<FileCache>(limits) : nullptr;
  cache_scope_ = std::move(scope);
}

void Metadata::forget_cached_files(const std::string& storage) {
  if (cache_) cache_->drop(storage);
}

size_t Metadata::cached_records() const { return cache_ ? cache_->records() : 0; }
size_t Metadata::cached_containers() const { return cache_ ? cache_->containers() : 0; }

std::optional<int64_t> Metadata::cache_token(const std::string& storage) const {
  if (!cache_) return std::nullopt;
  if (!cache_scope_) return 0;
  return cache_scope_(storage);
}

std::mutex& Metadata::stripe_of(const std::string& storage) {
  return stripes_[std::hash<std::string>{}(storage) % stripes_.size()];
}

void Metadata::fill(const std::string& storage, int64_t token) {
  std::lock_guard stripe(stripe_of(storage));
  std::optional<FileRecord> unused;
  if (cache_->find(storage, token, std::string(), unused) != FileCache::State::kMissing) return;
  const size_t most = cache_->limits().max_records;
  auto records = files_of_in_database(storage, most + 1);
  const bool too_large = records.size() > most;
  if (too_large) records.clear();
  cache_->install(storage, token, std::move(records), too_large);
}

std::optional<FileRecord> Metadata::find_file(const std::string& storage, const std::string& path) {
  if (auto token = cache_token(storage)) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::optional<FileRecord> found;
      const auto state = cache_->find(storage, *token, path, found);
      if (state == FileCache::State::kHeld) return found;
      if (state == FileCache::State::kTooLarge) break;
      if (attempt == 0) fill(storage, *token);
    }
  }
  return find_file_in_database(storage, path);
}

FilePage Metadata::list_files(const std::string& storage, const std::vector<std::string>& path_prefixes,
                              size_t limit, const std::optional<std::string>& after_path,
                              const std::optional<std::string>& before_path) {
  if (auto token = cache_token(storage)) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      FilePage page;
      const auto state = cache_->list(storage, *token, path_prefixes, limit, after_path, before_path, page);
      if (state == FileCache::State::kHeld) return page;
      if (state == FileCache::State::kTooLarge) break;
      if (attempt == 0) fill(storage, *token);
    }
  }
  return list_files_in_database(storage, path_prefixes, limit, after_path, before_path);
}

std::optional<FilePage> Metadata::cached_list_files(const std::string& storage,
                                                    const std::vector<std::string>& path_prefixes,
                                                    size_t limit,
                                                    const std::optional<std::string>& after_path,
                                                    const std::optional<std::string>& before_path) {
  auto token = cache_token(storage);
  if (!token) return std::nullopt;
  FilePage page;
  if (cache_->list(storage, *token, path_prefixes, limit, after_path, before_path, page) !=
      FileCache::State::kHeld)
    return std::nullopt;
  return page;
}

std::vector<FileRecord> Metadata::files_of(const std::string& storage) {
  if (auto token = cache_token(storage)) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::vector<FileRecord> records;
      const auto state = cache_->all(storage, *token, records);
      if (state == FileCache::State::kHeld) return records;
      if (state == FileCache::State::kTooLarge) break;
      if (attempt == 0) fill(storage, *token);
    }
  }
  return files_of_in_database(storage, SIZE_MAX);
}

// Each write runs under its container's stripe and is applied to the cache before the
// stripe is let go; a failure (the fence refusing it, a connection lost at COMMIT, whose
// outcome nobody knows) forgets the container's records instead.
void Metadata::put_file(const FileRecord& record, bool reset_created) {
  if (!cache_) {
    write_file(record, reset_created);
    return;
  }
  std::lock_guard stripe(stripe_of(record.storage));
  FileRecord stored;
  try {
    stored = write_file(record, reset_created);
  } catch (...) {
    cache_->drop(record.storage);
    throw;
  }
  cache_->upsert(stored);
}

bool Metadata::delete_file(const std::string& storage, const std::string& path) {
  std::optional<std::lock_guard<std::mutex>> stripe;
  if (cache_) stripe.emplace(stripe_of(storage));
  try {
    auto conn = db_->acquire();
    std::optional<Transaction> fenced;  // the fence and the delete, at once
    if (fence_) fenced.emplace(conn), fence_(conn, storage);
    Statement remove(conn, "DELETE FROM files WHERE storage = ? AND path = ?");
    remove.bind(1, storage).bind_blob(2, path).run();
    const bool deleted = remove.changes() > 0;
    if (fenced) fenced->commit();
    if (cache_) cache_->erase(storage, path);
    return deleted;
  } catch (...) {
    if (cache_) cache_->drop(storage);
    throw;
  }
}

size_t Metadata::delete_prefix(const std::string& storage, const std::string& path_prefix) {
  std::optional<std::lock_guard<std::mutex>> stripe;
  if (cache_) stripe.emplace(stripe_of(storage));
  try {
    auto conn = db_->acquire();
    std::optional<Transaction> fenced;  // the fence and the delete, at once
    if (fence_) fenced.emplace(conn), fence_(conn, storage);
    PrefixFilter filter = prefix_filter({path_prefix});
    Statement remove(conn, "DELETE FROM files WHERE storage = ?" + filter.sql);
    remove.add(storage);
    for (const auto& value : filter.values) remove.add_blob(value);
    remove.run();
    const size_t deleted = static_cast<size_t>(remove.changes());
    if (fenced) fenced->commit();
    if (cache_) cache_->erase_prefix(storage, path_prefix);
    return deleted;
  } catch (...) {
    if (cache_) cache_->drop(storage);
    throw;
  }
}

// --- the database ----------------------------------------------------------------------

std::optional<FileRecord> Metadata::find_file_in_database(const std::string& storage,
                                                          const std::string& path) {
  auto conn = db_->acquire();
  Statement query(conn, std::string("SELECT ") + kFileColumns + " FROM files WHERE storage = ? AND path = ?");
  query.bind(1, storage).bind_blob(2, path);
  if (!query.step()) return std::nullopt;
  return read_file_row(query);
}

// Returns the row as it now is in the database.
FileRecord Metadata::write_file(const FileRecord& record, bool reset_created) {
  auto conn = db_->acquire();
  const bool postgres = conn.backend() == db::Backend::kPostgres;
  const int64_t created_at =
      record.created_at != 0 ? record.created_at : static_cast<int64_t>(std::time(nullptr));
  FileRecord stored = record;
  stored.created_at = created_at;
  // A new position (created_at, seq) for a new file or one whose created_at is reset: the
  // upsert. On PostgreSQL the sequence number is taken in the same statement (a
  // data-modifying WITH), one round trip instead of a transaction of four.
  const std::string upsert_tail =
      " ON CONFLICT (storage, path) DO UPDATE SET "
      "created_at = excluded.created_at, seq = excluded.seq, size = excluded.size, "
      "etag = excluded.etag, mime = excluded.mime, mtime_ns = excluded.mtime_ns";
  auto upsert = [&] {
    if (postgres) {
      Statement insert(conn, std::string("WITH bumped AS (UPDATE counters SET value = value + 1 WHERE name = "
                                         "'file_seq' RETURNING value) INSERT INTO files (") +
                                 kFileColumns + ") SELECT ?, ?, ?, bumped.value, ?, ?, ?, ? FROM bumped" +
                                 upsert_tail + " RETURNING seq");
      insert.bind(1, record.storage).bind_blob(2, record.path).bind(3, created_at);
      insert.bind(4, static_cast<int64_t>(record.size)).bind(5, record.etag).bind(6, record.mime);
      insert.bind(7, record.mtime_ns);
      if (!insert.step()) throw std::runtime_error("metadata: file_seq counter is missing");
      stored.seq = insert.integer(0);
      insert.run();
      return;
    }
    Statement insert(conn, std::string("INSERT INTO files (") + kFileColumns +
                               ") VALUES (?, ?, ?, ?, ?, ?, ?, ?)" + upsert_tail);
    stored.seq = next_file_seq(conn);
    insert.bind(1, record.storage).bind_blob(2, record.path).bind(3, created_at).bind(4, stored.seq);
    insert.bind(5, static_cast<int64_t>(record.size)).bind(6, record.etag).bind(7, record.mime);
    insert.bind(8, record.mtime_ns);
    insert.run();
  };
  if (reset_created && !fence_ && postgres) {
    upsert();  // one statement: its own transaction
    return stored;
  }
  Transaction transaction(conn);
  if (fence_) fence_(conn, record.storage);
  // Whether the row exists matters only when its position is kept.
  std::optional<Position> kept;
  if (!reset_created && (kept = file_position(conn, record.storage, record.path))) {
    stored.created_at = kept->created_at;
    stored.seq = kept->seq;
    Statement update(
        conn, "UPDATE files SET size = ?, etag = ?, mime = ?, mtime_ns = ? WHERE storage = ? AND path = ?");
    update.bind(1, static_cast<int64_t>(record.size)).bind(2, record.etag).bind(3, record.mime);
    update.bind(4, record.mtime_ns).bind(5, record.storage).bind_blob(6, record.path);
    update.run();
  } else {
    upsert();
  }
  transaction.commit();
  return stored;
}

// Pages over (created_at, seq), which is unique because seq is. With only before_path
// the query walks backwards from the cursor (so the page is the `limit` rows right
// before it) and the result is flipped back to ascending order. A cursor path with no
// row gives an empty page: the position it named is gone.
FilePage Metadata::list_files_in_database(const std::string& storage,
                                          const std::vector<std::string>& path_prefixes, size_t limit,
                                          const std::optional<std::string>& after_path,
                                          const std::optional<std::string>& before_path) {
  auto conn = db_->acquire();
  FilePage page;
  std::optional<Position> after, before;
  if (after_path && !(after = file_position(conn, storage, *after_path))) return page;
  if (before_path && !(before = file_position(conn, storage, *before_path))) return page;
  bool backwards = before && !after;

  PrefixFilter filter = prefix_filter(path_prefixes);
  std::string sql = std::string("SELECT ") + kFileColumns + " FROM files WHERE storage = ?";
  if (after) sql += " AND (created_at, seq) > (?, ?)";
  if (before) sql += " AND (created_at, seq) < (?, ?)";
  sql += filter.sql;
  sql += backwards ? " ORDER BY created_at DESC, seq DESC" : " ORDER BY created_at, seq";
  sql += " LIMIT ?";

  Statement query(conn, sql);
  query.add(storage);
  if (after) query.add(after->created_at).add(after->seq);
  if (before) query.add(before->created_at).add(before->seq);
  for (const auto& value : filter.values) query.add_blob(value);
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

std::vector<FileRecord> Metadata::files_of_in_database(const std::string& storage, size_t limit) {
  auto conn = db_->acquire();
  Statement query(conn, std::string("SELECT ") + kFileColumns +
                            " FROM files WHERE storage = ? ORDER BY created_at, seq LIMIT ?");
  query.bind(1, storage).bind(2, static_cast<int64_t>(std::min<size_t>(limit, INT64_MAX)));
  std::vector<FileRecord> out;
  while (query.step()) out.push_back(read_file_row(query));
  return out;
}

uint64_t Metadata::total_bytes() {
  auto conn = db_->acquire();
  Statement query(conn, "SELECT COALESCE(SUM(size), 0) FROM files");
  return query.step() ? static_cast<uint64_t>(query.integer(0)) : 0;
}

uint64_t Metadata::owner_bytes(const std::string& owner) {
  if (!storable(owner)) return 0;
  auto conn = db_->acquire();
  // The files of the owner's containers, their memory checkpoints, and E2B's snapshots
  // (store/e2b_records.h: each keeps a copy of a sandbox's files, and memory, for as long
  // as it is not deleted).
  Statement query(
      conn,
      "SELECT COALESCE((SELECT SUM(f.size) FROM containers c JOIN files f ON f.storage = c.storage "
      "WHERE c.owner = ?), 0) + COALESCE((SELECT SUM(memory_bytes) FROM containers WHERE owner = ?), 0) + "
      "COALESCE((SELECT SUM(bytes) FROM e2b_snapshots WHERE owner = ?), 0)");
  query.bind(1, owner).bind(2, owner).bind(3, owner);
  return query.step() ? static_cast<uint64_t>(query.integer(0)) : 0;
}

}  // namespace sandboxd::store
