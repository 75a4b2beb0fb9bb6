// The cluster when the database or a peer stalls, and around a delete, from the client's
// and the operator's side, on real parts started by the test: two `sandboxd serve`
// replicas (separate processes and data directories) on one real PostgreSQL
// (tests/cluster_harness.h) and one bucket of a real S3 server (s3rver,
// tests/s3_server.h), with short lease and database timeouts:
// - a session holding a container's lease row (FOR SHARE, then pg_sleep(60)) makes
//   requests for that container a 503 with Retry-After, while /health and another
//   owner's commands on the same replica are answered throughout;
// - the whole leases table locked ACCESS EXCLUSIVE: commands on containers the replica
//   holds are answered (no read of that table), requests that need a lease are a 503
//   with Retry-After, never a 500;
// - a holder stopped (SIGSTOP) inside a flush's fenced transaction: the other replica
//   keeps answering /health and other owners, the server ends the stopped session
//   (idle_in_transaction_session_timeout) and the other replica then takes the container;
// - a holder paused while its container is deleted through the other replica writes
//   nothing after the delete (no manifest row, no object) and lets its copy go (no
//   mount, no folder) when it comes back;
// - a replica paused past its heartbeat, one of whose containers the other replica took
//   meanwhile: it finds its incarnation gone, registers again, never serves the taken
//   container again (its requests go to the new holder), and takes the one nobody took
//   back at the next epoch, with its files.
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <thread>

#include "cluster_client.h"
#include "cluster_harness.h"
#include "s3_server.h"
#include "scripted_upstream.h"
#include "store/database.h"
#include "store/s3_client.h"

using namespace sandboxd::testing;
namespace bj = boost::json;
namespace db = sandboxd::store::db;

