// Leases and fencing (docs/storage.md) on a real SQLite file shared by several
// connections and processes, and on a real PostgreSQL the test starts (racing
// replicas, the fence against a takeover in flight), and the cluster configuration keys.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <postgresql/libpq-fe.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ops/config.h"
#include "postgres_harness.h"
#include "store/lease_store.h"
#include "store/metadata.h"

namespace sandboxd::store {
namespace {

namespace fs = std::filesystem;

class LeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sandboxd-lease-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    db_ = (fs::path(dir_) / "shared.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string dir_, db_;
};

constexpr int64_t kTtl = 15000;

// A replica as the tests drive it, through a LeaseStore of its own: registered at
// `now_ms`, its heartbeat good for kTtl from then or from its last heartbeat().
class Replica {
 public:
  Replica(LeaseStore& store, const std::string& id, int64_t now_ms)
      : store_(store), registration_(store.register_replica(id, "http://" + id + ":1", now_ms, kTtl)) {}
  std::optional<Lease> acquire(const std::string& storage, int64_t now_ms, bool existing_container = false) {
    return store_.acquire(storage, registration_, now_ms, existing_container);
  }
  bool heartbeat(int64_t now_ms) { return store_.heartbeat(registration_, now_ms, kTtl); }
  bool release(const std::string& storage, int64_t epoch) {
    return store_.release(storage, registration_.id, epoch);
  }
  // Registers again (what a replica does once its heartbeat found its incarnation gone).
  void register_again(int64_t now_ms) {
    registration_ = store_.register_replica(registration_.id, registration_.url, now_ms, kTtl);
  }
  const ReplicaRegistration& registration() const { return registration_; }

 private:
  LeaseStore& store_;
  ReplicaRegistration registration_;
};

TEST_F(LeaseTest, FreeLeaseIsTakenAtEpochOneAndKeptByItsHolder) {
  LeaseStore a_store(db_), b_store(db_);  // two replicas: two connections to one file
  Replica a(a_store, "replica-a", 1000), b(b_store, "replica-b", 1000);
  auto first = a.acquire("c1", 1000);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->epoch, 1);
  EXPECT_EQ(first->holder, "replica-a");
  EXPECT_EQ(first->expires_at_ms, 1000 + kTtl);
  // Live: nobody else gets it.
  EXPECT_FALSE(b.acquire("c1", 2000));
  // Its holder gets it again, same epoch; the heartbeat makes it run later.
  auto again = a.acquire("c1", 3000);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->epoch, 1);
  ASSERT_TRUE(a.heartbeat(3000));
  auto seen = b_store.find("c1");
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->holder, "replica-a");
  EXPECT_EQ(seen->holder_url, "http://replica-a:1");
  EXPECT_EQ(seen->expires_at_ms, 3000 + kTtl);
  EXPECT_TRUE(seen->live(3000));
  EXPECT_FALSE(seen->live(3000 + kTtl));
  EXPECT_FALSE(b_store.find("other"));
}

TEST_F(LeaseTest, ExpiredLeaseIsTakenWithTheNextEpochAndTheOldHolderCannotRenewOrRelease) {
  LeaseStore a_store(db_), b_store(db_);
  Replica a(a_store, "replica-a", 0), b(b_store, "replica-b", 0);
  ASSERT_TRUE(a.acquire("c1", 0));
  EXPECT_TRUE(a.heartbeat(5000));
  // No heartbeat past 5000 + kTtl: free for b, one epoch up.
  ASSERT_TRUE(b.heartbeat(5000 + kTtl - 1));
  EXPECT_FALSE(b.acquire("c1", 5000 + kTtl - 1));
  auto taken = b.acquire("c1", 5000 + kTtl);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->epoch, 2);
  EXPECT_EQ(taken->holder_url, "http://replica-b:1");
  // The old holder comes back: its incarnation and its epoch are gone.
  EXPECT_FALSE(a.heartbeat(6000 + kTtl));
  EXPECT_FALSE(a.release("c1", 1));
  EXPECT_FALSE(a.acquire("c1", 6000 + kTtl));
  EXPECT_EQ(b_store.find("c1")->holder, "replica-b");
}

