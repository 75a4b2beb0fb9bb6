#include "store/e2b_records.h"

#include <boost/json.hpp>

#include "store/schema.h"

namespace sandboxd::store {
namespace {

namespace json = boost::json;
using db::Statement;
using db::Transaction;

// e2b_sandboxes.auto_pause: 0 ends the sandbox at its end time, 1 pauses it, this
// pauses it keeping its files only.
constexpr int64_t kAutoPauseFilesOnly = 2;

constexpr const char* kColumns =
    "s.id, s.owner, s.template_id, s.metadata, s.env_vars, s.started_at_ms, s.end_at_ms, s.auto_pause, "
    "s.paused";

std::string encode_map(const std::map<std::string, std::string>& map) {
  json::object out;
  for (const auto& [key, value] : map) out[key] = value;
  return json::serialize(out);
}

std::map<std::string, std::string> decode_map(const std::string& text) {
  std::map<std::string, std::string> out;
  boost::system::error_code ec;
  json::value value = json::parse(text, ec);
  if (ec || !value.is_object()) return out;
  for (const auto& [key, item] : value.as_object())
    if (item.is_string()) out[std::string(key)] = std::string(item.as_string());
  return out;
}

E2bRecord read_record(const Statement& row) {
  E2bRecord record;
  record.id = row.text(0);
  record.owner = row.text(1);
  record.template_id = row.text(2);
  record.metadata = decode_map(row.text(3));
  record.env_vars = decode_map(row.text(4));
  record.started_at_ms = row.integer(5);
  record.end_at_ms = row.integer(6);
  record.auto_pause = row.integer(7) != 0;
  record.auto_pause_memory = row.integer(7) != kAutoPauseFilesOnly;
  record.paused = row.integer(8) != 0;
  return record;
}

std::optional<E2bRecord> find_on(db::Connection& conn, const std::string& owner, const std::string& id,
                                 bool for_update) {
  std::string sql =
      std::string("SELECT ") + kColumns + " FROM e2b_sandboxes s WHERE s.id = ? AND s.owner = ?";
  // (SQLite's write transaction holds the database already.)
  if (for_update && conn.backend() == db::Backend::kPostgres) sql += " FOR UPDATE";
  Statement query(conn, sql);
  query.add(id).add(owner);
  if (!query.step()) return std::nullopt;
  return read_record(query);
}

size_t bytes_of(const E2bRecord& record) {
  // The record, its strings, and about what a map spends on each entry.
  size_t bytes = sizeof(E2bRecord) + record.id.size() + record.owner.size() + record.template_id.size();
  for (const auto* map : {&record.metadata, &record.env_vars})
    for (const auto& [key, value] : *map) bytes += key.size() + value.size() + 96;
  return bytes;
}

}  // namespace

// The held records, by sandbox id, least recently used first out.
class E2bRecords::Cache {
 public:
  explicit Cache(E2bCacheLimits limits) : limits_(limits) {}

  Cached find(const std::string& owner, const std::string& id, int64_t token, E2bRecord& out) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return Cached::kNotHeld;
    if (it->second.token != token) {  // read under another lease: never served
      erase_entry(it);
      return Cached::kNotHeld;
    }
    if (it->second.record.owner != owner) return Cached::kNotFound;
    recent_.splice(recent_.begin(), recent_, it->second.recent);
    out = it->second.record;
    return Cached::kFound;
  }

