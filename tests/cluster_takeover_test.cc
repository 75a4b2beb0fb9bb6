// The paced takeover of a dead replica's containers (docs/cluster.md): the pacer's
// claims (its arithmetic, on times the test passes in), the batched takeover statement
// on a real SQLite file and a real PostgreSQL the test starts (disjoint batches of two
// survivors, the fence of the dead holder, a live replica's leases untouched), and a
// survivor's rounds (ContainerLeases, without its loops: the test drives each round):
// a replica is not taken over on first sight, each round takes a bounded batch, every
// container is taken in the end, and the first request for one makes its copy current.
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cluster/container_leases.h"
#include "cluster/takeover_pacer.h"
#include "eventually.h"
#include "postgres_harness.h"
#include "store/lease_store.h"
#include "store/metadata.h"

namespace sandboxd::cluster {
namespace {

namespace fs = std::filesystem;
using store::LeaseStore;
using store::ReplicaRegistration;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using sandboxd::testing::eventually;

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(TakeoverPacer, ABurstAtOnceThenTheRateAndRequestsBeforeTheBackground) {
  const auto t0 = Clock::time_point{} + 1h;
  TakeoverPacer pacer(10, 5, t0);  // 10 a second, 5 at once
  for (int i = 0; i < 5; ++i) EXPECT_EQ(pacer.reserve(t0, 0s), t0) << i;
  // The sixth waits for its token: a tenth of a second; refused when it may not wait.
  EXPECT_FALSE(pacer.reserve(t0, 50ms));
  auto sixth = pacer.reserve(t0, 1s);
  ASSERT_TRUE(sixth);
  EXPECT_EQ(*sixth - t0, 100ms);
  auto seventh = pacer.reserve(t0, 1s);
  ASSERT_TRUE(seventh);
  EXPECT_EQ(*seventh - t0, 200ms);
  // While requests wait for theirs, the background gets nothing.
  EXPECT_EQ(pacer.take_free(t0 + 150ms, 100), 0);
  // Once they are served and the bucket refills, it gets what is free, no more than a burst.
  EXPECT_EQ(pacer.take_free(t0 + 500ms, 100), 3);
  EXPECT_EQ(pacer.take_free(t0 + 10s, 100), 5);
  EXPECT_EQ(pacer.take_free(t0 + 10s, 100), 0);
  pacer.give_back(2);
  EXPECT_EQ(pacer.take_free(t0 + 10s, 1), 1);
  EXPECT_EQ(pacer.take_free(t0 + 10s, 100), 1);
}

TEST(TakeoverPacer, OverAnyStretchNoMoreThanTheBurstPlusTheRate) {
  const auto t0 = Clock::time_point{} + 1h;
  TakeoverPacer pacer(100, 20, t0);
  int granted = 0;
  // Requests and the background asking all the time for 3 s: at most 20 + 100 * 3.
  for (auto t = t0; t <= t0 + 3s; t += 7ms) {
    if (auto turn = pacer.reserve(t, 0s)) ++granted;
    granted += pacer.take_free(t, 10);
  }
  EXPECT_LE(granted, 20 + 300 + 1);
  EXPECT_GE(granted, 300);
}

constexpr int64_t kTtl = 2000;

// A replica whose heartbeat ran out a while ago, holding `count` leases d-0.., and a live
// one holding 10 (l-0..).
struct DeadAndLive {
  DeadAndLive(LeaseStore& store, int count) {
    const int64_t long_ago = unix_ms() - 60000;
    dead = store.register_replica("replica-dead", "http://dead:1", long_ago, kTtl);
    for (int i = 0; i < count; ++i) {
      auto lease = store.acquire("d-" + std::to_string(i), dead, long_ago);
      EXPECT_TRUE(lease && lease->epoch == 1);
    }
    live = store.register_replica("replica-live", "http://live:1", unix_ms(), 600000);
    for (int i = 0; i < 10; ++i) EXPECT_TRUE(store.acquire("l-" + std::to_string(i), live, unix_ms()));
  }
  ReplicaRegistration dead, live;
};

store::ReplicaRow row_of(LeaseStore& store, const std::string& self, const std::string& id) {
  for (const auto& row : store.expired_replicas(self, unix_ms()))
    if (row.id == id) return row;
  ADD_FAILURE() << id << " is not listed as expired";
  return {};
}

// Two survivors take batches by turns: each at most its limit, none twice, all in the end.
void batches_by_turns(std::shared_ptr<store::db::Database> first,
                      std::shared_ptr<store::db::Database> second) {
  LeaseStore a_store(first), b_store(second);
  DeadAndLive replicas(a_store, 250);
  auto a = a_store.register_replica("replica-a", "http://a:1", unix_ms(), 600000);
  auto b = b_store.register_replica("replica-b", "http://b:1", unix_ms(), 600000);
  std::set<std::string> by_a, by_b;
  int rounds = 0;
  for (; rounds < 50 && by_a.size() + by_b.size() < 250; ++rounds) {
    const bool a_turn = rounds % 2 == 0;
    LeaseStore& store = a_turn ? a_store : b_store;
    auto taken =
        store.take_over(a_turn ? a : b, row_of(store, a_turn ? a.id : b.id, "replica-dead"), unix_ms(), 40);
    EXPECT_LE(taken.size(), 40u);
    for (const auto& lease : taken) {
      EXPECT_EQ(lease.epoch, 2) << lease.storage;
      EXPECT_TRUE((a_turn ? by_a : by_b).insert(lease.storage).second);
      EXPECT_EQ((a_turn ? by_b : by_a).count(lease.storage), 0u) << lease.storage << " taken twice";
    }
  }
  EXPECT_EQ(by_a.size() + by_b.size(), 250u);
  EXPECT_EQ(rounds, 7);  // 40 a statement: 250 in 7
  EXPECT_TRUE(a_store.take_over(a, row_of(a_store, a.id, "replica-dead"), unix_ms(), 40).empty());
  // The new holders' leases are valid; the dead one's heartbeat and writes are refused.
  auto lease = a_store.find("d-0");
  ASSERT_TRUE(lease);
  EXPECT_TRUE(lease->holder == "replica-a" || lease->holder == "replica-b");
  EXPECT_TRUE(lease->live(unix_ms()));
  EXPECT_FALSE(a_store.heartbeat(replicas.dead, unix_ms(), kTtl));
  {
    auto conn = first->acquire();
    EXPECT_THROW(LeaseStore::check_fence(conn, "d-0", 1), store::FencedError);
    EXPECT_EQ(LeaseStore::check_fence(conn, "d-0", 2), 2);
  }
  // The live replica's leases were never touched.
  for (int i = 0; i < 10; ++i) {
    auto kept = a_store.find("l-" + std::to_string(i));
    ASSERT_TRUE(kept);
    EXPECT_EQ(kept->holder, "replica-live");
    EXPECT_EQ(kept->epoch, 1);
  }
}

class TakeoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sandboxd-takeover-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    db_ = (fs::path(dir_) / "shared.db").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_, db_;
};

TEST_F(TakeoverTest, SurvivorsTakeDisjointBoundedBatchesUntilAllAreTaken) {
  batches_by_turns(store::db::open_sqlite(db_), store::db::open_sqlite(db_));
}

TEST(PostgresTakeover, SurvivorsTakeDisjointBoundedBatchesUntilAllAreTaken) {
  sandboxd::testing::TestDatabase database(store::db::Backend::kPostgres);
  batches_by_turns(database.open(), database.open());
}

// Two survivors at the same moment, each in its own thread: the rows one holds locked
// are skipped by the other (no waiting, no container taken twice), all are taken.
TEST(PostgresTakeover, ConcurrentSurvivorsNeverTakeOneContainerTwice) {
  sandboxd::testing::TestDatabase database(store::db::Backend::kPostgres);
  LeaseStore setup(database.open());
  DeadAndLive replicas(setup, 600);
  std::vector<std::set<std::string>> taken(2);
  std::atomic<size_t> total{0};
  std::vector<std::thread> survivors;
  for (int s = 0; s < 2; ++s)
    survivors.emplace_back([&, s] {
      LeaseStore store(database.open());
      auto self = store.register_replica("replica-" + std::to_string(s), "http://s:1", unix_ms(), 600000);
      for (int round = 0; round < 200; ++round) {
        auto rows = store.expired_replicas(self.id, unix_ms());
        store::ReplicaRow dead;
        for (const auto& row : rows)
          if (row.id == "replica-dead") dead = row;
        if (dead.id.empty()) break;
        for (const auto& lease : store.take_over(self, dead, unix_ms(), 25)) {
          taken[s].insert(lease.storage);
          ++total;
        }
        if (total >= 600) break;
      }
    });
  for (auto& t : survivors) t.join();
  EXPECT_EQ(taken[0].size() + taken[1].size(), 600u);
  for (const auto& storage : taken[0]) EXPECT_EQ(taken[1].count(storage), 0u) << storage << " taken twice";
  for (int i = 0; i < 600; ++i) EXPECT_EQ(setup.find("d-" + std::to_string(i))->epoch, 2);
}

TEST_F(TakeoverTest, AReplicaThatLostItsIncarnationTakesNothing) {
  LeaseStore store(db_);
  DeadAndLive replicas(store, 20);
  auto survivor = store.register_replica("replica-a", "http://a:1", unix_ms(), 600000);
  auto stale = survivor;
  survivor = store.register_replica("replica-a", "http://a:1", unix_ms(), 600000);  // moved on
  EXPECT_TRUE(store.take_over(stale, row_of(store, survivor.id, "replica-dead"), unix_ms(), 50).empty());
  EXPECT_EQ(store.take_over(survivor, row_of(store, survivor.id, "replica-dead"), unix_ms(), 50).size(), 20u);
}

// A survivor's rounds as its loop runs them, one by one.
TEST_F(TakeoverTest, RoundsAreBoundedWaitForTheReplicaToStayDeadAndTakeEveryContainer) {
  boost::asio::io_context io;
  LeaseStore store(db_);
  DeadAndLive replicas(store, 100);
  ContainerLeases::Settings settings;
  settings.replica_id = "replica-a";
  settings.advertise_url = "http://a:1";
  settings.lease = std::chrono::seconds(2);  // dead once it stayed so for 4 s
  settings.takeover_per_second = 1000;
  settings.takeover_batch = 15;
  ContainerLeases survivor(io, store, settings);
  survivor.register_replica();
  // First sight: watched, not taken.
  auto first = survivor.take_over_round();
  EXPECT_TRUE(first.watching);
  EXPECT_FALSE(first.dead);
  EXPECT_EQ(first.taken, 0u);
  EXPECT_TRUE(survivor.held().empty());
  size_t total = 0;
  int rounds_with_claims = 0;
  for (int i = 0; i < 200 && total < 100; ++i) {
    std::this_thread::sleep_for(50ms);
    ASSERT_TRUE(survivor.renew());
    auto round = survivor.take_over_round();
    EXPECT_LE(round.taken, 15u);
    if (round.taken > 0) ++rounds_with_claims;
    total += round.taken;
  }
  EXPECT_EQ(total, 100u);
  EXPECT_GE(rounds_with_claims, 7);  // 15 at most a round
  EXPECT_EQ(survivor.held().size(), 100u);
  // Done with it: the next rounds read the replicas and take nothing.
  auto after = survivor.take_over_round();
  if (after.dead) after = survivor.take_over_round();  // (the last batch ended exactly at 100)
  EXPECT_FALSE(after.dead);
  EXPECT_FALSE(after.watching);
  EXPECT_EQ(after.taken, 0u);
  // A container taken in the background: its first request makes its copy current; the
  // next ones use it as it is. Until that first request it is not served as confirmed.
  EXPECT_FALSE(survivor.confirmed("d-7"));
  auto claim = survivor.claim("d-7", /*existing_container=*/false);
  ASSERT_TRUE(claim);
  EXPECT_TRUE(claim->fresh);
  EXPECT_EQ(claim->epoch, 2);
  EXPECT_TRUE(survivor.confirmed("d-7"));
  auto again = survivor.claim("d-7", false);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->fresh);
  // The live replica kept its own.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(store.find("l-" + std::to_string(i))->holder, "replica-live");
  // What the dead replica held is now found with a live holder: nothing to take over.
  EXPECT_FALSE(survivor.holder_of("d-8").takeover);
  // Draining: what no request used is released for the others at once; the one in use
  // stays until its sandbox stops.
  survivor.set_draining();
  for (int i = 0; i < 400 && store.find("d-99")->holder != ""; ++i) std::this_thread::sleep_for(25ms);
  for (int i = 0; i < 100; ++i)
    if (i != 7) {
      EXPECT_EQ(store.find("d-" + std::to_string(i))->holder, "") << i;
    }
  EXPECT_EQ(store.find("d-7")->holder, "replica-a");
  EXPECT_EQ(survivor.held(), std::vector<std::string>{"d-7"});
}

