// The metadata index: containers and files, in the metadata database (SQLite or
// PostgreSQL, store/database.h). File bodies live on disk; this index only says which
// files exist, since when, and what they hold.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/database.h"

namespace sandboxd::store {

struct ContainerRecord {
  std::string owner;
  std::string id;            // the client's container id
  std::string storage;       // internal directory name (never derived from the id)
  int64_t created_at = 0;    // unix seconds
  int64_t last_used_at = 0;  // unix seconds
};

struct FileRecord {
  std::string storage;     // container storage name
  std::string path;        // sandbox path, e.g. /mnt/user-data/outputs/chart.png
  int64_t created_at = 0;  // unix seconds, when first stored or first seen
  int64_t seq = 0;         // insertion order: ties in created_at sort by it
  uint64_t size = 0;
  std::string etag;  // MD5 hex of the content
  std::string mime;
  int64_t mtime_ns = 0;  // the body's mtime when etag was computed
};

struct FilePage {
  std::vector<FileRecord> files;
  bool has_more = false;
};

// Thread-safe (SQLite: one connection, serialised by a mutex, held for microseconds;
// PostgreSQL: a connection of the pool per call). Throws std::runtime_error on database
// failures.
class Metadata {
 public:
  // A SQLite database file of its own.
  explicit Metadata(const std::string& db_path);
  // Any database; its schema is migrated first.
  explicit Metadata(std::shared_ptr<db::Database> database);
  ~Metadata();
  Metadata(const Metadata&) = delete;
  Metadata& operator=(const Metadata&) = delete;

  // Which database it is on: the API runs PostgreSQL calls off its I/O threads.
  db::Backend backend() const { return db_->backend(); }

  std::optional<ContainerRecord> find_container(const std::string& owner, const std::string& id);
  // Inserts; if (owner, id) exists already, returns the existing record instead.
  ContainerRecord create_container(const ContainerRecord& record);
  void touch_container(const std::string& owner, const std::string& id, int64_t now);
  // Ordered by created_at, then id; `after_id` continues a page.
  std::vector<ContainerRecord> list_containers(const std::string& owner, size_t limit,
                                               const std::string& after_id);
  std::vector<ContainerRecord> all_containers();
  // What counts against quotas.containersPerOwner: the owner's containers plus its chat
  // threads that have none yet (a thread's container has the thread's id and is made on
  // its first turn, so each thread holds a claim on one), leaving `except_id` out of the
  // latter (the container being made for that thread takes its own claim).
  uint64_t containers_claimed(const std::string& owner, const std::string& except_id = "");
  // Removes the container and all its file records.
  void delete_container(const std::string& owner, const std::string& id);

  std::optional<FileRecord> find_file(const std::string& storage, const std::string& path);
  // Inserts or replaces (keeping created_at and seq of an existing row unless
  // `reset_created` is true, as for an overwrite by upload).
  void put_file(const FileRecord& record, bool reset_created);
  bool delete_file(const std::string& storage, const std::string& path);
  // Deletes every file whose path starts with `path_prefix`; returns how many.
  size_t delete_prefix(const std::string& storage, const std::string& path_prefix);
  // Files of a storage whose path starts with any of `path_prefixes`, ordered by
  // (created_at, seq). after/before are cursor paths (exclusive); limit rows at most.
  FilePage list_files(const std::string& storage, const std::vector<std::string>& path_prefixes, size_t limit,
                      const std::optional<std::string>& after_path,
                      const std::optional<std::string>& before_path);
  std::vector<FileRecord> files_of(const std::string& storage);
  uint64_t total_bytes();
  // The bytes of every file of the owner's containers (uploads and outputs as indexed).
  uint64_t owner_bytes(const std::string& owner);

  // Cluster mode (the lease's fence): runs inside the transaction of every write to a
  // container's file records, with that container's storage; throws (FencedError) to
  // refuse the write. Set once, before serving.
  using WriteFence = std::function<void(db::Connection& conn, const std::string& storage)>;
  void set_write_fence(WriteFence fence) { fence_ = std::move(fence); }

 private:
  WriteFence fence_;
  std::shared_ptr<db::Database> db_;
};

}  // namespace sandboxd::store