namespace {

constexpr int kLeaseSeconds = 3;
constexpr int kFlushIntervalSec = 1;
const std::string kContainers = "/api/gpt/v1/containers";
// Short bounds on the replicas' database waits, so that the tests wait little.
const std::string kPostgresTimeouts = "    lockTimeoutSec: 1\n    idleInTransactionTimeoutSec: 4\n";
// The sandbox path whose flush stops replica A inside its fenced transaction (the
// failpoint in store/manifest_store.cc), in the test that restarts A with it.
const std::string kStopPath = "/mnt/user-data/outputs/stop-in-fence.txt";

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The process state letter of /proc/<pid>/stat ('T' once stopped).
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

class ClusterReliability : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-reliability-XXXXXX").string();
    root = mkdtemp(pattern.data());
    metadata = new SharedMetadata(db::Backend::kPostgres);
    metadata->set_postgres_yaml(kPostgresTimeouts);
    s3 = new S3Server();
    upstream = new ScriptedUpstream();
    const std::string extra = s3->storage_yaml("sbx/", kFlushIntervalSec) + "capacity:\n  retryAfterSec: 1\n";
    for (const char* id : {"replica-a", "replica-b"})
      replicas.push_back(new Replica(id, root, *metadata, upstream->base_url(), kLeaseSeconds, extra));
    for (auto* replica : replicas) replica->start();
    bucket = new sandboxd::store::S3Client(s3->client_settings());
  }
  static void TearDownTestSuite() {
    for (auto* replica : replicas) delete replica;
    replicas.clear();
    delete bucket;
    delete upstream;
    delete s3;
    delete metadata;
    std::error_code ec;
    if (!root.empty()) fs::remove_all(root, ec);
  }
  void SetUp() override {
    ASSERT_EQ(replicas.size(), 2u) << "the cluster did not start (see the suite set-up)";
  }
  void TearDown() override {
    if (HasFailure())
      for (const auto* replica : replicas) replica->print_log_tail();
  }

  static Replica& a() { return *replicas[0]; }
  static Replica& b() { return *replicas[1]; }

  static Answer command(const std::string& token, const std::string& base, const std::string& container,
                        const std::string& text, int max_seconds = 60) {
    const fs::path body = root / ("cmd-" + std::to_string(++counter) + ".json");
    std::ofstream(body) << bj::serialize(bj::object{{"command", text}});
    Answer answer =
        curl_with_token(root, counter, token,
                        "--max-time " + std::to_string(max_seconds) + " -X POST '" + base + kContainers +
                            "/" + container + "/tools/bash_code_execution' --data-binary @" + body.string());
    fs::remove(body);
    return answer;
  }
  static Answer alice(const std::string& base, const std::string& container, const std::string& text) {
    return command(Replica::kToken, base, container, text);
  }
  static std::string stdout_of(const Answer& answer) {
    if (answer.status != 200) return "<" + answer.describe() + ">";
    const auto value = json(answer.body);
    const auto* out = value.as_object().if_contains("stdout");
    return out && out->is_string() ? std::string(out->as_string()) : std::string("<no stdout>");
  }

  // While it lives: /health and another owner's (bob's) command in `container` (one
  // `replica` holds) on `replica`, again and
  // again, each bounded by curl's --max-time (an answer that waits for the stalled
  // container's database row never comes within it: that row is held for a minute).
  class OthersServed {
   public:
    OthersServed(const Replica& replica, std::string container)
        : base_(replica.url()), container_(std::move(container)) {
      thread_ = std::thread([this] {
        while (!stop_) {
          Answer health;
          health.status = std::atoi(
              sh("curl -s -o /dev/null -w '%{http_code}' --max-time 5 '" + base_ + "/health'").c_str());
          Answer echo = command(Replica::kBobToken, base_, container_, "echo ok", 5);
          std::lock_guard lock(mutex_);
          if (health.status == 200)
            ++health_ok_;
          else
            failures_.push_back("/health: " + health.describe());
          if (echo.status == 200 && stdout_of(echo) == "ok\n")
            ++echo_ok_;
          else
            failures_.push_back("bob's echo: " + echo.describe());
        }
      });
    }
    ~OthersServed() { finish(); }
    void finish() {
      stop_ = true;
      if (thread_.joinable()) thread_.join();
    }
    // Ends the loop: every answer must have been right, and some of each must have come.
    void check() {
      finish();
      EXPECT_TRUE(failures_.empty()) << failures_.size() << " failed, the first: " << failures_[0];
      EXPECT_GT(health_ok_, 0);
      EXPECT_GT(echo_ok_, 0);
    }
    // After finish(): what went wrong, and how many answers of each came.
    std::vector<std::string> failures() const { return failures_; }
    int health_ok() const { return health_ok_; }
    int echo_ok() const { return echo_ok_; }

   private:
    std::string base_, container_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
    std::mutex mutex_;
    std::vector<std::string> failures_;
    int health_ok_ = 0, echo_ok_ = 0;
  };

  // A 503 with Retry-After, in the shape of a refusal for capacity.
  static void expect_retry_later(const Answer& answer) {
    EXPECT_EQ(answer.status, 503) << answer.describe();
    EXPECT_TRUE(answer.retry_after()) << answer.describe();
    EXPECT_NE(answer.body.find("overloaded_error"), std::string::npos) << answer.describe();
  }
  // Ends the database sessions the test opened as `application_name`.
  static void end_sessions(const std::string& application_name) {
    auto admin = metadata->database().open();
    auto conn = admin->acquire();
    conn.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '" +
              application_name + "'");
  }

  // Sessions of the shared database, from pg_stat_activity: how many match `where`.
  static int64_t sessions_where(const std::string& where) {
    auto admin = metadata->database().open();
    auto conn = admin->acquire();
    db::Statement query(
        conn, "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND " + where);
    return query.step() ? query.integer(0) : -1;
  }

  static inline fs::path root;
  static inline SharedMetadata* metadata = nullptr;
  static inline S3Server* s3 = nullptr;
  static inline ScriptedUpstream* upstream = nullptr;
  static inline std::vector<Replica*> replicas;
  static inline sandboxd::store::S3Client* bucket = nullptr;
  static inline std::atomic<int> counter{0};
};