// The heartbeat is the one statement that keeps every lease a replica holds; once it
// ran out and another replica took one container, the replica's incarnation is gone
// for all of them. Registered again, it takes back only what nobody took meanwhile,
// and at the next epoch (its writes of the old epoch stay refused).
TEST_F(LeaseTest, OneHeartbeatKeepsEveryLeaseAndALapsedReplicaRegistersAgainAtTheNextEpoch) {
  LeaseStore a_store(db_), b_store(db_);
  Replica a(a_store, "replica-a", 0), b(b_store, "replica-b", 0);
  constexpr int kHeld = 200;
  for (int i = 0; i < kHeld; ++i) ASSERT_TRUE(a.acquire("c" + std::to_string(i), 0));
  for (int64_t now = 5000; now <= 50000; now += 5000) {
    ASSERT_TRUE(a.heartbeat(now));
    ASSERT_TRUE(b.heartbeat(now));
    EXPECT_FALSE(b.acquire("c" + std::to_string(now / 5000), now + kTtl - 1)) << "at " << now;
  }
  // a stops (paused); b takes one container once a's heartbeat ran out.
  const int64_t lapsed = 50000 + kTtl;
  ASSERT_TRUE(b.heartbeat(lapsed));
  auto taken = b.acquire("c7", lapsed);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->epoch, 2);
  // Every other lease of a's incarnation is free now, not only the one taken.
  auto other = b_store.find("c8");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->holder, "replica-a");
  EXPECT_FALSE(other->live(lapsed - 1)) << "a lease of a lost incarnation is not valid";
  // a comes back: its heartbeat tells it that it lost everything; it takes nothing
  // under the old incarnation.
  EXPECT_FALSE(a.heartbeat(lapsed + 1));
  EXPECT_FALSE(a.acquire("c8", lapsed + 1));
  a.register_again(lapsed + 1);
  EXPECT_GT(a.registration().incarnation, 1);
  // b's container stays b's; one nobody took comes back to a, at the next epoch.
  EXPECT_FALSE(a.acquire("c7", lapsed + 2));
  EXPECT_EQ(b_store.find("c7")->holder, "replica-b");
  auto back = a.acquire("c8", lapsed + 2);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->epoch, 2);
  EXPECT_EQ(back->holder_incarnation, a.registration().incarnation);
  EXPECT_TRUE(a_store.find("c8")->live(lapsed + 2));
  // The replica b found gone may not have its incarnation moved on again by a late
  // takeover: a's new heartbeat keeps what it took back.
  ASSERT_TRUE(a.heartbeat(lapsed + 3));
  EXPECT_FALSE(b.acquire("c8", lapsed + 4));
}

// A heartbeat that came in before a takeover's check keeps the holder's leases: the
// takeover moves an incarnation on only while its expiry has passed.
TEST_F(LeaseTest, ALateHeartbeatBeforeATakeoverKeepsTheLeases) {
  LeaseStore a_store(db_), b_store(db_);
  Replica a(a_store, "replica-a", 0), b(b_store, "replica-b", 0);
  ASSERT_TRUE(a.acquire("c1", 0));
  // a was late (its expiry passed at kTtl) but renewed before anyone took over.
  ASSERT_TRUE(a.heartbeat(kTtl + 100));
  ASSERT_TRUE(b.heartbeat(kTtl + 100));
  EXPECT_FALSE(b.acquire("c1", kTtl + 200));
  EXPECT_TRUE(a.heartbeat(kTtl + 300));
  EXPECT_EQ(b_store.find("c1")->epoch, 1);
}

TEST_F(LeaseTest, ReleasedLeaseIsFreeAtOnceAndItsEpochGrows) {
  LeaseStore a_store(db_), b_store(db_);
  Replica a(a_store, "replica-a", 0), b(b_store, "replica-b", 0);
  ASSERT_TRUE(a.acquire("c1", 0));
  EXPECT_TRUE(a.release("c1", 1));
  auto released = b_store.find("c1");
  ASSERT_TRUE(released);
  EXPECT_FALSE(released->live(1));
  auto taken = b.acquire("c1", 1);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->epoch, 2);
  EXPECT_TRUE(b.release("c1", 2));
  // Taken back by the first holder after a release: a new epoch too.
  auto back = a.acquire("c1", 2);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->epoch, 3);
  a_store.remove("c1");
  EXPECT_FALSE(b_store.find("c1"));
}

