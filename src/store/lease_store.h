// Leases: which replica serves a container now (docs/storage.md). One row per container
// storage: its holder (a replica id), where the holder is reached, an epoch that grows
// each time the container changes hands, and when the lease runs out unless renewed.
//
// On the metadata database (store/database.h, SQLite or PostgreSQL; the table is made by
// store/schema.cc). Every statement is in the SQL both speak (ON CONFLICT upserts,
// conditional UPDATE ... WHERE, RETURNING), so the same text runs on either.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "store/database.h"

namespace sandboxd::store {

struct Lease {
  std::string storage;
  std::string holder;      // replica id; empty once released
  std::string holder_url;  // the holder's advertiseUrl
  int64_t epoch = 0;       // grows by one each time another holder takes it
  int64_t expires_at_ms = 0;  // unix milliseconds

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

  // One conditional upsert: takes the lease when it is free, expired or already
  // `holder`'s, until now_ms + ttl_ms. Taking it from anyone else (a holder whose lease
  // ran out, or a released lease) makes the epoch one larger; keeping one's own keeps
  // it. nullopt when another holder's lease is live. With `existing_container`, a
  // lease row is only made while the containers table has a record with this storage:
  // a replica that comes back to a container deleted meanwhile never makes it a lease
  // again (nullopt; find() then says there is none). Without it (a container being
  // made, whose record comes after its lease) the row is made in any case.
  std::optional<Lease> acquire(const std::string& storage, const std::string& holder, const std::string& holder_url,
                               int64_t now_ms, int64_t ttl_ms, bool existing_container = false);
  // Extends a lease still held by (holder, epoch); false when it is not (taken over).
  bool renew(const std::string& storage, const std::string& holder, int64_t epoch, int64_t now_ms, int64_t ttl_ms);
  // Frees a lease held by (holder, epoch) at once (after the final flush); the epoch
  // stays, so the next holder's is larger. false when it was not held so.
  bool release(const std::string& storage, const std::string& holder, int64_t epoch);
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