// A request for a container of a dead replica, before the background took it, is a
// takeover (it waits its turn); one held by a live replica is relayed.
TEST_F(TakeoverTest, HolderOfTellsATakeoverFromALiveHolder) {
  boost::asio::io_context io;
  LeaseStore store(db_);
  DeadAndLive replicas(store, 3);
  ContainerLeases::Settings settings;
  settings.replica_id = "replica-a";
  settings.advertise_url = "http://a:1";
  ContainerLeases survivor(io, store, settings);
  survivor.register_replica();
  auto dead = survivor.holder_of("d-1");
  EXPECT_TRUE(dead.takeover);
  EXPECT_FALSE(dead.elsewhere);
  auto live = survivor.holder_of("l-1");
  EXPECT_FALSE(live.takeover);
  EXPECT_TRUE(live.elsewhere);
  EXPECT_EQ(live.holder_url, "http://live:1");
  EXPECT_FALSE(survivor.holder_of("never-made").takeover);
  ASSERT_TRUE(survivor.claim("mine", false));
  EXPECT_FALSE(survivor.holder_of("mine").takeover);
  EXPECT_FALSE(survivor.holder_of("mine").elsewhere);
}

// The containers of a replica that a stall kept from its heartbeat are not taken while
// this replica cannot renew its own: a survivor judges nobody until its heartbeat is
// confirmed again, and then waits afresh.
TEST_F(TakeoverTest, AReplicaWhoseOwnHeartbeatIsNotConfirmedJudgesNobody) {
  boost::asio::io_context io;
  LeaseStore store(db_);
  DeadAndLive replicas(store, 10);
  ContainerLeases::Settings settings;
  settings.replica_id = "replica-a";
  settings.advertise_url = "http://a:1";
  settings.lease = std::chrono::seconds(2);
  ContainerLeases survivor(io, store, settings);
  survivor.register_replica();
  EXPECT_TRUE(survivor.take_over_round().watching);
  // Past leaseSeconds/2 without a heartbeat of its own: the dead are forgotten, and no
  // round took anything meanwhile.
  size_t taken = 0;
  ASSERT_TRUE(eventually([&] {
    auto round = survivor.take_over_round();
    taken += round.taken;
    return !round.watching;
  }));
  EXPECT_EQ(taken, 0u);
  auto round = survivor.take_over_round();
  EXPECT_EQ(round.taken, 0u);
  EXPECT_FALSE(round.watching);  // forgotten
  ASSERT_TRUE(survivor.renew());
  round = survivor.take_over_round();
  EXPECT_EQ(round.taken, 0u);  // seen again: the wait starts over
  EXPECT_TRUE(round.watching);
  EXPECT_TRUE(survivor.held().empty());
}