// Many processes, each with its own connection, race for one free lease: one wins.
TEST_F(LeaseTest, ProcessesRacingForAFreeLeaseHaveExactlyOneWinner) {
  { LeaseStore schema(db_); }
  constexpr int kRacers = 8;
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<pid_t> racers;
  for (int i = 0; i < kRacers; ++i) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(go[1]);
      char byte;
      int code = 2;
      try {
        LeaseStore mine(db_);
        Replica replica(mine, "replica-" + std::to_string(i), 1000);
        if (read(go[0], &byte, 1) != 0) _exit(3);  // everyone starts when the pipe closes
        code = replica.acquire("raced", 1000) ? 0 : 1;
      } catch (...) {
      }
      _exit(code);
    }
    racers.push_back(pid);
  }
  close(go[0]);
  close(go[1]);
  int winners = 0, losers = 0;
  for (pid_t pid : racers) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 0)
      ++winners;
    else if (WEXITSTATUS(status) == 1)
      ++losers;
  }
  EXPECT_EQ(winners, 1);
  EXPECT_EQ(losers, kRacers - 1);
  LeaseStore check(db_);
  auto lease = check.find("raced");
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->epoch, 1);
}

FileRecord record_of(const std::string& storage, const std::string& path, const std::string& etag) {
  FileRecord record;
  record.storage = storage;
  record.path = path;
  record.size = 3;
  record.etag = etag;
  record.mime = "text/plain";
  return record;
}

// Metadata with the fence a replica sets: its own epoch for the storage.
void fence_at(Metadata& metadata, const int64_t& epoch) {
  metadata.set_write_fence([&epoch](db::Connection& conn, const std::string& storage) {
    LeaseStore::check_fence(conn, storage, epoch);
  });
}

TEST_F(LeaseTest, WritesOfAnOldEpochAreRefusedAndTheNewHoldersStay) {
  LeaseStore leases(db_);
  Replica a(leases, "a", 0), b(leases, "b", 0);
  Metadata old_holder(db_), new_holder(db_);
  int64_t old_epoch = 0, new_epoch = 0;
  fence_at(old_holder, old_epoch);
  fence_at(new_holder, new_epoch);
  old_epoch = a.acquire("s1", 0)->epoch;
  old_holder.put_file(record_of("s1", "/mnt/user-data/uploads/old.txt", "e1"), true);
  old_holder.put_file(record_of("s1", "/mnt/user-data/uploads/both.txt", "e1"), true);
  // a is paused past its heartbeat; b takes the container over and writes.
  ASSERT_TRUE(b.heartbeat(kTtl));
  new_epoch = b.acquire("s1", kTtl)->epoch;
  ASSERT_EQ(new_epoch, old_epoch + 1);
  new_holder.put_file(record_of("s1", "/mnt/user-data/uploads/both.txt", "e2"), true);
  new_holder.put_file(record_of("s1", "/mnt/user-data/uploads/new.txt", "e2"), true);
  // a comes back: every kind of write it makes is refused, and changes nothing.
  EXPECT_THROW(old_holder.put_file(record_of("s1", "/mnt/user-data/uploads/both.txt", "e3"), true),
               FencedError);
  EXPECT_THROW(old_holder.put_file(record_of("s1", "/mnt/user-data/uploads/late.txt", "e3"), false),
               FencedError);
  EXPECT_THROW(old_holder.delete_file("s1", "/mnt/user-data/uploads/new.txt"), FencedError);
  EXPECT_THROW(old_holder.delete_prefix("s1", "/mnt/user-data/uploads/"), FencedError);
  EXPECT_EQ(new_holder.find_file("s1", "/mnt/user-data/uploads/both.txt")->etag, "e2");
  EXPECT_TRUE(new_holder.find_file("s1", "/mnt/user-data/uploads/new.txt"));
  EXPECT_FALSE(new_holder.find_file("s1", "/mnt/user-data/uploads/late.txt"));
  // The new holder's own writes go on, deletes included.
  EXPECT_TRUE(new_holder.delete_file("s1", "/mnt/user-data/uploads/old.txt"));
  EXPECT_EQ(new_holder.delete_prefix("s1", "/mnt/user-data/uploads/n"), 1u);
  EXPECT_EQ(new_holder.files_of("s1").size(), 1u);
  // A storage without a lease row (its container was deleted, the row with it) is
  // fenced like a stale one: a holder that missed the delete writes nothing.
  try {
    old_holder.put_file(record_of("s2", "/mnt/user-data/uploads/x.txt", "e1"), true);
    ADD_FAILURE() << "a write without a lease row passed the fence";
  } catch (const FencedError& e) {
    EXPECT_TRUE(e.container_deleted());
  }
  EXPECT_FALSE(old_holder.find_file("s2", "/mnt/user-data/uploads/x.txt"));
  leases.remove("s1");
  EXPECT_THROW(new_holder.put_file(record_of("s1", "/mnt/user-data/uploads/new.txt", "e4"), true),
               FencedError);
}