TEST_F(ClusterReliability, ALeaseRowHeldInTheDatabaseHoldsUpThatContainerAloneWithA503) {
  const std::string container = "held-row";
  ASSERT_EQ(stdout_of(alice(a().url(), container, "echo one")), "one\n");
  ASSERT_EQ(stdout_of(command(Replica::kBobToken, a().url(), "bob-box", "echo ok")), "ok\n");
  // Stopped: its lease is released, so the next request for it must take the row again.
  Answer stopped =
      curl_as_alice(root, counter, "-X POST '" + a().url(kContainers + "/" + container + "/stop") + "'");
  ASSERT_EQ(stopped.status, 200) << stopped.describe();
  const std::string storage = metadata->storage_of("alice", container);
  ASSERT_FALSE(storage.empty());
  ASSERT_EQ(metadata->lease_of_storage(storage)->holder, "");

  // A session of someone else's (an operator's psql, a stuck job) reads the lease row
  // FOR SHARE and then sleeps inside its transaction.
  std::thread holder([&] {
    try {
      auto database =
          db::open_postgres(metadata->database().postgres_url() + "?application_name=row-holder", 1);
      auto conn = database->acquire();
      conn.exec("SET statement_timeout = 0");
      conn.exec("BEGIN");
      db::Statement lock(conn, "SELECT epoch FROM leases WHERE storage = ? FOR SHARE");
      lock.add(storage).run();
      conn.exec("SELECT pg_sleep(60)");
    } catch (const std::exception&) {
      // Ended by the test (pg_terminate_backend).
    }
  });
  ASSERT_TRUE(eventually(
      [] { return sessions_where("application_name = 'row-holder' AND query LIKE '%pg_sleep%'") == 1; }));

  {
    OthersServed others(a(), "bob-box");
    // Requests for that container, several at once: each a 503 with Retry-After.
    std::vector<Answer> held(4);
    std::vector<std::thread> requests;
    for (auto& answer : held)
      requests.emplace_back([&answer, &container] { answer = alice(a().url(), container, "echo two"); });
    for (auto& request : requests) request.join();
    for (const auto& answer : held) expect_retry_later(answer);
    // The same through the other replica (it would take the lease as well).
    expect_retry_later(alice(b().url(), container, "echo two"));
    others.check();
  }
  EXPECT_NE(a().log().find("the lease row is held by another session"), std::string::npos);

  // The holder goes: the container is served again.
  end_sessions("row-holder");
  holder.join();
  Answer again;
  EXPECT_TRUE(eventually([&] { return (again = alice(a().url(), container, "echo three")).status == 200; }))
      << again.describe();
  EXPECT_EQ(stdout_of(again), "three\n");
}

// The whole leases table locked ACCESS EXCLUSIVE (a migration, a VACUUM FULL, a stuck
// administrator's transaction): even a plain read of it waits. Commands on containers
// replica A already holds need no access to it and are answered; a request that must
// read or take a lease (a container A does not hold, or A's through replica B) is a 503
// with Retry-After, never a 500; and once the lock goes, everything is served again.
TEST_F(ClusterReliability, ALeaseTableLockedInTheDatabaseLeavesHeldContainersServed) {
  const std::string held = "held-table", not_held = "not-held-table";
  ASSERT_EQ(stdout_of(command(Replica::kBobToken, a().url(), "bob-box", "echo ok")), "ok\n");
  ASSERT_EQ(stdout_of(alice(a().url(), held, "echo one")), "one\n");
  ASSERT_EQ(stdout_of(alice(a().url(), not_held, "echo one")), "one\n");
  Answer stopped =
      curl_as_alice(root, counter, "-X POST '" + a().url(kContainers + "/" + not_held + "/stop") + "'");
  ASSERT_EQ(stopped.status, 200) << stopped.describe();

  std::thread locker([&] {
    try {
      auto database =
          db::open_postgres(metadata->database().postgres_url() + "?application_name=table-locker", 1);
      auto conn = database->acquire();
      conn.exec("SET statement_timeout = 0");
      conn.exec("SET lock_timeout = 0");
      conn.exec("BEGIN");
      conn.exec("LOCK TABLE leases IN ACCESS EXCLUSIVE MODE");
      conn.exec("SELECT pg_sleep(60)");
    } catch (const std::exception&) {
      // Ended by the test (pg_terminate_backend).
    }
  });
  ASSERT_TRUE(eventually(
      [] { return sessions_where("application_name = 'table-locker' AND query LIKE '%pg_sleep%'") == 1; }));

  {
    OthersServed others(a(), "bob-box");
    // Another owner's held container: every command answered, none a 500.
    for (int i = 0; i < 8; ++i) {
      Answer echo = command(Replica::kBobToken, a().url(), "bob-box", "echo ok", 30);
      EXPECT_EQ(echo.status, 200) << echo.describe();
      EXPECT_EQ(stdout_of(echo), "ok\n");
    }
    // A command that writes a file must pass the fence, which reads the lease row: it
    // may wait for the lock, then is answered or refused with Retry-After, never a 500.
    Answer write =
        alice(a().url(), held, "echo data > /mnt/user-data/outputs/while-locked.txt; echo written");
    EXPECT_TRUE(write.status == 200 || (write.status == 503 && write.retry_after())) << write.describe();
    // A container A does not hold: its lease must be read and taken.
    expect_retry_later(alice(a().url(), not_held, "echo two"));
    // A's container through B: B must read who holds it.
    expect_retry_later(alice(b().url(), held, "echo two"));
    others.check();
  }

  end_sessions("table-locker");
  locker.join();
  Answer again;
  EXPECT_TRUE(eventually([&] { return (again = alice(a().url(), not_held, "echo three")).status == 200; }))
      << again.describe();
  EXPECT_EQ(stdout_of(again), "three\n");
  EXPECT_EQ(stdout_of(alice(b().url(), held, "echo four")), "four\n");  // relayed to A again
}