// The file records in memory follow the lease, wired as `sandboxd serve` wires them: held
// while the lease is held and its heartbeat confirmed, under its epoch; not served once
// the heartbeat is older than leaseSeconds/2; forgotten when the lease is released or lost
// with the incarnation (another replica took a container over).
TEST_F(TakeoverTest, FileRecordsAreServedFromMemoryOnlyUnderAConfirmedLease) {
  boost::asio::io_context io;
  LeaseStore a_store(db_), b_store(db_);
  store::Metadata metadata(db_), other_replica(db_);
  ContainerLeases::Settings settings;
  settings.replica_id = "replica-a";
  settings.advertise_url = "http://a:1";
  settings.lease = std::chrono::seconds(2);
  ContainerLeases a(io, a_store, settings);
  metadata.enable_file_cache(store::FileCacheLimits{},
                             [&a](const std::string& storage) { return a.cache_epoch(storage); });
  a.set_on_let_go([&metadata](const std::string& storage) { metadata.forget_cached_files(storage); });
  a.register_replica();
  auto record = [](const std::string& storage, const std::string& name) {
    store::FileRecord file;
    file.storage = storage;
    file.path = "/mnt/user-data/uploads/" + name;
    file.created_at = 100;
    file.etag = "e";
    file.mime = "text/plain";
    return file;
  };
  auto count = [&metadata](const std::string& storage) {
    return metadata.list_files(storage, {}, 100, std::nullopt, std::nullopt).files.size();
  };
  auto held = [&metadata](const std::string& storage) {
    return metadata.cached_list_files(storage, {}, 100, std::nullopt, std::nullopt).has_value();
  };

  auto claim = a.claim("c1", /*existing_container=*/false);
  ASSERT_TRUE(claim);
  EXPECT_EQ(a.cache_epoch("c1"), claim->epoch);
  EXPECT_EQ(a.cache_epoch("never-claimed"), std::nullopt);
  metadata.put_file(record("c1", "a"), true);
  metadata.put_file(record("free", "a"), true);
  EXPECT_EQ(count("c1"), 1u);
  EXPECT_TRUE(held("c1"));
  EXPECT_EQ(count("free"), 1u);
  EXPECT_FALSE(held("free"));  // no lease here: always the database

  // The heartbeat older than leaseSeconds/2: the database, not memory.
  ASSERT_TRUE(eventually([&] { return a.cache_epoch("c1") == std::nullopt; }));
  EXPECT_FALSE(held("c1"));
  ASSERT_TRUE(a.renew());
  EXPECT_TRUE(held("c1"));
  // Released: forgotten at once, and not served again under that lease.
  EXPECT_TRUE(a.release("c1"));
  EXPECT_EQ(metadata.cached_containers(), 0u);
  EXPECT_FALSE(held("c1"));

  // Lost with the incarnation: replica B takes c2 over once A's heartbeat ran out, and
  // writes; A's next heartbeat finds its incarnation gone and forgets what it held.
  ASSERT_TRUE(a.claim("c2", false));
  metadata.put_file(record("c2", "a"), true);
  EXPECT_EQ(count("c2"), 1u);
  EXPECT_TRUE(held("c2"));
  ContainerLeases::Settings b_settings = settings;
  b_settings.replica_id = "replica-b";
  b_settings.advertise_url = "http://b:1";
  ContainerLeases b(io, b_store, b_settings);
  b.register_replica();
  // A's heartbeat (2 s) runs out: B may take c2 over.
  ASSERT_TRUE(eventually([&] { return b.holder_of("c2").takeover; }));
  ASSERT_TRUE(b.claim("c2", false));
  other_replica.put_file(record("c2", "by-b"), true);
  EXPECT_FALSE(held("c2"));  // A's heartbeat is old: its reads ask the database
  EXPECT_EQ(count("c2"), 2u);
  EXPECT_FALSE(a.renew());  // gone: what it held is let go
  EXPECT_EQ(a.cache_epoch("c2"), std::nullopt);
  EXPECT_EQ(metadata.cached_containers(), 0u);
}

}  // namespace
}  // namespace sandboxd::cluster