// ---- The same on PostgreSQL (READ COMMITTED, a pool per replica), against a server the
// test starts (tests/postgres_harness.h).

// Threads, each a replica with a pool of its own, race for one free lease: one wins.
TEST(PostgresLease, RacingAcquirersHaveExactlyOneWinner) {
  sandboxd::testing::TestDatabase database(db::Backend::kPostgres);
  constexpr int kRacers = 8;
  std::vector<std::unique_ptr<LeaseStore>> replicas;
  std::vector<std::unique_ptr<Replica>> racing;
  for (int i = 0; i < kRacers; ++i) {
    replicas.push_back(std::make_unique<LeaseStore>(database.open()));
    racing.push_back(std::make_unique<Replica>(*replicas.back(), "replica-" + std::to_string(i), 1000));
  }
  std::mutex mutex;
  std::condition_variable start;
  bool go = false;
  std::atomic<int> winners{0}, losers{0};
  std::vector<std::thread> racers;
  for (int i = 0; i < kRacers; ++i)
    racers.emplace_back([&, i] {
      {
        std::unique_lock lock(mutex);
        start.wait(lock, [&] { return go; });
      }
      auto lease = racing[i]->acquire("raced", 1000);
      (lease ? winners : losers)++;
    });
  {
    std::lock_guard lock(mutex);
    go = true;
  }
  start.notify_all();
  for (auto& racer : racers) racer.join();
  EXPECT_EQ(winners.load(), 1);
  EXPECT_EQ(losers.load(), kRacers - 1);
  auto lease = replicas[0]->find("raced");
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->epoch, 1);
  // The winner's heartbeat ran out: the others race again, one of them wins at the
  // next epoch (each that finds the winner's incarnation not yet moved on moves it).
  winners = 0;
  racers.clear();
  const std::string first_holder = lease->holder;
  for (int i = 0; i < kRacers; ++i) {
    if (racing[i]->registration().id == first_holder) continue;
    ASSERT_TRUE(racing[i]->heartbeat(1000 + kTtl));
  }
  for (int i = 0; i < kRacers; ++i)
    racers.emplace_back([&, i] {
      if (racing[i]->registration().id != first_holder && racing[i]->acquire("raced", 1000 + kTtl)) winners++;
    });
  for (auto& racer : racers) racer.join();
  EXPECT_EQ(winners.load(), 1);
  EXPECT_EQ(replicas[0]->find("raced")->epoch, 2);
}

TEST(PostgresLease, WritesOfAnOldEpochAreRefusedAndTheNewHoldersStay) {
  sandboxd::testing::TestDatabase database(db::Backend::kPostgres);
  LeaseStore leases(database.open());
  Replica a(leases, "a", 0), b(leases, "b", 0);
  Metadata old_holder(database.open()), new_holder(database.open());
  int64_t old_epoch = 0, new_epoch = 0;
  fence_at(old_holder, old_epoch);
  fence_at(new_holder, new_epoch);
  old_epoch = a.acquire("s1", 0)->epoch;
  old_holder.put_file(record_of("s1", "/mnt/user-data/uploads/both.txt", "e1"), true);
  ASSERT_TRUE(b.heartbeat(kTtl));
  new_epoch = b.acquire("s1", kTtl)->epoch;
  ASSERT_EQ(new_epoch, old_epoch + 1);
  new_holder.put_file(record_of("s1", "/mnt/user-data/uploads/both.txt", "e2"), true);
  EXPECT_THROW(old_holder.put_file(record_of("s1", "/mnt/user-data/uploads/both.txt", "e3"), true),
               FencedError);
  EXPECT_THROW(old_holder.delete_file("s1", "/mnt/user-data/uploads/both.txt"), FencedError);
  EXPECT_THROW(old_holder.delete_prefix("s1", "/mnt/user-data/"), FencedError);
  EXPECT_EQ(new_holder.find_file("s1", "/mnt/user-data/uploads/both.txt")->etag, "e2");
  EXPECT_TRUE(new_holder.delete_file("s1", "/mnt/user-data/uploads/both.txt"));
}

