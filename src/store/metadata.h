// The metadata index: containers and files, in the metadata database (SQLite or
// PostgreSQL, store/database.h). File bodies live on disk; this index only says which
// files exist, since when, and what they hold.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
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
  // Its own network options (E2B's allowInternetAccess and network.allowOut/denyOut), as
  // service/egress_options.h encodes them; empty: none, the operator's policy alone.
  std::string egress;
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
  bool operator==(const FileRecord&) const = default;
};

struct FilePage {
  std::vector<FileRecord> files;
  bool has_more = false;
};

// The bounds of the file records held in memory (store/file_cache.h).
struct FileCacheLimits {
  size_t max_records = 200'000;  // across all containers; 0: nothing is held
  size_t max_bytes = 64u << 20;  // their approximate memory
};

class FileCache;

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
  // Replaces the container's network options (ContainerRecord::egress) if (owner, id)
  // is still the container with this storage; false when it is not (deleted meanwhile).
  bool set_container_egress(const std::string& owner, const std::string& id, const std::string& storage,
                            const std::string& egress);
  // The bytes of the container's memory checkpoint now (0: none), if (owner, id) is still
  // the container with this storage.
  void set_container_memory_bytes(const std::string& owner, const std::string& id, const std::string& storage,
                                  uint64_t bytes);
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
  // The bytes of every file of the owner's containers (uploads and outputs as indexed),
  // and of their memory checkpoints.
  uint64_t owner_bytes(const std::string& owner);

  // The file records of the containers this process alone writes, held in memory
  // (store/file_cache.h): find_file, list_files and files_of answer from there without
  // a round trip, once a first read filled a container's records; every write of this
  // Metadata is applied there after it commits (serialised per container with its
  // application), and a write whose outcome is unknown (an error) forgets the container.
  // `scope` says, at each read, whether `storage`'s records may be served from memory
  // now and under which token (cluster mode: the lease's epoch while the lease is held
  // and its heartbeat recent; nullopt otherwise); without one, every container may be,
  // under token 0 (a single host: no other process writes its metadata). A read under
  // another token than the fill's never uses what was held. Set once, before serving.
  using CacheScope = std::function<std::optional<int64_t>(const std::string& storage)>;
  void enable_file_cache(FileCacheLimits limits, CacheScope scope = {});
  // Forgets a container's records (its lease released, lost or fenced).
  void forget_cached_files(const std::string& storage);
  // list_files from memory only: nullopt when the container's records are not held (the
  // caller then makes the call where a round trip may wait). Never blocks.
  std::optional<FilePage> cached_list_files(const std::string& storage,
                                            const std::vector<std::string>& path_prefixes, size_t limit,
                                            const std::optional<std::string>& after_path,
                                            const std::optional<std::string>& before_path);
  // list_containers from memory only (a single host holds its owners' container lists
  // as it holds file records): nullopt when not held. Never blocks.
  std::optional<std::vector<ContainerRecord>> cached_list_containers(const std::string& owner, size_t limit,
                                                                     const std::string& after_id);
  // What is held (for tests and the metrics).
  size_t cached_records() const;
  size_t cached_containers() const;

  // Cluster mode (the lease's fence): runs inside the transaction of every write to a
  // container's file records, with that container's storage; throws (FencedError) to
  // refuse the write. Set once, before serving.
  using WriteFence = std::function<void(db::Connection& conn, const std::string& storage)>;
  void set_write_fence(WriteFence fence) { fence_ = std::move(fence); }

 private:
  std::optional<int64_t> cache_token(const std::string& storage) const;
  bool holds_containers() const;
  ContainerRecord insert_container(const ContainerRecord& record);
  std::vector<ContainerRecord> list_containers_in_database(const std::string& owner, size_t limit,
                                                           const std::string& after_id);
  // The writes and fills of one container, one at a time (a stripe is shared by several
  // containers), so that what is applied to the cache follows the database's order.
  std::mutex& stripe_of(const std::string& storage);
  // Fills `storage`'s records (under its stripe) unless held already; false when they
  // are not held afterwards (too many, or the cache is off).
  void fill(const std::string& storage, int64_t token);
  std::optional<FileRecord> find_file_in_database(const std::string& storage, const std::string& path);
  FilePage list_files_in_database(const std::string& storage, const std::vector<std::string>& path_prefixes,
                                  size_t limit, const std::optional<std::string>& after_path,
                                  const std::optional<std::string>& before_path);
  std::vector<FileRecord> files_of_in_database(const std::string& storage, size_t limit);
  FileRecord write_file(const FileRecord& record, bool reset_created);

  WriteFence fence_;
  std::shared_ptr<db::Database> db_;
  std::unique_ptr<FileCache> cache_;
  CacheScope cache_scope_;
  std::array<std::mutex, 64> stripes_;
};

}  // namespace sandboxd::store