  void install(const E2bRecord& record, const E2bHold& hold) {
    const size_t bytes = bytes_of(record);
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(record.id); it != entries_.end()) erase_entry(it);
    if (bytes > limits_.max_bytes / 10 || limits_.max_records == 0) return;
    recent_.push_front(record.id);
    Entry& entry = entries_[record.id];
    entry.record = record;
    entry.token = hold.token;
    entry.storage = hold.storage;
    entry.bytes = bytes;
    entry.recent = recent_.begin();
    bytes_ += bytes;
    if (!hold.storage.empty()) id_of_storage_[hold.storage] = record.id;
    while (entries_.size() > limits_.max_records || bytes_ > limits_.max_bytes)
      erase_entry(entries_.find(recent_.back()));
  }

  // A committed write's change to a held record (its sizes stay: only the end time and
  // the paused mark change after a record is made).
  template <typename Change>
  void update(const std::string& id, Change change) {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(id); it != entries_.end()) change(it->second.record);
  }

  void erase(const std::string& id) {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(id); it != entries_.end()) erase_entry(it);
  }

  void forget_storage(const std::string& storage) {
    std::lock_guard lock(mutex_);
    auto named = id_of_storage_.find(storage);
    if (named == id_of_storage_.end()) return;
    if (auto it = entries_.find(named->second); it != entries_.end()) erase_entry(it);
    id_of_storage_.erase(storage);
  }

  size_t size() const {
    std::lock_guard lock(mutex_);
    return entries_.size();
  }

 private:
  struct Entry {
    E2bRecord record;
    int64_t token = 0;
    std::string storage;
    size_t bytes = 0;
    std::list<std::string>::iterator recent;
  };

  void erase_entry(std::unordered_map<std::string, Entry>::iterator it) {
    if (!it->second.storage.empty())
      if (auto named = id_of_storage_.find(it->second.storage);
          named != id_of_storage_.end() && named->second == it->first)
        id_of_storage_.erase(named);
    bytes_ -= it->second.bytes;
    recent_.erase(it->second.recent);
    entries_.erase(it);
  }

  const E2bCacheLimits limits_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;
  std::unordered_map<std::string, std::string> id_of_storage_;
  std::list<std::string> recent_;  // ids, most recently used first
  size_t bytes_ = 0;
};

E2bRecords::E2bRecords(std::shared_ptr<db::Database> database) : db_(std::move(database)) {
  schema::migrate(*db_);
}

E2bRecords::~E2bRecords() = default;

void E2bRecords::enable_cache(E2bCacheLimits limits) { cache_ = std::make_unique<Cache>(limits); }

E2bRecords::Cached E2bRecords::cached_find(const std::string& owner, const std::string& id, int64_t token,
                                           E2bRecord& out) {
  return cache_ ? cache_->find(owner, id, token, out) : Cached::kNotHeld;
}

void E2bRecords::forget_storage(const std::string& storage) {
  if (cache_) cache_->forget_storage(storage);
}

size_t E2bRecords::cached() const { return cache_ ? cache_->size() : 0; }

std::mutex& E2bRecords::stripe_of(const std::string& id) {
  return stripes_[std::hash<std::string>{}(id) % stripes_.size()];
}

template <typename Write>
auto E2bRecords::under_stripe(const std::string& id, Write write) {
  std::lock_guard stripe(stripe_of(id));
  try {
    return write();
  } catch (...) {
    if (cache_) cache_->erase(id);  // committed or not: unknown
    throw;
  }
}

bool E2bRecords::insert(const E2bRecord& record, const std::optional<E2bHold>& hold) {
  return under_stripe(record.id, [&] {
    const bool inserted = insert_row(record);
    if (inserted && hold && cache_) {
      // Held as a read would find it (its maps through the column's JSON and back).
      E2bRecord stored = record;
      stored.metadata = decode_map(encode_map(record.metadata));
      stored.env_vars = decode_map(encode_map(record.env_vars));
      cache_->install(stored, *hold);
    }
    return inserted;
  });
}

bool E2bRecords::insert_row(const E2bRecord& record) {
  auto conn = db_->acquire();
  Transaction transaction(conn);
  Statement insert(
      conn,
      "INSERT INTO e2b_sandboxes (id, owner, template_id, metadata, env_vars, started_at_ms, "
      "end_at_ms, auto_pause, paused) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING");
  insert.add(record.id)
      .add(record.owner)
      .add(record.template_id)
      .add(encode_map(record.metadata))
      .add(encode_map(record.env_vars))
      .add(record.started_at_ms)
      .add(record.end_at_ms)
      .add(record.auto_pause ? (record.auto_pause_memory ? int64_t{1} : kAutoPauseFilesOnly) : int64_t{0})
      .add(int64_t{record.paused});
  insert.run();
  if (insert.changes() == 0) return false;
  for (const auto& [name, value] : record.metadata) {
    Statement pair(conn,
                   "INSERT INTO e2b_sandbox_metadata (sandbox_id, owner, name, value) VALUES (?, ?, ?, ?)");
    pair.add(record.id).add(record.owner).add_blob(name).add_blob(value);
    pair.run();
  }
  transaction.commit();
  return true;
}

