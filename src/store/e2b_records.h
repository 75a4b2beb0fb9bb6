// E2B's sandbox records in the metadata database (SQLite or PostgreSQL, the same code):
// what E2B's control plane attaches to a sandboxd container (e2b/service/sandboxes.h).
// Keyed by the sandbox id, which is the container's id; every read and write names the
// owner as well, so another owner's sandbox is never found. In the database rather than
// on a replica's disk so that every replica of a cluster sees every sandbox, and a
// sandbox's end time outlives the replica that served it.
//
// A listing is one bounded, indexed query: paged by id, filtered by state, and by
// metadata through a table of (owner, key, value) rows (the first pair walks its index
// in id order; the others are point lookups).
//
// The records of the sandboxes this process alone writes may be held in memory as well
// (enable_cache), so that a call to a sandbox (every envd call names one) finds its
// record without a database round trip. A record is held under the token its reader
// gave when it read it from the database (cluster mode: the epoch of the lease under
// which this replica holds the sandbox's container; 0 on a single host) and is found
// only under that token: what was read under an earlier lease is never served after the
// container changed hands. Each write of this object is applied to a held record after
// it commits, serialised (per sandbox) with the reads that fill it, so that what is held
// follows the database's order; a write whose outcome is unknown (an error) forgets it.
// Writes made through another E2bRecords (another replica) are not seen: the caller
// holds a record only while no one else writes what it reads of it.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/database.h"

namespace sandboxd::store {

struct E2bRecord {
  std::string id;  // the container's id too
  std::string owner;
  std::string template_id;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> env_vars;
  int64_t started_at_ms = 0;
  int64_t end_at_ms = 0;
  bool auto_pause = false;
  // Whether that pause keeps the sandbox's memory where the tier keeps memory (E2B's
  // autoPauseMemory, default on); false: files only. Kept in auto_pause's column as
  // its value 2, so no schema change: an older server reads it as a pause.
  bool auto_pause_memory = true;
  bool paused = false;
};

struct E2bRecordQuery {
  std::string owner;
  std::map<std::string, std::string> metadata;  // all must match
  std::optional<bool> paused;                   // nullopt: either
  std::optional<std::string> template_id;       // only sandboxes of this template
  // Only sandboxes started in [started_from_ms, started_to_ms].
  int64_t started_from_ms = std::numeric_limits<int64_t>::min();
  int64_t started_to_ms = std::numeric_limits<int64_t>::max();
  // Ordered by start time, then id: oldest first, or newest first.
  bool newest_first = false;
  // The page continues after this sandbox (its start time and id: the last one of the
  // page before); an empty id starts at the first.
  int64_t after_started_ms = 0;
  std::string after_id;
  size_t limit = 100;
};

struct E2bRecordPage {
  std::vector<E2bRecord> records;
  bool has_more = false;
};

// An E2B snapshot: a copy of a sandbox's files (and memory, where the tier keeps it),
// kept apart from any container so that it outlives the sandbox it was taken from.
struct E2bSnapshotRecord {
  std::string id;  // 20 lower-case letters and digits (its folder's name)
  std::string owner;
  std::string name;  // the owner's name for it ('' none): unique per owner
  std::string source_sandbox;
  int64_t created_at_ms = 0;
  uint64_t bytes = 0;   // what its files take on disk (counted in the owner's stored bytes)
  bool memory = false;  // carries a checkpoint of the sandbox's memory
};

struct E2bSnapshotQuery {
  std::string owner;
  std::string source_sandbox;  // '' any
  std::string key;             // an id or a name; '' any
  // The page continues after this snapshot (newest first: creation time, then id).
  int64_t after_created_ms = 0;
  std::string after_id;
  size_t limit = 100;
};

struct E2bSnapshotPage {
  std::vector<E2bSnapshotRecord> snapshots;
  bool has_more = false;
};

// Where the walk over sandboxes past their end time stopped (end time, then id).
struct E2bDueCursor {
  int64_t end_at_ms = std::numeric_limits<int64_t>::min();
  std::string id;
};

// The bounds of the records held in memory: the least recently used go first beyond
// them, and a record larger than a tenth of max_bytes is never held (read each time).
struct E2bCacheLimits {
  size_t max_records = 100'000;
  size_t max_bytes = 64u << 20;
};

// Under which token a record read (or written) now may be held, and the storage of the
// sandbox's container (so that letting its lease go forgets it: forget_storage).
struct E2bHold {
  int64_t token = 0;
  std::string storage;
};

// Thread-safe, as the other stores; throws std::runtime_error on database failures.
class E2bRecords {
 public:
  // The most metadata entries one sandbox may have, and pairs one listing may filter by.
  static constexpr size_t kMaxMetadataEntries = 100;
  static constexpr size_t kMaxMetadataFilters = 16;
  static constexpr size_t kMaxPage = 1000;

