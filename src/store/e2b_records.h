// E2B's sandbox records in the metadata database (SQLite or PostgreSQL, the same code):
// what E2B's control plane attaches to a sandboxd container (service/e2b_sandboxes.h).
// Keyed by the sandbox id, which is the container's id; every read and write names the
// owner as well, so another owner's sandbox is never found. In the database rather than
// on a replica's disk so that every replica of a cluster sees every sandbox, and a
// sandbox's end time outlives the replica that served it.
//
// A listing is one bounded, indexed query: paged by id, filtered by state, and by
// metadata through a table of (owner, key, value) rows (the first pair walks its index
// in id order; the others are point lookups).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
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
  bool paused = false;
};

struct E2bRecordQuery {
  std::string owner;
  std::map<std::string, std::string> metadata;  // all must match
  std::optional<bool> paused;                   // nullopt: either
  std::string after_id;                         // the page continues after this id
  size_t limit = 100;
};

struct E2bRecordPage {
  std::vector<E2bRecord> records;
  bool has_more = false;
};

// Where the walk over sandboxes past their end time stopped (end time, then id).
struct E2bDueCursor {
  int64_t end_at_ms = std::numeric_limits<int64_t>::min();
  std::string id;
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

  db::Backend backend() const { return db_->backend(); }

  // False when a record with this id exists already (nothing is changed then).
  bool insert(const E2bRecord& record);
  std::optional<E2bRecord> find(const std::string& owner, const std::string& id);
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

 private:
  std::shared_ptr<db::Database> db_;
};

}  // namespace sandboxd::store