std::optional<E2bRecord> E2bRecords::find(const std::string& owner, const std::string& id,
                                          const std::optional<E2bHold>& hold) {
  if (!hold || !cache_) {
    auto conn = db_->acquire();
    return find_on(conn, owner, id, /*for_update=*/false);
  }
  // Under the stripe: no write of this sandbox commits between the read and the copy.
  std::lock_guard stripe(stripe_of(id));
  std::optional<E2bRecord> found;
  {
    auto conn = db_->acquire();
    found = find_on(conn, owner, id, /*for_update=*/false);
  }
  if (found) cache_->install(*found, *hold);
  return found;
}

E2bRecordPage E2bRecords::list(const E2bRecordQuery& query) {
  const size_t limit = std::min(std::max<size_t>(query.limit, 1), kMaxPage);
  std::string sql = std::string("SELECT ") + kColumns;
  // With a metadata filter the first pair's index rows narrow the walk; every other
  // pair is a lookup by (sandbox, name). The order is the start time's, then the id's
  // (one owner's sandboxes: as many as its container quota allows).
  auto pairs = query.metadata.begin();
  const bool by_pair = pairs != query.metadata.end();
  if (by_pair)
    sql +=
        " FROM e2b_sandbox_metadata m JOIN e2b_sandboxes s ON s.id = m.sandbox_id"
        " WHERE m.owner = ? AND m.name = ? AND m.value = ? AND s.owner = ?";
  else
    sql += " FROM e2b_sandboxes s WHERE s.owner = ?";
  const bool after = !query.after_id.empty();
  if (after)
    sql += query.newest_first ? " AND (s.started_at_ms < ? OR (s.started_at_ms = ? AND s.id < ?))"
                              : " AND (s.started_at_ms > ? OR (s.started_at_ms = ? AND s.id > ?))";
  sql += " AND s.started_at_ms >= ? AND s.started_at_ms <= ?";
  if (query.paused) sql += " AND s.paused = ?";
  if (query.template_id) sql += " AND s.template_id = ?";
  for (size_t i = 1; i < query.metadata.size(); ++i)
    sql +=
        " AND EXISTS (SELECT 1 FROM e2b_sandbox_metadata o WHERE o.sandbox_id = s.id AND o.name = ? AND "
        "o.value = ?)";
  sql += query.newest_first ? " ORDER BY s.started_at_ms DESC, s.id DESC LIMIT ?"
                            : " ORDER BY s.started_at_ms, s.id LIMIT ?";
  auto conn = db_->acquire();
  Statement select(conn, sql);
  if (by_pair) {
    select.add(query.owner).add_blob(pairs->first).add_blob(pairs->second).add(query.owner);
    ++pairs;
  } else {
    select.add(query.owner);
  }
  if (after) select.add(query.after_started_ms).add(query.after_started_ms).add(query.after_id);
  select.add(query.started_from_ms).add(query.started_to_ms);
  if (query.paused) select.add(int64_t{*query.paused});
  if (query.template_id) select.add(*query.template_id);
  for (; pairs != query.metadata.end(); ++pairs) select.add_blob(pairs->first).add_blob(pairs->second);
  select.add(static_cast<int64_t>(limit + 1));  // one more: whether there is a next page
  E2bRecordPage page;
  while (select.step()) {
    if (page.records.size() == limit) {
      page.has_more = true;
      break;
    }
    page.records.push_back(read_record(select));
  }
  return page;
}

bool E2bRecords::set_end(const std::string& owner, const std::string& id, int64_t end_at_ms) {
  return under_stripe(id, [&] {
    {
      auto conn = db_->acquire();
      Statement update(conn, "UPDATE e2b_sandboxes SET end_at_ms = ? WHERE id = ? AND owner = ?");
      update.add(end_at_ms).add(id).add(owner);
      update.run();
      if (update.changes() == 0) return false;
    }
    if (cache_) cache_->update(id, [end_at_ms](E2bRecord& held) { held.end_at_ms = end_at_ms; });
    return true;
  });
}

