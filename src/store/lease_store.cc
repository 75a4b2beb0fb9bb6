#include "store/lease_store.h"

#include "store/schema.h"

namespace sandboxd::store {
namespace {

using db::Statement;

constexpr const char* kColumns = "storage, holder, holder_url, epoch, expires_at_ms";

Lease read_lease(const Statement& row) {
  Lease lease;
  lease.storage = row.text(0);
  lease.holder = row.text(1);
  lease.holder_url = row.text(2);
  lease.epoch = row.integer(3);
  lease.expires_at_ms = row.integer(4);
  return lease;
}

}  // namespace

FencedError::FencedError(std::string storage, int64_t writer_epoch, int64_t current_epoch)
    : std::runtime_error("container storage " + storage + " is held at epoch " + std::to_string(current_epoch) +
                         "; a write at epoch " + std::to_string(writer_epoch) + " is refused"),
      storage_(std::move(storage)) {}

FencedError::FencedError(std::string storage, int64_t writer_epoch)
    : std::runtime_error("container storage " + storage + " has no lease (the container was deleted); a write at epoch " +
                         std::to_string(writer_epoch) + " is refused"),
      storage_(std::move(storage)),
      deleted_(true) {}

LeaseStore::LeaseStore(const std::string& db_path) : LeaseStore(db::open_sqlite(db_path)) {}

LeaseStore::LeaseStore(std::shared_ptr<db::Database> database) : db_(std::move(database)) { schema::migrate(*db_); }

LeaseStore::~LeaseStore() = default;

std::optional<Lease> LeaseStore::acquire(const std::string& storage, const std::string& holder,
                                         const std::string& holder_url, int64_t now_ms, int64_t ttl_ms,
                                         bool existing_container) {
  auto conn = db_->acquire();
  // The whole decision is the upsert's WHERE: two replicas racing for a free lease are
  // serialised by the database, and only one of them gets a row back.
  const std::string values = existing_container
                                 ? ") SELECT ?, ?, ?, 1, ? WHERE EXISTS (SELECT 1 FROM containers WHERE storage = ?)"
                                 : ") VALUES (?, ?, ?, 1, ?)";
  Statement upsert(conn, std::string("INSERT INTO leases (") + kColumns + values +
                            " ON CONFLICT (storage) DO UPDATE SET "
                            "epoch = CASE WHEN leases.holder = excluded.holder THEN leases.epoch "
                            "ELSE leases.epoch + 1 END, "
                            "holder = excluded.holder, holder_url = excluded.holder_url, "
                            "expires_at_ms = excluded.expires_at_ms "
                            "WHERE leases.holder = excluded.holder OR leases.holder = '' OR leases.expires_at_ms <= ? "
                            "RETURNING " + kColumns);
  upsert.add(storage).add(holder).add(holder_url).add(now_ms + ttl_ms);
  if (existing_container) upsert.add(storage);
  upsert.add(now_ms);
  if (!upsert.step()) return std::nullopt;
  Lease lease = read_lease(upsert);
  upsert.run();
  return lease;
}

bool LeaseStore::renew(const std::string& storage, const std::string& holder, int64_t epoch, int64_t now_ms,
                       int64_t ttl_ms) {
  auto conn = db_->acquire();
  Statement update(conn,
                   "UPDATE leases SET expires_at_ms = ? WHERE storage = ? AND holder = ? AND epoch = ? RETURNING epoch");
  update.add(now_ms + ttl_ms).add(storage).add(holder).add(epoch);
  bool renewed = update.step();
  update.run();
  return renewed;
}

bool LeaseStore::release(const std::string& storage, const std::string& holder, int64_t epoch) {
  auto conn = db_->acquire();
  Statement update(conn,
                   "UPDATE leases SET holder = '', holder_url = '', expires_at_ms = 0 "
                   "WHERE storage = ? AND holder = ? AND epoch = ? RETURNING epoch");
  update.add(storage).add(holder).add(epoch);
  bool released = update.step();
  update.run();
  return released;
}

std::optional<Lease> LeaseStore::find(const std::string& storage) {
  auto conn = db_->acquire();
  Statement query(conn, std::string("SELECT ") + kColumns + " FROM leases WHERE storage = ?");
  query.add(storage);
  if (!query.step()) return std::nullopt;
  return read_lease(query);
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