// Waits until a backend of this test's database waits for a row lock, or `done`.
bool wait_for_lock_waiter(db::Database& database, const std::atomic<bool>& done) {
  while (!done) {
    {
      auto conn = database.acquire();
      db::Statement waiting(conn,
                            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
                            "AND wait_event_type = 'Lock'");
      if (waiting.step() && waiting.integer(0) > 0) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A takeover whose UPDATE is not yet committed when the old holder writes: the write
// waits for it and is then refused (it must not read the old epoch and go ahead).
TEST(PostgresLease, AWriteRacingATakeoverWaitsForItAndIsRefused) {
  sandboxd::testing::TestDatabase database(db::Backend::kPostgres);
  LeaseStore leases(database.open());
  Replica a(leases, "a", 0);
  Metadata old_holder(database.open());
  int64_t old_epoch = a.acquire("s1", 0)->epoch;
  fence_at(old_holder, old_epoch);
  auto taker = database.open();
  auto observer = database.open();
  auto conn = taker->acquire();
  conn.exec("BEGIN");
  {
    db::Statement take(
        conn, "UPDATE leases SET holder = 'b', epoch = epoch + 1, expires_at_ms = ? WHERE storage = ?");
    take.add(2 * kTtl).add("s1").run();
  }
  std::atomic<bool> done{false}, fenced{false};
  std::thread writer([&] {
    try {
      old_holder.put_file(record_of("s1", "/mnt/user-data/uploads/late.txt", "e1"), true);
    } catch (const FencedError&) {
      fenced = true;
    }
    done = true;
  });
  EXPECT_TRUE(wait_for_lock_waiter(*observer, done))
      << "the old holder's write did not wait for the takeover";
  conn.exec("COMMIT");
  writer.join();
  EXPECT_TRUE(fenced);
  EXPECT_FALSE(old_holder.find_file("s1", "/mnt/user-data/uploads/late.txt"));
}

// The other order: a write that passed the fence holds the lease row until it commits,
// so a takeover waits for it (and the write is in before the new epoch exists).
TEST(PostgresLease, ATakeoverWaitsForAWriteThatPassedTheFence) {
  sandboxd::testing::TestDatabase database(db::Backend::kPostgres);
  LeaseStore leases(database.open()), other_replica(database.open());
  Replica a(leases, "a", 0), b(other_replica, "b", kTtl);
  Metadata old_holder(database.open());
  int64_t old_epoch = a.acquire("s1", 0)->epoch;
  std::mutex mutex;
  std::condition_variable changed;
  bool fence_passed = false, let_write_finish = false;
  old_holder.set_write_fence([&](db::Connection& conn, const std::string& storage) {
    LeaseStore::check_fence(conn, storage, old_epoch);
    std::unique_lock lock(mutex);
    fence_passed = true;
    changed.notify_all();
    changed.wait(lock, [&] { return let_write_finish; });
  });
  std::thread writer(
      [&] { old_holder.put_file(record_of("s1", "/mnt/user-data/uploads/in.txt", "e1"), true); });
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return fence_passed; });
  }
  std::atomic<bool> taken{false};
  std::optional<Lease> lease;
  std::thread takeover([&] {
    lease = b.acquire("s1", kTtl);
    taken = true;
  });
  auto observer = database.open();
  EXPECT_TRUE(wait_for_lock_waiter(*observer, taken)) << "the takeover did not wait for the write in flight";
  {
    std::lock_guard lock(mutex);
    let_write_finish = true;
  }
  changed.notify_all();
  writer.join();
  takeover.join();
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->epoch, old_epoch + 1);
  EXPECT_TRUE(old_holder.find_file("s1", "/mnt/user-data/uploads/in.txt"));
}