TEST_F(ClusterReliability, AHolderStoppedInsideAFencedWriteIsEndedByTheDatabaseWhileTheOtherReplicaServes) {
  // A again, with the failpoint that stops it inside the fenced write of kStopPath.
  a().stop(SIGTERM);
  setenv("SANDBOXD_FAILPOINT_STOP_IN_FENCED_WRITE", kStopPath.c_str(), 1);
  a().start();
  unsetenv("SANDBOXD_FAILPOINT_STOP_IN_FENCED_WRITE");
  const std::string container = "stopped-in-fence";
  ASSERT_EQ(
      stdout_of(alice(a().url(), container, "echo before > /mnt/user-data/outputs/before.txt; echo ok")),
      "ok\n");
  ASSERT_TRUE(eventually(
      [&] { return metadata->manifest_of("alice", container).count("/mnt/user-data/outputs/before.txt"); }));
  ASSERT_EQ(stdout_of(command(Replica::kBobToken, b().url(), "bob-box-b", "echo ok")), "ok\n");
  // The next flush of A stops A inside its transaction, the lease row locked.
  ASSERT_EQ(stdout_of(alice(a().url(), container, "echo x > " + kStopPath + "; echo ok")), "ok\n");
  ASSERT_TRUE(eventually([&] { return process_state(a().pid()) == 'T'; })) << "A did not reach the failpoint";
  EXPECT_TRUE(eventually([] { return sessions_where("state = 'idle in transaction'") == 1; }))
      << "A's session holds its transaction open";
  const std::string storage = metadata->storage_of("alice", container);

  OthersServed others(b(), "bob-box-b");
  // B takes the container once A's lease ran out and the server ended A's session: until
  // then each request for it is a 503 with Retry-After.
  ASSERT_TRUE(eventually([&] { return metadata->lease_of_storage(storage)->expires_at_ms < now_ms(); }));
  Answer through_b;
  int refused = 0;
  ASSERT_TRUE(eventually(
      [&] {
        through_b = alice(b().url(), container, "cat /mnt/user-data/outputs/before.txt");
        if (through_b.status == 503) {
          ++refused;
          EXPECT_TRUE(through_b.retry_after()) << through_b.describe();
        } else {
          EXPECT_EQ(through_b.status, 200) << through_b.describe();
        }
        return through_b.status == 200;
      },
      std::chrono::seconds(30)))
      << through_b.describe();
  EXPECT_EQ(stdout_of(through_b), "before\n");
  EXPECT_EQ(sessions_where("state = 'idle in transaction'"), 0)
      << "the stopped session was ended by the server";
  auto lease = metadata->lease_of_storage(storage);
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->holder, "replica-b");
  EXPECT_EQ(lease->epoch, 2);
  others.finish();
  EXPECT_TRUE(others.failures().empty())
      << others.failures().size() << " failed, the first: " << others.failures()[0];
  EXPECT_GT(others.health_ok(), 0);
  EXPECT_GT(others.echo_ok(), 0);
  std::cerr << refused << " requests for the container were refused (503) while A's session held the row\n";

  // A resumes: its write went with its session, and the next meets the fence.
  a().signal(SIGCONT);
  EXPECT_TRUE(
      eventually([&] { return a().log().find("served by another replica now") != std::string::npos; }));
  auto manifest = metadata->manifest_of("alice", container);
  EXPECT_FALSE(manifest.count(kStopPath)) << "the stopped holder's write landed after the takeover";
  for (const auto& [path, row] : manifest) EXPECT_GE(row.epoch, 1) << path << " was written without a lease";
  EXPECT_EQ(stdout_of(alice(a().url(), container, "ls /mnt/user-data/outputs")), "before.txt\n");
  a().stop(SIGTERM);
  a().start();  // without the failpoint
}