bool E2bRecords::mark_paused(const std::string& owner, const std::string& id) {
  return under_stripe(id, [&] {
    {
      auto conn = db_->acquire();
      Statement update(conn, "UPDATE e2b_sandboxes SET paused = 1 WHERE id = ? AND owner = ? AND paused = 0");
      update.add(id).add(owner);
      update.run();
      if (update.changes() == 0) return false;
    }
    if (cache_) cache_->update(id, [](E2bRecord& held) { held.paused = true; });
    return true;
  });
}

bool E2bRecords::mark_paused_if_due(const std::string& owner, const std::string& id, int64_t now_ms) {
  return under_stripe(id, [&] {
    {
      auto conn = db_->acquire();
      Statement update(conn,
                       "UPDATE e2b_sandboxes SET paused = 1 WHERE id = ? AND owner = ? AND paused = 0 AND "
                       "end_at_ms <= ?");
      update.add(id).add(owner).add(now_ms);
      update.run();
      if (update.changes() == 0) return false;
    }
    if (cache_) cache_->update(id, [](E2bRecord& held) { held.paused = true; });
    return true;
  });
}

std::optional<bool> E2bRecords::resume(const std::string& owner, const std::string& id,
                                       std::optional<int64_t> end_at_least_ms, int64_t end_if_paused_ms) {
  return under_stripe(id, [&]() -> std::optional<bool> {
    int64_t end = 0;
    bool was_paused = false;
    {
      auto conn = db_->acquire();
      Transaction transaction(conn);
      auto record = find_on(conn, owner, id, /*for_update=*/true);
      if (!record) return std::nullopt;
      end = record->end_at_ms;
      if (end_at_least_ms)
        end = std::max(end, *end_at_least_ms);
      else if (record->paused)
        end = std::max(end, end_if_paused_ms);
      Statement update(conn, "UPDATE e2b_sandboxes SET paused = 0, end_at_ms = ? WHERE id = ? AND owner = ?");
      update.add(end).add(id).add(owner);
      update.run();
      transaction.commit();
      was_paused = record->paused;
    }
    if (cache_)
      cache_->update(id, [end](E2bRecord& held) {
        held.paused = false;
        held.end_at_ms = end;
      });
    return was_paused;
  });
}

bool E2bRecords::remove(const std::string& owner, const std::string& id) {
  return under_stripe(id, [&] {
    {
      auto conn = db_->acquire();
      Transaction transaction(conn);
      Statement remove(conn, "DELETE FROM e2b_sandboxes WHERE id = ? AND owner = ?");
      remove.add(id).add(owner);
      remove.run();
      if (remove.changes() == 0) return false;
      Statement pairs(conn, "DELETE FROM e2b_sandbox_metadata WHERE sandbox_id = ? AND owner = ?");
      pairs.add(id).add(owner);
      pairs.run();
      transaction.commit();
    }
    if (cache_) cache_->erase(id);
    return true;
  });
}

std::vector<E2bRecord> E2bRecords::due(int64_t now_ms, const E2bDueCursor& cursor, size_t limit) {
  auto conn = db_->acquire();
  Statement select(conn, std::string("SELECT ") + kColumns +
                             " FROM e2b_sandboxes s WHERE s.paused = 0 AND s.end_at_ms <= ? AND "
                             "(s.end_at_ms > ? OR (s.end_at_ms = ? AND s.id > ?)) ORDER BY s.end_at_ms, s.id "
                             "LIMIT ?");
  select.add(now_ms)
      .add(cursor.end_at_ms)
      .add(cursor.end_at_ms)
      .add(cursor.id)
      .add(static_cast<int64_t>(limit));
  std::vector<E2bRecord> out;
  while (select.step()) out.push_back(read_record(select));
  return out;
}

