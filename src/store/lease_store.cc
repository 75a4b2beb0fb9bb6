#include "store/lease_store.h"

#include "store/schema.h"

namespace sandboxd::store {
namespace {

using db::Statement;

// The lease and its holder's heartbeat: the replica row's expiry while it still has the
// incarnation the lease names, else 0 (the lease is not valid).
constexpr const char* kColumns =
    "leases.storage, leases.holder, leases.holder_url, leases.epoch, leases.holder_incarnation, "
    "COALESCE((SELECT replicas.expires_at_ms FROM replicas WHERE replicas.replica_id = leases.holder "
    "AND replicas.incarnation = leases.holder_incarnation), 0)";

Lease read_lease(const Statement& row) {
  Lease lease;
  lease.storage = row.text(0);
  lease.holder = row.text(1);
  lease.holder_url = row.text(2);
  lease.epoch = row.integer(3);
  lease.holder_incarnation = row.integer(4);
  lease.expires_at_ms = row.integer(5);
  return lease;
}

std::optional<Lease> find_on(db::Connection& conn, const std::string& storage) {
  Statement query(conn, std::string("SELECT ") + kColumns + " FROM leases WHERE storage = ?");
  query.add(storage);
  if (!query.step()) return std::nullopt;
  return read_lease(query);
}

// The upsert that takes a lease: the whole decision is its WHERE, so two replicas
// racing for a free lease are serialised by the database (the row's lock) and only one
// of them gets a row back. A lease is free when released, or when the replica row no
// longer has the incarnation it names; the taker must itself be registered (a replica
// whose incarnation was moved on takes nothing until it registers again).
std::optional<Lease> take(db::Connection& conn, const std::string& storage,
                          const ReplicaRegistration& replica, bool existing_container) {
  std::string sql =
      "INSERT INTO leases (storage, holder, holder_url, holder_incarnation, epoch, expires_at_ms) "
      "SELECT ?, ?, ?, ?, 1, 0 WHERE EXISTS (SELECT 1 FROM replicas WHERE replica_id = ? AND incarnation = "
      "?)";
  if (existing_container) sql += " AND EXISTS (SELECT 1 FROM containers WHERE storage = ?)";
  sql +=
      " ON CONFLICT (storage) DO UPDATE SET "
      "epoch = CASE WHEN leases.holder = excluded.holder AND leases.holder_incarnation = "
      "excluded.holder_incarnation "
      "THEN leases.epoch ELSE leases.epoch + 1 END, "
      "holder = excluded.holder, holder_url = excluded.holder_url, holder_incarnation = "
      "excluded.holder_incarnation "
      "WHERE leases.holder = '' "
      "OR (leases.holder = excluded.holder AND leases.holder_incarnation = excluded.holder_incarnation) "
      "OR NOT EXISTS (SELECT 1 FROM replicas WHERE replicas.replica_id = leases.holder "
      "AND replicas.incarnation = leases.holder_incarnation) "
      "RETURNING ";
  sql += kColumns;
  Statement upsert(conn, sql);
  upsert.add(storage).add(replica.id).add(replica.url).add(replica.incarnation);
  upsert.add(replica.id).add(replica.incarnation);
  if (existing_container) upsert.add(storage);
  if (!upsert.step()) return std::nullopt;
  Lease lease = read_lease(upsert);
  upsert.run();
  return lease;
}

}  // namespace

FencedError::FencedError(std::string storage, int64_t writer_epoch, int64_t current_epoch)
    : std::runtime_error("container storage " + storage + " is held at epoch " +
                         std::to_string(current_epoch) + "; a write at epoch " +
                         std::to_string(writer_epoch) + " is refused"),
      storage_(std::move(storage)) {}

FencedError::FencedError(std::string storage, int64_t writer_epoch)
    : std::runtime_error("container storage " + storage +
                         " has no lease (the container was deleted); a write at epoch " +
                         std::to_string(writer_epoch) + " is refused"),
      storage_(std::move(storage)),
      deleted_(true) {}

LeaseStore::LeaseStore(const std::string& db_path) : LeaseStore(db::open_sqlite(db_path)) {}

LeaseStore::LeaseStore(std::shared_ptr<db::Database> database) : db_(std::move(database)) {
  schema::migrate(*db_);
}

LeaseStore::~LeaseStore() = default;

ReplicaRegistration LeaseStore::register_replica(const std::string& id, const std::string& url,
                                                 int64_t now_ms, int64_t ttl_ms) {
  auto conn = db_->acquire();
  Statement upsert(conn,
                   "INSERT INTO replicas (replica_id, url, incarnation, expires_at_ms) VALUES (?, ?, 1, ?) "
                   "ON CONFLICT (replica_id) DO UPDATE SET url = excluded.url, "
                   "incarnation = replicas.incarnation + 1, expires_at_ms = excluded.expires_at_ms "
                   "RETURNING incarnation");
  upsert.add(id).add(url).add(now_ms + ttl_ms);
  if (!upsert.step()) throw std::runtime_error("lease: registering replica " + id + ": no row came back");
  ReplicaRegistration replica{id, url, upsert.integer(0)};
  upsert.run();
  return replica;
}

bool LeaseStore::heartbeat(const ReplicaRegistration& replica, int64_t now_ms, int64_t ttl_ms) {
  auto conn = db_->acquire();
  // No check of the expiry here: while nobody moved the incarnation on, nobody took a
  // lease of it, so a late heartbeat keeps them all rightly.
  Statement update(conn, "UPDATE replicas SET expires_at_ms = ? WHERE replica_id = ? AND incarnation = ?");
  update.add(now_ms + ttl_ms).add(replica.id).add(replica.incarnation);
  update.run();
  return update.changes() == 1;
}

std::optional<Lease> LeaseStore::acquire(const std::string& storage, const ReplicaRegistration& replica,
                                         int64_t now_ms, bool existing_container) {
  auto conn = db_->acquire();
  if (auto lease = take(conn, storage, replica, existing_container)) return lease;
  auto current = find_on(conn, storage);
  // Not held, yet not taken: this replica may not take it (its own incarnation is gone,
  // or the container's record is). Or held by another replica's live incarnation.
  if (!current || current->holder.empty() || current->expires_at_ms > now_ms) return std::nullopt;
  if (current->holder == replica.id && current->holder_incarnation == replica.incarnation)
    return std::nullopt;
  if (current->expires_at_ms == 0)
    return take(conn, storage, replica, existing_container);  // moved on meanwhile
  // The holder's heartbeat ran out: its incarnation moves on, unless its heartbeat got
  // in first (the row's lock orders the two UPDATEs, and this one re-reads the expiry
  // of the row the heartbeat left). Whoever moved it, the lease is then free.
  Statement expire(conn,
                   "UPDATE replicas SET incarnation = incarnation + 1, expires_at_ms = 0 "
                   "WHERE replica_id = ? AND incarnation = ? AND expires_at_ms <= ?");
  expire.add(current->holder).add(current->holder_incarnation).add(now_ms);
  expire.run();
  return take(conn, storage, replica, existing_container);
}

std::vector<ReplicaRow> LeaseStore::expired_replicas(const std::string& self, int64_t now_ms) {
  auto conn = db_->acquire();
  Statement query(conn,
                  "SELECT replica_id, incarnation, expires_at_ms FROM replicas WHERE replica_id <> ? AND "
                  "expires_at_ms <= ?");
  query.add(self).add(now_ms);
  std::vector<ReplicaRow> rows;
  while (query.step()) rows.push_back(ReplicaRow{query.text(0), query.integer(1), query.integer(2)});
  return rows;
}

std::vector<Lease> LeaseStore::take_over(const ReplicaRegistration& replica, const ReplicaRow& dead,
                                         int64_t now_ms, int limit) {
  std::vector<Lease> taken;
  if (limit <= 0) return taken;
  auto conn = db_->acquire();
  if (dead.expires_at_ms != 0) {
    // Not moved on yet: as in acquire(), only if its heartbeat did not get in first.
    Statement expire(conn,
                     "UPDATE replicas SET incarnation = incarnation + 1, expires_at_ms = 0 "
                     "WHERE replica_id = ? AND incarnation = ? AND expires_at_ms <= ?");
    expire.add(dead.id).add(dead.incarnation).add(now_ms);
    expire.run();
  }
  // A lease of `dead` is free when the replica row no longer has the incarnation it
  // names: the same condition as take()'s, checked again by the UPDATE on each row's
  // newest version (a row another replica took meanwhile names that replica: skipped).
  // The epoch moves on under the row's lock, which is what the fence checks.
  const bool postgres = conn.backend() == db::Backend::kPostgres;
  std::string sql =
      "UPDATE leases SET holder = ?, holder_url = ?, holder_incarnation = ?, epoch = epoch + 1 "
      "WHERE storage IN (SELECT candidate.storage FROM leases AS candidate WHERE candidate.holder = ? "
      "AND NOT EXISTS (SELECT 1 FROM replicas WHERE replicas.replica_id = candidate.holder "
      "AND replicas.incarnation = candidate.holder_incarnation) LIMIT ?";
  sql += postgres ? " FOR UPDATE SKIP LOCKED) " : ") ";
  sql +=
      "AND leases.holder = ? "
      "AND NOT EXISTS (SELECT 1 FROM replicas WHERE replicas.replica_id = leases.holder "
      "AND replicas.incarnation = leases.holder_incarnation) "
      "AND EXISTS (SELECT 1 FROM replicas WHERE replica_id = ? AND incarnation = ?) "
      "RETURNING storage, epoch";
  Statement update(conn, sql);
  update.add(replica.id).add(replica.url).add(replica.incarnation);
  update.add(dead.id).add(static_cast<int64_t>(limit));
  update.add(dead.id).add(replica.id).add(replica.incarnation);
  while (update.step()) {
    Lease lease;
    lease.storage = update.text(0);
    lease.epoch = update.integer(1);
    lease.holder = replica.id;
    lease.holder_url = replica.url;
    lease.holder_incarnation = replica.incarnation;
    taken.push_back(std::move(lease));
  }
  return taken;
}

bool LeaseStore::release(const std::string& storage, const std::string& holder, int64_t epoch) {
  auto conn = db_->acquire();
  Statement update(
      conn,
      "UPDATE leases SET holder = '', holder_url = '', holder_incarnation = 0, expires_at_ms = 0 "
      "WHERE storage = ? AND holder = ? AND epoch = ? RETURNING epoch");
  update.add(storage).add(holder).add(epoch);
  bool released = update.step();
  update.run();
  return released;
}

std::optional<Lease> LeaseStore::find(const std::string& storage) {
  auto conn = db_->acquire();
  return find_on(conn, storage);
}

void LeaseStore::remove(const std::string& storage) {
  auto conn = db_->acquire();
  Statement remove(conn, "DELETE FROM leases WHERE storage = ?");
  remove.add(storage).run();
}

int64_t LeaseStore::check_fence(db::Connection& conn, const std::string& storage, int64_t writer_epoch) {
  Statement query(conn, conn.backend() == db::Backend::kPostgres
                            ? "SELECT epoch FROM leases WHERE storage = ? FOR SHARE"
                            : "SELECT epoch FROM leases WHERE storage = ?");
  query.add(storage);
  // A container that is being served has a lease row from before its record to its
  // delete; a write finding none comes from a holder that missed the delete.
  if (!query.step()) throw FencedError(storage, writer_epoch);
  const int64_t current = query.integer(0);
  if (current != writer_epoch) throw FencedError(storage, writer_epoch, current);
  return current;
}

}  // namespace sandboxd::store