// A lease row another session holds (an operator's psql, a replica stopped inside a
// write) past the lock timeout: the acquire gives up (TimeoutError, nothing changed)
// instead of waiting for it, and takes the lease once the row is free. Every connection
// carries the bounds asked for, and TCP keepalives.
TEST(PostgresLease, AnAcquireBehindAHeldRowGivesUpAtTheLockTimeout) {
  sandboxd::testing::TestDatabase database(db::Backend::kPostgres);
  db::PostgresTimeouts timeouts;
  timeouts.lock = std::chrono::milliseconds(300);
  timeouts.statement = std::chrono::seconds(20);
  timeouts.idle_in_transaction = std::chrono::seconds(7);
  auto bounded = db::open_postgres(database.postgres_url(), 2, timeouts);
  LeaseStore leases(bounded);
  Replica a(leases, "a", 0), b(leases, "b", kTtl);
  ASSERT_TRUE(a.acquire("s1", 0));
  {
    auto conn = bounded->acquire();
    db::Statement show(conn,
                       "SELECT current_setting('lock_timeout'), current_setting('statement_timeout'), "
                       "current_setting('idle_in_transaction_session_timeout')");
    ASSERT_TRUE(show.step());
    EXPECT_EQ(show.text(0), "300ms");
    EXPECT_EQ(show.text(1), "20s");
    EXPECT_EQ(show.text(2), "7s");
    int value = 0;
    socklen_t size = sizeof value;
    ASSERT_EQ(getsockopt(PQsocket(conn.postgres_handle()), SOL_SOCKET, SO_KEEPALIVE, &value, &size), 0);
    EXPECT_EQ(value, 1);
    ASSERT_EQ(getsockopt(PQsocket(conn.postgres_handle()), IPPROTO_TCP, TCP_KEEPIDLE, &value, &size), 0);
    EXPECT_EQ(value, 10);
  }
  auto other = database.open();
  auto holder = other->acquire();
  holder.exec("BEGIN");
  db::Statement(holder, "SELECT epoch FROM leases WHERE storage = 's1' FOR SHARE").run();
  EXPECT_THROW(b.acquire("s1", kTtl), db::TimeoutError);
  EXPECT_EQ(leases.find("s1")->holder, "a");
  holder.exec("ROLLBACK");
  auto taken = b.acquire("s1", kTtl);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->epoch, 2);
}

// A claim of an existing container makes no lease row once its record is gone (a
// replica coming back to a container deleted meanwhile), on both backends.
void no_lease_for_a_deleted_container(std::shared_ptr<db::Database> database) {
  LeaseStore leases(database);
  Replica a(leases, "a", 0);
  Metadata metadata(database);
  ContainerRecord record;
  record.owner = "alice";
  record.id = "c";
  record.storage = "s-kept";
  metadata.create_container(record);
  auto kept = a.acquire("s-kept", 0, /*existing_container=*/true);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->epoch, 1);
  EXPECT_FALSE(a.acquire("s-gone", 0, /*existing_container=*/true));
  EXPECT_FALSE(leases.find("s-gone"));
  metadata.delete_container("alice", "c");
  leases.remove("s-kept");
  EXPECT_FALSE(a.acquire("s-kept", 1, /*existing_container=*/true));
  EXPECT_FALSE(leases.find("s-kept"));
}

TEST_F(LeaseTest, NoLeaseIsMadeForADeletedContainer) {
  no_lease_for_a_deleted_container(db::open_sqlite(db_));
}

TEST(PostgresLease, NoLeaseIsMadeForADeletedContainer) {
  sandboxd::testing::TestDatabase database(db::Backend::kPostgres);
  no_lease_for_a_deleted_container(database.open());
}

}  // namespace
}  // namespace sandboxd::store