namespace {

constexpr const char* kSnapshotColumns = "id, owner, name, source_sandbox, created_at_ms, bytes, memory";

E2bSnapshotRecord read_snapshot(const Statement& row) {
  E2bSnapshotRecord snapshot;
  snapshot.id = row.text(0);
  snapshot.owner = row.text(1);
  snapshot.name = row.text(2);
  snapshot.source_sandbox = row.text(3);
  snapshot.created_at_ms = row.integer(4);
  snapshot.bytes = static_cast<uint64_t>(row.integer(5));
  snapshot.memory = row.integer(6) != 0;
  return snapshot;
}

}  // namespace

bool E2bRecords::insert_snapshot(const E2bSnapshotRecord& snapshot) {
  auto conn = db_->acquire();
  Transaction transaction(conn);
  if (!snapshot.name.empty()) {
    Statement taken(conn, "SELECT 1 FROM e2b_snapshots WHERE owner = ? AND name = ?");
    taken.add(snapshot.owner).add(snapshot.name);
    if (taken.step()) return false;
  }
  Statement insert(conn, std::string("INSERT INTO e2b_snapshots (") + kSnapshotColumns +
                             ") VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING");
  insert.add(snapshot.id)
      .add(snapshot.owner)
      .add(snapshot.name)
      .add(snapshot.source_sandbox)
      .add(snapshot.created_at_ms)
      .add(static_cast<int64_t>(snapshot.bytes))
      .add(int64_t{snapshot.memory});
  insert.run();
  if (insert.changes() == 0) return false;
  transaction.commit();
  return true;
}

std::optional<E2bSnapshotRecord> E2bRecords::find_snapshot(const std::string& owner, const std::string& key) {
  auto conn = db_->acquire();
  Statement query(conn, std::string("SELECT ") + kSnapshotColumns +
                            " FROM e2b_snapshots WHERE owner = ? AND (id = ? OR (name <> '' AND name = ?))");
  query.add(owner).add(key).add(key);
  if (!query.step()) return std::nullopt;
  return read_snapshot(query);
}

E2bSnapshotPage E2bRecords::list_snapshots(const E2bSnapshotQuery& query) {
  const size_t limit = std::min(std::max<size_t>(query.limit, 1), kMaxPage);
  std::string sql = std::string("SELECT ") + kSnapshotColumns + " FROM e2b_snapshots WHERE owner = ?";
  if (!query.source_sandbox.empty()) sql += " AND source_sandbox = ?";
  if (!query.key.empty()) sql += " AND (id = ? OR (name <> '' AND name = ?))";
  const bool after = !query.after_id.empty();
  if (after) sql += " AND (created_at_ms < ? OR (created_at_ms = ? AND id < ?))";
  sql += " ORDER BY created_at_ms DESC, id DESC LIMIT ?";
  auto conn = db_->acquire();
  Statement select(conn, sql);
  select.add(query.owner);
  if (!query.source_sandbox.empty()) select.add(query.source_sandbox);
  if (!query.key.empty()) select.add(query.key).add(query.key);
  if (after) select.add(query.after_created_ms).add(query.after_created_ms).add(query.after_id);
  select.add(static_cast<int64_t>(limit + 1));  // one more: whether there is a next page
  E2bSnapshotPage page;
  while (select.step()) {
    if (page.snapshots.size() == limit) {
      page.has_more = true;
      break;
    }
    page.snapshots.push_back(read_snapshot(select));
  }
  return page;
}

bool E2bRecords::remove_snapshot(const std::string& owner, const std::string& id) {
  auto conn = db_->acquire();
  Statement remove(conn, "DELETE FROM e2b_snapshots WHERE id = ? AND owner = ?");
  remove.add(id).add(owner);
  remove.run();
  return remove.changes() > 0;
}

size_t E2bRecords::count_snapshots(const std::string& owner) {
  auto conn = db_->acquire();
  Statement count(conn, "SELECT COUNT(*) FROM e2b_snapshots WHERE owner = ?");
  count.add(owner);
  return count.step() ? static_cast<size_t>(count.integer(0)) : 0;
}

bool E2bRecords::snapshot_exists(const std::string& id) {
  auto conn = db_->acquire();
  Statement find(conn, "SELECT 1 FROM e2b_snapshots WHERE id = ?");
  find.add(id);
  return find.step();
}

}  // namespace sandboxd::store
