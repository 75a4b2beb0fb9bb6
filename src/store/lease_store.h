// Leases: which replica serves a container now (docs/cluster.md).
//
// Two tables. `replicas`: one row per replica id, with its incarnation (a number that
// only grows) and when its heartbeat runs out. `leases`: one row per container
// storage, naming its holder and the holder's incarnation when it took the lease, where
// the holder is reached, and an epoch that grows each time the container changes hands.
// A lease is valid while its holder's row still has the incarnation the lease names, so
// a replica keeps every lease it holds by renewing that one row (one statement a round,
// whatever the number of containers). Another replica takes a container from a holder
// whose heartbeat ran out by first moving that holder's incarnation on (one conditional
// UPDATE of the replica row, which the heartbeat's own UPDATE of the row serialises
// with): from then on none of its leases are valid, and its next heartbeat finds that
// it lost them all. The takeover itself moves the container's epoch on, which is what
// the fence checks (check_fence): exactly as when each lease had its own expiry.
//
// On the metadata database (store/database.h, SQLite or PostgreSQL; the tables are made
// by store/schema.cc). Every statement is in the SQL both speak (ON CONFLICT upserts,
// conditional UPDATE ... WHERE, RETURNING), so the same text runs on either.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "store/database.h"

namespace sandboxd::store {

struct Lease {
  std::string storage;
  std::string holder;      // replica id; empty once released
  std::string holder_url;  // the holder's advertiseUrl
  int64_t epoch = 0;       // grows by one each time another holder takes it
  int64_t holder_incarnation = 0;
  // When the holder's heartbeat runs out (unix milliseconds); 0 when the holder's row no
  // longer has the lease's incarnation (the holder lost it, or restarted).
  int64_t expires_at_ms = 0;

  // Held by someone whose lease has not run out at `now_ms`.
  bool live(int64_t now_ms) const { return !holder.empty() && expires_at_ms > now_ms; }
};

// A metadata write refused because the container has a newer holder (a newer epoch)
// than the writer, or no lease at all (it was deleted): the writer lost the container
// while it was paused or cut off.
class FencedError : public std::runtime_error {
 public:
  FencedError(std::string storage, int64_t writer_epoch, int64_t current_epoch);
  // No lease row: the container was deleted (by whichever replica served the delete).
  FencedError(std::string storage, int64_t writer_epoch);
  const std::string& storage() const { return storage_; }
  bool container_deleted() const { return deleted_; }

 private:
  std::string storage_;
  bool deleted_ = false;
};

// A replica as registered in the replicas table: the incarnation its leases name.
struct ReplicaRegistration {
  std::string id;
  std::string url;
  int64_t incarnation = 0;
};

// Another replica's row as the background takeover reads it.
struct ReplicaRow {
  std::string id;
  int64_t incarnation = 0;
  int64_t expires_at_ms = 0;  // 0 once another replica moved its incarnation on
};

// Thread-safe (a connection acquired per call). Throws std::runtime_error on database
// failures, as the other stores do.
class LeaseStore {
 public:
  // A SQLite file (opened for this store alone).
  explicit LeaseStore(const std::string& db_path);
  // The metadata database (brought up to the newest schema).
  explicit LeaseStore(std::shared_ptr<db::Database> database);
  ~LeaseStore();
  LeaseStore(const LeaseStore&) = delete;
  LeaseStore& operator=(const LeaseStore&) = delete;

  // Starts a new incarnation of replica `id` (registering it when it is new), its
  // heartbeat good until now_ms + ttl_ms. Every lease an earlier incarnation held is
  // free from now on (taken at the next epoch, by this replica too).
  ReplicaRegistration register_replica(const std::string& id, const std::string& url, int64_t now_ms,
                                       int64_t ttl_ms);
  // The heartbeat: one UPDATE, whatever the number of leases held. False when the row no
  // longer has this incarnation (another replica found the heartbeat run out and took
  // over, or the same id registered again): every lease of the incarnation is gone.
  bool heartbeat(const ReplicaRegistration& replica, int64_t now_ms, int64_t ttl_ms);

  // Takes the lease when it is free (released, never taken, or its holder's incarnation
  // is gone) or already this incarnation's. Taking it from anyone else makes the epoch
  // one larger; keeping one's own keeps it. When the holder's heartbeat ran out at
  // now_ms, the holder's incarnation is moved on first (which frees all its leases) and
  // the lease taken. nullopt when another replica's heartbeat is live, or when
  // `replica` is no longer registered (its heartbeat ran out and another replica moved
  // it on: see heartbeat()). With `existing_container`, a lease row is only made while
  // the containers table has a record with this storage: a replica that comes back to
  // a container deleted meanwhile never makes it a lease again (nullopt; find() then
  // says there is none). Without it (a container being made, whose record comes after
  // its lease) the row is made in any case.
  // One statement when the lease is free or held here; three when taking it from a
  // replica whose heartbeat ran out (the first takeover from it also moves its
  // incarnation on).
  std::optional<Lease> acquire(const std::string& storage, const ReplicaRegistration& replica, int64_t now_ms,
                               bool existing_container = false);
  // Every other replica whose heartbeat has run out at now_ms (one small read: a row a
  // replica).
  std::vector<ReplicaRow> expired_replicas(const std::string& self, int64_t now_ms);
  // The background takeover of `dead`'s containers (a replica whose heartbeat ran out):
  // its incarnation is moved on first when nobody did yet (as acquire() does, and
  // ordered with its heartbeat the same way), then up to `limit` of the leases it held
  // are taken by `replica` at their next epoch, in one statement. Rows another
  // replica's takeover holds locked at that moment are skipped (PostgreSQL), so two
  // survivors take disjoint batches. Nothing is taken when `replica` is no longer
  // registered. Returns what was taken (fewer than `limit` once few are left).
  std::vector<Lease> take_over(const ReplicaRegistration& replica, const ReplicaRow& dead, int64_t now_ms,
                               int limit);
  // Frees a lease held by (holder, epoch) at once (after the final flush); the epoch
  // stays, so the next holder's is larger. false when it was not held so.
  bool release(const std::string& storage, const std::string& holder, int64_t epoch);
  // The lease with its holder's heartbeat (Lease::expires_at_ms).
  std::optional<Lease> find(const std::string& storage);
  // The container is deleted: its lease goes with it.
  void remove(const std::string& storage);

  // The fence, run first in the transaction of a write on `conn` (any connection to the
  // same database): throws FencedError when the container's lease has an epoch other
  // than `writer_epoch` (someone took it since), or has no row (the container was
  // deleted: a writer that comes back after the delete writes nothing). Returns the
  // epoch, which the write records.
  // Race-free on both backends: SQLite's transaction already holds the write lock
  // (BEGIN IMMEDIATE), so no acquire can run until it ends; on PostgreSQL the lease row
  // is read FOR SHARE, so an acquire's UPDATE of it waits for the writer's commit, and
  // a writer that comes after an acquire's uncommitted UPDATE waits for it and then
  // reads the new epoch (READ COMMITTED re-reads a row locked that way). The row lock
  // lasts until the write's transaction ends: those transactions hold nothing but
  // their few statements (no disk, no bucket), and a writer paused inside one is ended
  // by the server after idle_in_transaction_session_timeout (PostgresTimeouts).
  static int64_t check_fence(db::Connection& conn, const std::string& storage, int64_t writer_epoch);

 private:
  std::shared_ptr<db::Database> db_;
};

}  // namespace sandboxd::store
