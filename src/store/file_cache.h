// The file records of the containers this process is the only writer of, kept in memory
// so that a file list, one file's metadata and the lookups an upload makes first are
// answered without a database round trip. Used by Metadata only (store/metadata.h),
// which fills it from the database and applies its own writes to it after they commit:
// every write to the `files` table goes through Metadata, so it is the one place that
// keeps the copy true.
//
// Each container's records are held whole (or not at all), under the token Metadata was
// given when it filled them (the lease's epoch in cluster mode, 0 on a single host): a
// read under another token finds nothing, so a copy made under an earlier lease is never
// served after the container changed hands. Bounded: least recently used containers are
// evicted first when the records or their bytes go over the limits; a container with
// more records than the limit allows is marked too large and read from the database.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/metadata.h"

namespace sandboxd::store {

class FileCache {
 public:
  explicit FileCache(FileCacheLimits limits) : limits_(limits) {}

  // What a read found: the container is held under `token` (a value), held but too large
  // (read the database, do not fill), or not held (fill it).
  enum class State { kHeld, kTooLarge, kMissing };

  // Reads under `token`; `out` is set only when kHeld.
  State find(const std::string& storage, int64_t token, const std::string& path,
             std::optional<FileRecord>& out);
  State list(const std::string& storage, int64_t token, const std::vector<std::string>& path_prefixes,
             size_t limit, const std::optional<std::string>& after_path,
             const std::optional<std::string>& before_path, FilePage& out);
  State all(const std::string& storage, int64_t token, std::vector<FileRecord>& out);

  // The whole of a container's records, read from the database (ordered or not), or
  // more than max_records of them (`too_large`): held from now on under `token`.
  void install(const std::string& storage, int64_t token, std::vector<FileRecord> records, bool too_large);

  // A committed write, applied to the container's records if they are held. (Metadata
  // serialises the writes of one container with their application here, so these come
  // in the database's commit order.)
  void upsert(const FileRecord& record);
  void erase(const std::string& storage, const std::string& path);
  void erase_prefix(const std::string& storage, const std::string& path_prefix);
  // Forgets the container (a write of unknown outcome, the lease given up, the
  // container deleted).
  void drop(const std::string& storage);

  // A single host's container lists, by owner (in cluster mode other replicas make an
  // owner's containers, so Metadata never holds them there): the same rules, apart from
  // the file records, bounded by as many records again.
  State list_containers(const std::string& owner, size_t limit, const std::string& after_id,
                        std::vector<ContainerRecord>& out);
  void install_containers(const std::string& owner, std::vector<ContainerRecord> records, bool too_large);
  void put_container(const ContainerRecord& record);  // made (or found made)
  void touch_container(const std::string& owner, const std::string& id, int64_t now);
  void erase_container(const std::string& owner, const std::string& id);
  void drop_owner(const std::string& owner);

  size_t records() const;
  size_t containers() const;
  const FileCacheLimits& limits() const { return limits_; }

 private:
  using Position = std::pair<int64_t, int64_t>;  // (created_at, seq): the listing order
  struct Entry {
    int64_t token = 0;
    bool too_large = false;
    std::map<Position, FileRecord> by_position;
    std::unordered_map<std::string, Position> position_of;
    size_t bytes = 0;
    std::list<std::string>::iterator recent;
  };

  // The held entry of `storage` under `token` (moved to the front of the LRU), or null;
  // an entry under another token is dropped. Under mutex_.
  Entry* held(const std::string& storage, int64_t token, State& state);
  void insert(Entry& entry, FileRecord record);
  void remove(Entry& entry, std::unordered_map<std::string, Position>::iterator it);
  void erase_entry(std::unordered_map<std::string, Entry>::iterator it);
  void evict_beyond_limits(const std::string& keep);
  static size_t bytes_of(const FileRecord& record);

  using Order = std::pair<int64_t, std::string>;  // (created_at, id): the container list's order
  struct Owner {
    bool too_large = false;
    std::map<Order, ContainerRecord> by_order;
    std::unordered_map<std::string, int64_t> created_at_of;  // id -> created_at
    std::list<std::string>::iterator recent;
  };
  Owner* held_owner(const std::string& owner, State& state);
  void erase_owner(std::unordered_map<std::string, Owner>::iterator it);

  std::unordered_map<std::string, Owner> owners_;
  std::list<std::string> recent_owners_;
  size_t container_records_ = 0;

  FileCacheLimits limits_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> recent_;  // storages, most recently used first
  size_t records_ = 0, bytes_ = 0;
};

}  // namespace sandboxd::store
