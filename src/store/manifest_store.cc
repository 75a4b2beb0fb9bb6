#include "store/manifest_store.h"

#include "store/sqlite.h"

namespace sandboxd::store {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS manifest (
  storage    TEXT    NOT NULL,
  path       TEXT    NOT NULL,
  size       INTEGER NOT NULL,
  mode       INTEGER NOT NULL,
  mtime_ns   INTEGER NOT NULL,
  md5        TEXT    NOT NULL,
  object_key TEXT    NOT NULL,
  version    INTEGER NOT NULL,
  epoch      INTEGER NOT NULL,
  PRIMARY KEY (storage, path)
);
CREATE TABLE IF NOT EXISTS manifest_generations (
  storage    TEXT    PRIMARY KEY,
  generation INTEGER NOT NULL,
  writer     TEXT    NOT NULL
);
)sql";

using sqlite::Statement;
using sqlite::Transaction;

std::optional<ManifestRow> find_row(sqlite3* db, const std::string& storage, const std::string& path) {
  Statement select(db, "SELECT size, mode, mtime_ns, md5, object_key, version, epoch FROM manifest WHERE storage = ? AND path = ?");
  select.add(storage).add(path);
  if (!select.step()) return std::nullopt;
  ManifestRow row;
  row.storage = storage;
  row.path = path;
  row.size = static_cast<uint64_t>(select.integer(0));
  row.mode = static_cast<uint32_t>(select.integer(1));
  row.mtime_ns = select.integer(2);
  row.md5 = select.text(3);
  row.object_key = select.text(4);
  row.version = select.integer(5);
  row.epoch = select.integer(6);
  return row;
}

}  // namespace

ManifestStore::ManifestStore(const std::string& db_path) : db_(sqlite::open_database(db_path)) {
  try {
    sqlite::exec(db_, kSchema);
  } catch (...) {
    sqlite3_close(db_);
    throw;
  }
}

ManifestStore::~ManifestStore() { sqlite3_close(db_); }

std::vector<ManifestRow> ManifestStore::rows(const std::string& storage) {
  std::lock_guard lock(mutex_);
  Statement select(db_, "SELECT path, size, mode, mtime_ns, md5, object_key, version, epoch FROM manifest WHERE storage = ?");
  select.add(storage);
  std::vector<ManifestRow> out;
  while (select.step()) {
    ManifestRow row;
    row.storage = storage;
    row.path = select.text(0);
    row.size = static_cast<uint64_t>(select.integer(1));
    row.mode = static_cast<uint32_t>(select.integer(2));
    row.mtime_ns = select.integer(3);
    row.md5 = select.text(4);
    row.object_key = select.text(5);
    row.version = select.integer(6);
    row.epoch = select.integer(7);
    out.push_back(std::move(row));
  }
  return out;
}

ManifestState ManifestStore::state(const std::string& storage) {
  std::lock_guard lock(mutex_);
  Statement select(db_, "SELECT generation, writer FROM manifest_generations WHERE storage = ?");
  select.add(storage);
  if (!select.step()) return {};
  return ManifestState{select.integer(0), select.text(1)};
}

int64_t ManifestStore::bump_generation(const std::string& storage, const std::string& writer) {
  Statement upsert(db_,
                   "INSERT INTO manifest_generations (storage, generation, writer) VALUES (?, 1, ?) "
                   "ON CONFLICT (storage) DO UPDATE SET generation = generation + 1, writer = excluded.writer "
                   "RETURNING generation");
  upsert.add(storage).add(writer);
  upsert.step();
  return upsert.integer(0);
}

ManifestStore::Change ManifestStore::put(const ManifestRow& row, const std::string& writer,
                                         std::optional<int64_t> expected_version) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_);
  if (fence_) fence_(db_, row.storage);  // a holder whose lease moved on writes nothing
  auto current = find_row(db_, row.storage, row.path);
  Change change;
  if (expected_version && (current ? current->version : 0) != *expected_version) return change;
  Statement upsert(db_,
                   "INSERT INTO manifest (storage, path, size, mode, mtime_ns, md5, object_key, version, epoch) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (storage, path) DO UPDATE SET size = excluded.size, "
                   "mode = excluded.mode, mtime_ns = excluded.mtime_ns, md5 = excluded.md5, "
                   "object_key = excluded.object_key, version = excluded.version, epoch = excluded.epoch");
  upsert.add(row.storage).add(row.path).add(static_cast<int64_t>(row.size)).add(static_cast<int64_t>(row.mode));
  upsert.add(row.mtime_ns).add(row.md5).add(row.object_key).add((current ? current->version : 0) + 1).add(row.epoch);
  upsert.run();
  change.generation = bump_generation(row.storage, writer);
  transaction.commit();
  change.applied = true;
  if (current && current->object_key != row.object_key) change.replaced_object = current->object_key;
  return change;
}

ManifestStore::Change ManifestStore::remove(const std::string& storage, const std::string& path,
                                            const std::string& writer, std::optional<int64_t> expected_version) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_);
  if (fence_) fence_(db_, storage);
  auto current = find_row(db_, storage, path);
  Change change;
  if (!current || (expected_version && current->version != *expected_version)) return change;
  Statement erase(db_, "DELETE FROM manifest WHERE storage = ? AND path = ?");
  erase.add(storage).add(path);
  erase.run();
  change.generation = bump_generation(storage, writer);
  transaction.commit();
  change.applied = true;
  change.replaced_object = current->object_key;
  return change;
}

std::vector<std::string> ManifestStore::remove_all(const std::string& storage) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_);
  std::vector<std::string> objects;
  {
    Statement select(db_, "SELECT object_key FROM manifest WHERE storage = ?");
    select.add(storage);
    while (select.step()) objects.push_back(select.text(0));
  }
  Statement erase(db_, "DELETE FROM manifest WHERE storage = ?");
  erase.add(storage);
  erase.run();
  Statement forget(db_, "DELETE FROM manifest_generations WHERE storage = ?");
  forget.add(storage);
  forget.run();
  transaction.commit();
  return objects;
}

}  // namespace sandboxd::store
