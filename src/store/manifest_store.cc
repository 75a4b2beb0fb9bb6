#include "store/manifest_store.h"

#include <signal.h>

#include <atomic>
#include <optional>
#include <string>

#include "base/failpoint.h"

#include "store/schema.h"

namespace sandboxd::store {
namespace {

using db::Connection;
using db::Statement;
using db::Transaction;

std::optional<ManifestRow> find_row(Connection& conn, const std::string& storage, const std::string& path) {
  Statement select(conn,
                   "SELECT size, mode, mtime_ns, md5, object_key, version, epoch FROM manifest WHERE storage "
                   "= ? AND path = ?");
  select.add(storage).add_blob(path);
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

int64_t bump_generation(Connection& conn, const std::string& storage, const std::string& writer) {
  Statement upsert(conn,
                   "INSERT INTO manifest_generations (storage, generation, writer) VALUES (?, 1, ?) "
                   "ON CONFLICT (storage) DO UPDATE SET generation = manifest_generations.generation + 1, "
                   "writer = excluded.writer RETURNING generation");
  upsert.add(storage).add(writer);
  upsert.step();
  return upsert.integer(0);
}

// Failpoint STOP_IN_FENCED_WRITE=<sandbox path> (base/failpoint.h) stops this whole process (SIGSTOP, as
// `kill -STOP` or a paused VM would), once, right after a manifest write of that path passed the fence: its
// transaction open and the lease row locked, what a holder paused inside a flush leaves the other replicas.
void failpoint_stop_in_fenced_write(const std::string& path) {
  static const std::optional<std::string> wanted = failpoint("STOP_IN_FENCED_WRITE");
  static std::atomic<bool> fired{false};
  if (wanted && path == *wanted && !fired.exchange(true)) raise(SIGSTOP);
}

}  // namespace

ManifestStore::ManifestStore(const std::string& db_path) : ManifestStore(db::open_sqlite(db_path)) {}

ManifestStore::ManifestStore(std::shared_ptr<db::Database> database) : db_(std::move(database)) {
  schema::migrate(*db_);
}

ManifestStore::~ManifestStore() = default;

std::vector<ManifestRow> ManifestStore::rows(const std::string& storage) {
  auto conn = db_->acquire();
  Statement select(
      conn,
      "SELECT path, size, mode, mtime_ns, md5, object_key, version, epoch FROM manifest WHERE storage = ?");
  select.add(storage);
  std::vector<ManifestRow> out;
  while (select.step()) {
    ManifestRow row;
    row.storage = storage;
    row.path = select.blob(0);
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
  auto conn = db_->acquire();
  Statement select(conn, "SELECT generation, writer FROM manifest_generations WHERE storage = ?");
  select.add(storage);
  if (!select.step()) return {};
  return ManifestState{select.integer(0), select.text(1)};
}

ManifestStore::Change ManifestStore::put(const ManifestRow& row, const std::string& writer,
                                         std::optional<int64_t> expected_version) {
  auto conn = db_->acquire();
  Transaction transaction(conn);
  // A holder whose lease moved on (or whose container was deleted) writes nothing.
  const int64_t epoch = fence_ ? fence_(conn, row.storage) : row.epoch;
  if (fence_) failpoint_stop_in_fenced_write(row.path);
  // The generation first: its row lock orders this container's manifest writes, so on
  // PostgreSQL (READ COMMITTED) the version read next is not changed by another writer
  // before this one commits (SQLite's BEGIN IMMEDIATE already orders them).
  const int64_t generation = bump_generation(conn, row.storage, writer);
  auto current = find_row(conn, row.storage, row.path);
  Change change;
  if (expected_version && (current ? current->version : 0) != *expected_version) return change;
  Statement upsert(
      conn,
      "INSERT INTO manifest (storage, path, size, mode, mtime_ns, md5, object_key, version, epoch) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (storage, path) DO UPDATE SET size = excluded.size, "
      "mode = excluded.mode, mtime_ns = excluded.mtime_ns, md5 = excluded.md5, "
      "object_key = excluded.object_key, version = excluded.version, epoch = excluded.epoch");
  upsert.add(row.storage)
      .add_blob(row.path)
      .add(static_cast<int64_t>(row.size))
      .add(static_cast<int64_t>(row.mode));
  upsert.add(row.mtime_ns)
      .add(row.md5)
      .add(row.object_key)
      .add((current ? current->version : 0) + 1)
      .add(epoch);
  upsert.run();
  change.generation = generation;
  transaction.commit();
  change.applied = true;
  if (current && current->object_key != row.object_key) change.replaced_object = current->object_key;
  return change;
}

ManifestStore::Change ManifestStore::remove(const std::string& storage, const std::string& path,
                                            const std::string& writer,
                                            std::optional<int64_t> expected_version) {
  auto conn = db_->acquire();
  Transaction transaction(conn);
  if (fence_) fence_(conn, storage);
  const int64_t generation = bump_generation(conn, storage, writer);  // first, as in put()
  auto current = find_row(conn, storage, path);
  Change change;
  if (!current || (expected_version && current->version != *expected_version)) return change;
  Statement erase(conn, "DELETE FROM manifest WHERE storage = ? AND path = ?");
  erase.add(storage).add_blob(path);
  erase.run();
  change.generation = generation;
  transaction.commit();
  change.applied = true;
  change.replaced_object = current->object_key;
  return change;
}

std::vector<std::string> ManifestStore::remove_all(const std::string& storage) {
  auto conn = db_->acquire();
  Transaction transaction(conn);
  std::vector<std::string> objects;
  {
    Statement select(conn, "SELECT object_key FROM manifest WHERE storage = ?");
    select.add(storage);
    while (select.step()) objects.push_back(select.text(0));
  }
  Statement erase(conn, "DELETE FROM manifest WHERE storage = ?");
  erase.add(storage);
  erase.run();
  Statement forget(conn, "DELETE FROM manifest_generations WHERE storage = ?");
  forget.add(storage);
  forget.run();
  transaction.commit();
  return objects;
}

}  // namespace sandboxd::store
