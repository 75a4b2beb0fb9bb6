// The manifest of each container's durable copy in the sessions bucket (storage.backend
// s3): one row per file (path, size, mode, mtime, MD5, the object holding its bytes,
// a version), and a generation per container that every change bumps, with the writer
// (the instance) that made it. A local copy records the generation it matches in a
// marker (cluster/container_durability.h); a generation written by another instance means
// the local copy is stale.
//
// Objects are immutable and uniquely named: replacing or removing a row hands back the
// old object's key for the caller to delete after the change is committed (a crash in
// between leaves an orphan object, never a row without its bytes).
//
// On the metadata database (store/database.h, SQLite or PostgreSQL; the tables are made
// by store/schema.cc). Paths are bytes (BYTEA in PostgreSQL). `epoch` is the writer's lease epoch (0 in
// single-host mode), for fencing in a cluster.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/database.h"

namespace sandboxd::store {

struct ManifestRow {
  std::string storage;
  std::string path;  // sandbox path (exact bytes)
  uint64_t size = 0;
  uint32_t mode = 0644;  // permission bits
  int64_t mtime_ns = 0;
  std::string md5;  // hex, the file's etag
  std::string object_key;
  int64_t version = 0;  // bumped on every replacement of this path
  int64_t epoch = 0;    // the writer's lease epoch (what the fence checked; 0 without one)
};

struct ManifestState {
  int64_t generation = 0;  // 0: the container has never had a manifest row
  std::string writer;      // the instance that made the last change
};

class ManifestStore {
 public:
  // A SQLite file (opened for this store alone).
  explicit ManifestStore(const std::string& db_path);
  // The metadata database (brought up to the newest schema).
  explicit ManifestStore(std::shared_ptr<db::Database> database);
  ~ManifestStore();
  ManifestStore(const ManifestStore&) = delete;
  ManifestStore& operator=(const ManifestStore&) = delete;

  std::vector<ManifestRow> rows(const std::string& storage);
  ManifestState state(const std::string& storage);

  struct Change {
    bool applied = false;
    std::optional<std::string> replaced_object;  // to delete once this returns
    int64_t generation = 0;
  };
  // Inserts or replaces the row of (storage, path). With `expected_version`, only when
  // the current row has that version (0: no row): a flush that read the tree before an
  // upload replaced the file never puts the older content back over it.
  Change put(const ManifestRow& row, const std::string& writer,
             std::optional<int64_t> expected_version = std::nullopt);
  Change remove(const std::string& storage, const std::string& path, const std::string& writer,
                std::optional<int64_t> expected_version = std::nullopt);
  // Every row of a container (deleted); returns their objects.
  std::vector<std::string> remove_all(const std::string& storage);

  // Cluster mode: put and remove run this inside their transaction, as Metadata's file
  // writes do (Metadata::set_write_fence); it throws FencedError when the container's
  // lease has moved on to a newer epoch or is gone, and returns the writer's epoch,
  // which put() records in the row. Set before serving.
  using WriteFence = std::function<int64_t(db::Connection& conn, const std::string& storage)>;
  void set_write_fence(WriteFence fence) { fence_ = std::move(fence); }

 private:
  std::shared_ptr<db::Database> db_;
  WriteFence fence_;
};

}  // namespace sandboxd::store