  // Any database; its schema is migrated first.
  explicit E2bRecords(std::shared_ptr<db::Database> database);
  ~E2bRecords();

  db::Backend backend() const { return db_->backend(); }

  // Holds records in memory from now on (see above). Set once, before serving.
  void enable_cache(E2bCacheLimits limits = {});
  // From memory only, never blocking (an I/O thread may call it): kFound with `out` set,
  // kNotFound when the id's record is held and is another owner's (the database would
  // answer the same: the id is the key), kNotHeld when it is not held under `token`
  // (the caller then reads the database, holding what it finds).
  enum class Cached { kFound, kNotFound, kNotHeld };
  Cached cached_find(const std::string& owner, const std::string& id, int64_t token, E2bRecord& out);
  // Forgets what is held of the sandbox whose container has this storage (its lease let
  // go: a later holder's reads fill it again).
  void forget_storage(const std::string& storage);
  // How many records are held (for tests).
  size_t cached() const;

  // False when a record with this id exists already (nothing is changed then). With
  // `hold`, the new record is held in memory under it.
  bool insert(const E2bRecord& record, const std::optional<E2bHold>& hold = std::nullopt);
  // From the database; with `hold`, what it finds is held in memory under it (the token
  // must have been current before this call began: see above).
  std::optional<E2bRecord> find(const std::string& owner, const std::string& id,
                                const std::optional<E2bHold>& hold = std::nullopt);
  E2bRecordPage list(const E2bRecordQuery& query);
  // The end time becomes `end_at_ms`. False when there is no such record.
  bool set_end(const std::string& owner, const std::string& id, int64_t end_at_ms);
  // Marks it paused; false when it is missing or paused already.
  bool mark_paused(const std::string& owner, const std::string& id);
  // The end time's timeout ran out: marks it paused if it still is due and not paused.
  bool mark_paused_if_due(const std::string& owner, const std::string& id, int64_t now_ms);
  // Clears the paused mark and moves the end time to at least `end_at_least_ms`, or,
  // without it, to at least `end_if_paused_ms` when it was paused (never earlier).
  // nullopt when there is no such record, else whether it was paused.
  std::optional<bool> resume(const std::string& owner, const std::string& id,
                             std::optional<int64_t> end_at_least_ms, int64_t end_if_paused_ms);
  // Deletes the record and its metadata rows. False when there was none.
  bool remove(const std::string& owner, const std::string& id);
  // Running (not paused) records whose end time is at or before `now_ms`, after
  // `cursor`, in order of end time then id; at most `limit`.
  std::vector<E2bRecord> due(int64_t now_ms, const E2bDueCursor& cursor, size_t limit);

  // Snapshots (never held in memory: read on their few calls). A name names one
  // snapshot of its owner: the insert of a named one fails (false) while another has it.
  bool insert_snapshot(const E2bSnapshotRecord& snapshot);
  // The owner's snapshot with this id or this name.
  std::optional<E2bSnapshotRecord> find_snapshot(const std::string& owner, const std::string& key);
  E2bSnapshotPage list_snapshots(const E2bSnapshotQuery& query);
  bool remove_snapshot(const std::string& owner, const std::string& id);
  size_t count_snapshots(const std::string& owner);
  // Whether any owner has a snapshot of this id (a snapshot's folder without one was left
  // by a server that stopped half way through making or deleting it).
  bool snapshot_exists(const std::string& id);

 private:
  class Cache;
  // The writes and fills of one sandbox, one at a time (a stripe is shared by several
  // sandboxes), so that what is applied to the held copy follows the database's order.
  // Taken before a connection is (never while holding one), as Metadata's stripes are.
  std::mutex& stripe_of(const std::string& id);
  // Runs `write` (a database write of sandbox `id`) under its stripe; on an exception
  // (an unknown outcome) the held copy is forgotten before it goes on.
  template <typename Write>
  auto under_stripe(const std::string& id, Write write);
  bool insert_row(const E2bRecord& record);

  std::shared_ptr<db::Database> db_;
  std::unique_ptr<Cache> cache_;
  std::array<std::mutex, 64> stripes_;
};

}  // namespace sandboxd::store