TEST_F(ClusterReliability, AHolderPausedWhileItsContainerIsDeletedWritesNothingAfterAndLetsItsCopyGo) {
  const std::string container = "deleted-while-paused";
  ASSERT_EQ(
      stdout_of(alice(a().url(), container, "echo before > /mnt/user-data/outputs/before.txt; echo ok")),
      "ok\n");
  ASSERT_TRUE(eventually(
      [&] { return metadata->manifest_of("alice", container).count("/mnt/user-data/outputs/before.txt"); }));
  const std::string storage = metadata->storage_of("alice", container);
  ASSERT_FALSE(storage.empty());
  const std::string objects = "sbx/objects/" + storage + "/";
  auto puts_seen = [&] {
    const std::string log = s3->verifier_log(),
                      mark = "verified PUT /" + std::string(S3Server::kBucket) + "/" + objects;
    size_t count = 0;
    for (size_t at = log.find(mark); at != std::string::npos; at = log.find(mark, at + 1)) ++count;
    return count;
  };
  const size_t puts_before = puts_seen();
  ASSERT_GE(puts_before, 1u);

  // The bucket stops answering; A writes after.txt and its flush goes out (and waits).
  s3->signal_s3rver(SIGSTOP);
  ASSERT_EQ(stdout_of(alice(a().url(), container, "echo after > /mnt/user-data/outputs/after.txt; echo ok")),
            "ok\n");
  EXPECT_TRUE(eventually([&] { return puts_seen() > puts_before; }))
      << "A's flush of after.txt did not go out";
  a().signal(SIGSTOP);
  s3->signal_s3rver(SIGCONT);
  // A's lease runs out; the container is deleted through B.
  ASSERT_TRUE(eventually([&] { return metadata->lease_of_storage(storage)->expires_at_ms < now_ms(); }));
  Answer deleted;
  ASSERT_TRUE(eventually([&] {
    deleted = curl_as_alice(root, counter, "-X DELETE '" + b().url(kContainers + "/" + container) + "'");
    return deleted.status == 200;
  })) << deleted.describe();
  EXPECT_FALSE(metadata->lease_of_storage(storage)) << "the lease row stays after the delete";

  // A comes back: nothing of the container reappears, and A lets its copy go.
  a().signal(SIGCONT);
  EXPECT_TRUE(
      eventually([&] { return a().log().find("was deleted through another replica") != std::string::npos; },
                 std::chrono::seconds(30)));
  auto mounted_on = [&](const Replica& replica) {
    std::ifstream in("/proc/" + std::to_string(replica.pid()) + "/mountinfo");
    std::string mounts((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return mounts.find(storage) != std::string::npos;
  };
  for (const Replica* replica : {&a(), &b()}) {
    EXPECT_TRUE(eventually([&] { return !mounted_on(*replica); }))
        << replica->id() << " keeps the volume mounted";
    EXPECT_TRUE(eventually([&] { return !fs::exists(replica->dir() / "data" / "containers" / storage); }))
        << replica->id() << " keeps the container's folder";
  }
  // Give A's flusher its turns (retries back off from 2 s), then look at everything.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  EXPECT_TRUE(metadata->manifest_of_storage(storage).empty()) << "manifest rows of the deleted container";
  EXPECT_EQ(metadata->file_rows_of_storage(storage), 0u) << "file rows of the deleted container";
  EXPECT_FALSE(metadata->lease_of_storage(storage)) << "a lease row of the deleted container";
  EXPECT_TRUE(eventually([&] {
    auto listed = bucket->list_objects(objects);
    return listed && listed->empty();
  })) << "objects of the deleted container stay in the bucket";
  EXPECT_EQ(alice(a().url(), container, "true").status, 200) << "the id can be used again (a new container)";
  EXPECT_NE(metadata->storage_of("alice", container), storage);
}

TEST_F(ClusterReliability, AReplicaPausedPastItsHeartbeatRegistersAgainAndTakesBackOnlyWhatNobodyTook) {
  const std::string kept = "kept-while-paused", moved = "moved-while-paused";
  for (const auto& container : {kept, moved})
    ASSERT_EQ(stdout_of(alice(a().url(), container,
                              "echo " + container + " > /mnt/user-data/outputs/mine.txt; echo ok")),
              "ok\n");
  for (const auto& container : {kept, moved})
    ASSERT_TRUE(eventually(
        [&] { return metadata->manifest_of("alice", container).count("/mnt/user-data/outputs/mine.txt"); }));
  const auto kept_before = metadata->lease_of("alice", kept),
             moved_before = metadata->lease_of("alice", moved);
  ASSERT_TRUE(kept_before && moved_before);
  ASSERT_EQ(kept_before->holder, "replica-a");
  ASSERT_EQ(moved_before->holder_incarnation, kept_before->holder_incarnation) << "one heartbeat holds both";

  a().signal(SIGSTOP);
  ASSERT_TRUE(eventually([&] { return metadata->lease_of("alice", moved)->expires_at_ms < now_ms(); }))
      << "A's heartbeat did not run out";
  Answer through_b;
  ASSERT_TRUE(eventually([&] {
    through_b = alice(b().url(), moved, "cat /mnt/user-data/outputs/mine.txt");
    return through_b.status == 200;
  })) << through_b.describe();
  EXPECT_EQ(stdout_of(through_b), moved + "\n");
  auto taken = metadata->lease_of("alice", moved);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->holder, "replica-b");
  EXPECT_EQ(taken->epoch, moved_before->epoch + 1);
  // Taking one container from A moved A's incarnation on: the other lease is no longer
  // valid either, though nobody took it.
  auto orphaned = metadata->lease_of("alice", kept);
  ASSERT_TRUE(orphaned);
  EXPECT_EQ(orphaned->holder, "replica-a");
  EXPECT_FALSE(orphaned->live(now_ms()));

  a().signal(SIGCONT);
  EXPECT_TRUE(eventually([&] { return a().log().find("registers again") != std::string::npos; }))
      << "A did not find its incarnation gone";
  // The taken container stays B's: through A, the request is B's to serve.
  Answer moved_through_a = alice(
      a().url(), moved, "echo later >> /mnt/user-data/outputs/mine.txt; cat /mnt/user-data/outputs/mine.txt");
  EXPECT_EQ(stdout_of(moved_through_a), moved + "\nlater\n");
  taken = metadata->lease_of("alice", moved);
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->holder, "replica-b");
  EXPECT_EQ(taken->epoch, moved_before->epoch + 1);
  // The one nobody took comes back to A, at the next epoch and a new incarnation.
  EXPECT_EQ(stdout_of(alice(a().url(), kept, "cat /mnt/user-data/outputs/mine.txt")), kept + "\n");
  auto back = metadata->lease_of("alice", kept);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->holder, "replica-a");
  EXPECT_EQ(back->epoch, kept_before->epoch + 1);
  EXPECT_GT(back->holder_incarnation, kept_before->holder_incarnation);
  EXPECT_TRUE(back->live(now_ms()));
  // B's flush of the change lands at B's epoch.
  EXPECT_TRUE(eventually([&] {
    auto manifest = metadata->manifest_of("alice", moved);
    auto it = manifest.find("/mnt/user-data/outputs/mine.txt");
    return it != manifest.end() && it->second.epoch == moved_before->epoch + 1;
  }));
}

}  // namespace