namespace sandboxd::ops {
namespace {

TEST(ClusterConfig, OffByDefaultAndReadWhenSet) {
  EXPECT_FALSE(parse_config("").cluster_enabled());
  auto config = parse_config(
      "cluster:\n  replicaId: sandboxd-0\n  advertiseUrl: http://sandboxd-0.sandboxd:8080\n"
      "  leaseSeconds: 5\n  shutdownGraceSec: 20\n  takeoverPerSecond: 50\n  takeoverBatch: 10\n");
  EXPECT_TRUE(config.cluster_enabled());
  EXPECT_EQ(config.cluster_replica_id, "sandboxd-0");
  EXPECT_EQ(config.cluster_advertise_url, "http://sandboxd-0.sandboxd:8080");
  EXPECT_EQ(config.cluster_lease_seconds, 5);
  EXPECT_EQ(config.cluster_shutdown_grace_sec, 20);
  EXPECT_EQ(config.cluster_takeover_per_second, 50);
  EXPECT_EQ(config.cluster_takeover_batch, 10);
  auto defaults = parse_config("cluster:\n  replicaId: r\n  advertiseUrl: http://10.0.0.1:8080/\n");
  EXPECT_EQ(defaults.cluster_lease_seconds, 15);
  EXPECT_EQ(defaults.cluster_shutdown_grace_sec, 30);
  EXPECT_EQ(defaults.cluster_takeover_per_second, 500);
  EXPECT_EQ(defaults.cluster_takeover_batch, 100);
}

TEST(ClusterConfig, BadValuesNameTheirKey) {
  auto refused = [](const std::string& yaml) -> std::string {
    try {
      parse_config(yaml);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(refused("cluster:\n  replicaId: r\n").rfind("cluster.advertiseUrl:", 0), 0u);
  EXPECT_EQ(refused("cluster:\n  advertiseUrl: http://a:1\n").rfind("cluster.replicaId:", 0), 0u);
  EXPECT_EQ(
      refused("cluster:\n  replicaId: 'a b'\n  advertiseUrl: http://a:1\n").rfind("cluster.replicaId:", 0),
      0u);
  EXPECT_EQ(
      refused("cluster:\n  replicaId: r\n  advertiseUrl: https://a:1\n").rfind("cluster.advertiseUrl:", 0),
      0u);
  EXPECT_EQ(refused("cluster:\n  replicaId: r\n  advertiseUrl: http://a:1/path\n")
                .rfind("cluster.advertiseUrl:", 0),
            0u);
  EXPECT_EQ(refused("cluster:\n  replicaId: r\n  advertiseUrl: http://a:1\n  leaseSeconds: 0\n")
                .rfind("cluster.leaseSeconds:", 0),
            0u);
  EXPECT_EQ(refused("cluster:\n  replicaId: r\n  advertiseUrl: http://a:1\n  takeoverPerSecond: 0\n")
                .rfind("cluster.takeoverPerSecond:", 0),
            0u);
  EXPECT_EQ(refused("cluster:\n  replicaId: r\n  advertiseUrl: http://a:1\n  takeoverBatch: 10001\n")
                .rfind("cluster.takeoverBatch:", 0),
            0u);
  EXPECT_EQ(refused("cluster:\n  replicaId: r\n  advertiseUrl: http://a:1\n  grace: 3\n")
                .rfind("cluster.grace:", 0),
            0u);
}

TEST(MetadataConfig, PostgresTimeoutsHaveDefaultsAndAreRead) {
  const Config defaults = parse_config("");
  EXPECT_EQ(defaults.postgres_lock_timeout_sec, 5);
  EXPECT_EQ(defaults.postgres_statement_timeout_sec, 30);
  EXPECT_EQ(defaults.postgres_idle_in_transaction_timeout_sec, 10);
  const Config set = parse_config(
      "metadata:\n  backend: postgres\n  postgres:\n    url: postgresql://h/d\n    lockTimeoutSec: 2\n"
      "    statementTimeoutSec: 0\n    idleInTransactionTimeoutSec: 20\n");
  EXPECT_EQ(set.postgres_lock_timeout_sec, 2);
  EXPECT_EQ(set.postgres_statement_timeout_sec, 0);
  EXPECT_EQ(set.postgres_idle_in_transaction_timeout_sec, 20);
  try {
    parse_config("metadata:\n  postgres:\n    lockTimeoutSec: -1\n");
    ADD_FAILURE() << "a negative timeout was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("metadata.postgres.lockTimeoutSec:", 0), 0u) << e.what();
  }
}

TEST(MetadataConfig, TheFileCacheHasDefaultsAndIsRead) {
  const Config defaults = parse_config("");
  EXPECT_EQ(defaults.file_cache_records, 200'000);
  EXPECT_EQ(defaults.file_cache_bytes, 64ull << 20);
  const Config set = parse_config("metadata:\n  fileCache:\n    records: 0\n    maxSize: 2Mi\n");
  EXPECT_EQ(set.file_cache_records, 0);
  EXPECT_EQ(set.file_cache_bytes, 2ull << 20);
  for (const char* bad :
       {"metadata:\n  fileCache:\n    records: -1\n", "metadata:\n  fileCache:\n    maxSize: 1Ki\n"}) {
    try {
      parse_config(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("metadata.fileCache.", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace sandboxd::ops
