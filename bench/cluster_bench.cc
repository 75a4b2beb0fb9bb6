// Cluster benchmark: three `sandboxd serve` replicas (processes of their own, data
// directories of their own) on one real PostgreSQL (tests/postgres_harness.h) and one
// s3rver bucket (tests/s3_server.h), each holding SANDBOXD_BENCH_CLUSTER_HELD (10,000)
// container leases through the test builds' POST /admin/test/leases (no containers or
// sandboxes: `runtime.provider: none`; the build needs -DSANDBOXD_TEST_HOOKS=ON, which
// scripts/bench.sh sets). Prints, each against a reference measured in the same run:
//   1. renewal: the database's transactions and CPU per heartbeat round with 10,000
//      leases a replica, against the same with one lease a replica; and what one round
//      of one UPDATE per held lease (the design before heartbeats) costs, replayed here;
//   2. database stalls of 200 ms and 2 s (every PostgreSQL process of the replicas'
//      sessions stopped with SIGSTOP, placed over a heartbeat of replica-a): leases lost,
//      incarnations moved on, and the slowest answer of a replica during the stall;
//   3. takeover: replica-c killed (SIGKILL); the time until its heartbeat runs out, and
//      until the two survivors' background takeover (paced: cluster.takeoverPerSecond,
//      takeoverBatch) holds its 10,000 containers, the transactions per container taken,
//      and a survivor's own requests during the takeover against the same requests
//      before the kill (and after the takeover);
//   4. a burst: replica-b killed, and requests for 2,000 of its containers reaching
//      replica-a at once (POST /admin/test/leases with as_requests: paced as requests
//      are): the time until it holds them all, and its own requests meanwhile.
//   usage: sandboxd_cluster_bench [SANDBOXD_BINARY]
//   SANDBOXD_BENCH_CLUSTER_HELD: leases a replica (default 10000)
//   SANDBOXD_BENCH_CLUSTER_ROUNDS: heartbeat rounds per renewal measurement (default 6)

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "bench_util.h"
#include "http_client.h"
#include "loopback.h"
#include "postgres_harness.h"
#include "s3_server.h"

namespace fs = std::filesystem;
namespace db = sandboxd::store::db;
using namespace sandboxd::bench;
using sandboxd::testing::HttpClient;

namespace {

const char* kToken = "bench-token-123";
const char* kAdminToken = "bench-admin-0123456789";
constexpr int kLeaseSeconds = 15;  // the default: a heartbeat every 5 s

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class Replica {
 public:
  Replica(const std::string& binary, const fs::path& root, std::string id, const std::string& database_url,
          const sandboxd::testing::S3Server& s3)
      : binary_(binary),
        id_(std::move(id)),
        dir_(root / id_),
        port_(sandboxd::testing::free_loopback_port()) {
    fs::create_directories(dir_ / "data");
    std::ofstream(dir_ / "config.yaml")
        << "server:\n  listen: \"127.0.0.1:" << port_ << "\"\n  dataDir: \"" << (dir_ / "data").string()
        << "\"\n"
        << "auth:\n  tokens:\n    - { token: " << kToken << ", owner: bench }\n  adminToken: " << kAdminToken
        << "\n"
        << "runtime:\n  provider: none\n"
        << "metadata:\n  backend: postgres\n  postgres:\n    url: \"" << database_url << "\"\n"
        << s3.storage_yaml("cluster/", 5) << "cluster:\n  replicaId: " << id_ << "\n  advertiseUrl: \""
        << url() << "\"\n  leaseSeconds: " << kLeaseSeconds << "\n";
  }
  ~Replica() { stop(SIGTERM); }

  void start() {
    const fs::path log = dir_ / "server.log";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::string config = (dir_ / "config.yaml").string();
    char* argv[] = {const_cast<char*>(binary_.c_str()), const_cast<char*>("serve"),
                    const_cast<char*>("--config"), config.data(), nullptr};
    posix_spawn(&pid_, argv[0], &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    for (int i = 0; i < 1000; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) break;
      if (sandboxd::testing::loopback_accepts(port_)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error(id_ + " did not start:\n" + read_all(log));
  }
  void stop(int signo) {
    if (pid_ <= 0) return;
    kill(pid_, signo);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  const std::string& id() const { return id_; }
  int port() const { return port_; }
  // The background takeover's statements so far: one a batch (its log line).
  int takeover_batches() const {
    std::istringstream log(read_all(dir_ / "server.log"));
    int batches = 0;
    for (std::string line; std::getline(log, line);)
      if (line.find("container(s) of replica") != std::string::npos &&
          line.find("lease: took") != std::string::npos)
        ++batches;
    return batches;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // POST /admin/test/leases: claims prefix{first}..prefix{first+count-1}.
  // With `as_requests`, all at once, each as the request for its container would be.
  boost::json::object hold(const std::string& prefix, int first, int count, bool as_requests = false) const {
    HttpClient admin(port_, kAdminToken);
    auto reply = admin.post("/admin/test/leases", boost::json::serialize(boost::json::object{
                                                      {"prefix", prefix},
                                                      {"first", first},
                                                      {"count", count},
                                                      {"as_requests", as_requests},
                                                  }));
    if (reply.status != 200)
      throw std::runtime_error(id_ + ": POST /admin/test/leases: " + std::to_string(reply.status) + " " +
                               reply.body + " (is the build's SANDBOXD_TEST_HOOKS on?)");
    return boost::json::parse(reply.body).as_object();
  }
  // {held, incarnation}
  std::pair<int64_t, int64_t> leases() const {
    HttpClient admin(port_, kAdminToken);
    auto reply = admin.get("/admin/test/leases");
    if (reply.status != 200) return {-1, -1};
    auto object = boost::json::parse(reply.body).as_object();
    return {object.at("held").to_number<int64_t>(), object.at("incarnation").to_number<int64_t>()};
  }

 private:
  std::string binary_, id_;
  fs::path dir_;
  int port_;
  pid_t pid_ = -1;
};

// The database's side: transactions committed, and the CPU time of the server's
// processes (every one pg_stat_activity lists: the sessions and the background ones).
class DatabaseLoad {
 public:
  explicit DatabaseLoad(const std::string& url) : database_(db::open_postgres(url, 1)) {}
  struct Sample {
    int64_t transactions = 0;
    double cpu_ms = 0;
  };
  Sample sample() {
    Sample s;
    auto conn = database_->acquire();
    {
      // (The stats of a session are flushed at the end of its transactions, at most
      // once a second: a sample waits for them.)
      db::Statement flush(conn, "SELECT pg_stat_force_next_flush()");
      try {
        flush.run();
      } catch (const std::exception&) {
        // PostgreSQL before 15: the counters lag by up to half a second.
      }
    }
    db::Statement xacts(
        conn, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()");
    if (xacts.step()) s.transactions = xacts.integer(0);
    for (int pid : pids(conn, /*own=*/true)) s.cpu_ms += cpu_ms_of(pid);
    return s;
  }
  std::vector<int> pids() {
    auto conn = database_->acquire();
    return pids(conn);
  }
  db::Database& database() { return *database_; }

 private:
  // The server's processes, this sampler's own session with `own`.
  static std::vector<int> pids(db::Connection& conn, bool own = false) {
    std::vector<int> out;
    db::Statement query(conn, own ? "SELECT pid FROM pg_stat_activity"
                                  : "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()");
    while (query.step()) out.push_back(static_cast<int>(query.integer(0)));
    return out;
  }
  std::shared_ptr<db::Database> database_;
};

int64_t heartbeat_expiry(db::Database& database, const std::string& replica) {
  auto conn = database.acquire();
  db::Statement query(conn, "SELECT expires_at_ms FROM replicas WHERE replica_id = ?");
  query.add(replica);
  return query.step() ? query.integer(0) : 0;
}

struct RenewalCost {
  double transactions_per_round = 0, cpu_ms_per_round = 0;
};

// The database's load over `rounds` heartbeat rounds with nothing else going on.
RenewalCost renewal_cost(DatabaseLoad& load, int rounds) {
  // An idle session reports what it did at most 10 s later: what came before settles.
  std::this_thread::sleep_for(std::chrono::seconds(11));
  const double seconds = rounds * kLeaseSeconds / 3.0;
  auto before = load.sample();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  auto after = load.sample();
  // Minus the sampling's own transactions (the flush and the count: one each).
  return {static_cast<double>(after.transactions - before.transactions - 2) / rounds,
          (after.cpu_ms - before.cpu_ms) / rounds};
}

// GET /containers (a metadata call) one after another while `busy()`: each 200's latency.
std::vector<double> latencies_while(HttpClient& client, const std::function<bool()>& busy) {
  std::vector<double> ms;
  while (busy()) {
    const auto started = Clock::now();
    auto reply = client.get("/api/gpt/v1/containers");
    if (reply.status == 200) ms.push_back(ms_since(started));
  }
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string binary = argc > 1 ? argv[1] : SANDBOXD_PATH;
  const int held = env_int("SANDBOXD_BENCH_CLUSTER_HELD", 10000);
  const int rounds = env_int("SANDBOXD_BENCH_CLUSTER_ROUNDS", 6);
  char pattern[] = "/var/tmp/sandboxd-clusterbench.XXXXXX";
  if (!mkdtemp(pattern)) return 1;
  const fs::path root = pattern;
  // s3rver's objects and PostgreSQL's folder on this disk too (the server's user must
  // reach its folder under it).
  fs::permissions(root, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  setenv("TMPDIR", root.c_str(), 1);

  sandboxd::testing::PostgresServer postgres;
  const std::string url = postgres.create_database();
  sandboxd::testing::S3Server s3(sandboxd::testing::S3Server::Signatures::kUnverified);
  std::vector<std::unique_ptr<Replica>> replicas;
  for (const char* id : {"replica-a", "replica-b", "replica-c"})
    replicas.push_back(std::make_unique<Replica>(binary, root, id, url, s3));
  for (auto& replica : replicas) replica->start();
  Replica &a = *replicas[0], &b = *replicas[1], &c = *replicas[2];
  DatabaseLoad load(url);
  std::printf(
      "sandboxd cluster benchmark: 3 replicas on one PostgreSQL and one s3rver bucket, leaseSeconds %d "
      "(a heartbeat every %d s), %ld cores\n",
      kLeaseSeconds, kLeaseSeconds / 3, sysconf(_SC_NPROCESSORS_ONLN));

  // --- 1. renewal -------------------------------------------------------------------
  for (auto& replica : replicas) replica->hold(replica->id() + "-one-", 0, 1);
  const RenewalCost one = renewal_cost(load, rounds);
  std::vector<std::thread> holders;
  std::vector<boost::json::object> claimed(replicas.size());
  const auto claim_started = Clock::now();
  for (size_t i = 0; i < replicas.size(); ++i)
    holders.emplace_back([&, i] { claimed[i] = replicas[i]->hold(replicas[i]->id() + "-", 0, held); });
  for (auto& t : holders) t.join();
  const double claim_s = ms_since(claim_started) / 1000;
  std::this_thread::sleep_for(std::chrono::seconds(kLeaseSeconds / 3));  // the claims' stats settle
  const RenewalCost many = renewal_cost(load, rounds);
  // The reference: one round of the design before heartbeats, one UPDATE per held lease
  // of one replica, on one connection (as its renew loop did).
  double per_lease_round_ms = 0;
  const auto replay_before = load.sample();
  {
    auto conn = load.database().acquire();
    db::Statement find(conn, "SELECT holder_incarnation FROM leases WHERE storage = ?");
    find.add(a.id() + "-0");
    const int64_t incarnation = find.step() ? find.integer(0) : 0;
    const auto started = Clock::now();
    for (int i = 0; i < held; ++i) {
      db::Statement renew(
          conn,
          "UPDATE leases SET expires_at_ms = expires_at_ms WHERE storage = ? AND holder = ? AND "
          "holder_incarnation = ? RETURNING epoch");
      renew.add(a.id() + "-" + std::to_string(i)).add(a.id()).add(incarnation).run();
    }
    per_lease_round_ms = ms_since(started);
  }
  const auto replay_after = load.sample();
  // A heartbeat's statement, timed the same way: the cost of a round now.
  double heartbeat_ms = 0;
  {
    const int64_t incarnation = a.leases().second;
    auto conn = load.database().acquire();
    constexpr int kTimes = 200;
    const auto started = Clock::now();
    for (int i = 0; i < kTimes; ++i) {
      db::Statement beat(
          conn, "UPDATE replicas SET expires_at_ms = expires_at_ms WHERE replica_id = ? AND incarnation = ?");
      beat.add(a.id()).add(incarnation).run();
    }
    heartbeat_ms = ms_since(started) / kTimes;
  }
  const double replay_cpu_ms = replay_after.cpu_ms - replay_before.cpu_ms;
  std::printf(
      "\n1. renewal, %d heartbeat rounds measured each (%d leases held in all: %.1f s to claim them, 3 "
      "replicas "
      "at once)\n",
      rounds, 3 * held, claim_s);
  std::printf("  %-48s %14s %14s\n", "", "transactions", "DB CPU ms");
  std::printf("  %-48s %14.1f %14.1f\n", "per round, 1 lease a replica", one.transactions_per_round,
              one.cpu_ms_per_round);
  std::printf("  %-48s %14.1f %14.1f\n", ("per round, " + std::to_string(held) + " leases a replica").c_str(),
              many.transactions_per_round, many.cpu_ms_per_round);
  std::printf("  %-48s %13.2fx %13.2fx   (goal: 1x, O(1) a replica)\n", "  ratio",
              many.transactions_per_round / std::max(1.0, one.transactions_per_round),
              many.cpu_ms_per_round / std::max(0.1, one.cpu_ms_per_round));
  std::printf(
      "  one replica's round with %d leases: now one heartbeat UPDATE, %.2f ms; before, one UPDATE per lease "
      "(replayed here on one connection) %.0f ms, %lld transactions, DB CPU %.0f ms: %.0fx\n",
      held, heartbeat_ms, per_lease_round_ms,
      static_cast<long long>(replay_after.transactions - replay_before.transactions), replay_cpu_ms,
      per_lease_round_ms / std::max(0.001, heartbeat_ms));
  std::fflush(stdout);

  // --- 2. database stalls ------------------------------------------------------------
  std::printf(
      "\n2. database stalls (every PostgreSQL process of the replicas' sessions stopped), placed over a "
      "heartbeat of replica-a\n");
  for (int stall_ms : {200, 2000}) {
    std::vector<std::pair<int64_t, int64_t>> before;
    for (auto& replica : replicas) before.push_back(replica->leases());
    // A heartbeat of replica-a has just happened when its expiry moves; the next comes
    // one interval later: the stall is centred on it.
    const int64_t expiry = heartbeat_expiry(load.database(), a.id());
    while (heartbeat_expiry(load.database(), a.id()) == expiry)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseSeconds * 1000 / 3 - stall_ms / 2));
    std::atomic<bool> stalled{true};
    HttpClient own(b.port(), kToken);
    double slowest = 0;
    std::thread requests([&] {
      auto ms = latencies_while(own, [&] { return stalled.load(); });
      for (double v : ms) slowest = std::max(slowest, v);
    });
    const auto pids = load.pids();
    for (int pid : pids) kill(pid, SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));
    for (int pid : pids) kill(pid, SIGCONT);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stalled = false;
    requests.join();
    // Two more rounds: a lapse would show as a moved incarnation and lost leases.
    std::this_thread::sleep_for(std::chrono::seconds(2 * kLeaseSeconds / 3));
    int64_t lost = 0, moved = 0;
    for (size_t i = 0; i < replicas.size(); ++i) {
      auto after = replicas[i]->leases();
      lost += std::max<int64_t>(0, before[i].first - after.first);
      if (after.second != before[i].second) ++moved;
    }
    std::printf(
        "  %5d ms: %lld leases lost, %lld incarnations moved on (goal: 0 and 0); the slowest answer of "
        "replica-b meanwhile %.0f ms\n",
        stall_ms, static_cast<long long>(lost), static_cast<long long>(moved), slowest);
    std::fflush(stdout);
  }

  // --- 3. takeover -------------------------------------------------------------------
  // replica-a's own requests, one after another, each with when it ended: before the
  // kill, during the takeover and after it (the machine is shared: "after" shows how
  // much of a difference is the machine's).
  HttpClient own(a.port(), kToken);
  struct Timed {
    Clock::time_point at;
    double ms;
  };
  std::vector<Timed> own_requests;  // under own_mutex
  std::mutex own_mutex;
  auto own_so_far = [&] {
    std::lock_guard lock(own_mutex);
    return own_requests;
  };
  std::atomic<bool> requesting{true};
  std::thread requester([&] {
    while (requesting) {
      const auto started = Clock::now();
      auto reply = own.get("/api/gpt/v1/containers");
      if (reply.status == 200) {
        std::lock_guard lock(own_mutex);
        own_requests.push_back({Clock::now(), ms_since(started)});
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const auto a_held = a.leases().first, b_held = b.leases().first;
  const auto load_before = load.sample();
  c.stop(SIGKILL);
  const auto killed = Clock::now();
  while (heartbeat_expiry(load.database(), c.id()) > unix_ms())
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const double expired_s = ms_since(killed) / 1000;
  // Nobody asks for replica-c's containers: the survivors' background takeover moves
  // them, paced (cluster.takeoverPerSecond, takeoverBatch: the defaults). Polled from
  // another connection every 100 ms.
  Clock::time_point first_taken{}, all_taken{};
  int64_t by_a = 0, by_b = 0;
  const auto give_up = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < give_up) {
    by_a = a.leases().first - a_held;
    by_b = b.leases().first - b_held;
    if (by_a + by_b > 0 && first_taken == Clock::time_point{}) first_taken = Clock::now();
    if (by_a + by_b >= held + 1) {  // (and its one lease of part 1)
      all_taken = Clock::now();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const auto phase3_end = Clock::now();
  // The survivors' sessions report their transactions up to 10 s after (idle sessions).
  std::this_thread::sleep_for(std::chrono::seconds(11));
  const auto load_after = load.sample();
  std::vector<double> before_ms, during_ms, after_ms;
  const auto window_start = first_taken - std::chrono::milliseconds(100);  // (the poll's granularity)
  const auto phase3_requests = own_so_far();
  for (const auto& r : phase3_requests) {
    if (r.at < killed)
      before_ms.push_back(r.ms);
    else if (all_taken != Clock::time_point{} && r.at >= window_start && r.at <= all_taken)
      during_ms.push_back(r.ms);
    else if (all_taken != Clock::time_point{} && r.at > all_taken && r.at <= phase3_end)
      after_ms.push_back(r.ms);
  }
  const double take_s =
      all_taken == Clock::time_point{} ? -1 : std::chrono::duration<double>(all_taken - window_start).count();
  const double total_s =
      all_taken == Clock::time_point{} ? -1 : std::chrono::duration<double>(all_taken - killed).count();
  const auto s_before = summarize(before_ms), s_during = summarize(during_ms), s_after = summarize(after_ms);
  std::printf(
      "\n3. takeover: replica-c killed (SIGKILL) holding %d leases, nobody asking for them: the survivors' "
      "background takeover, paced\n",
      held);
  std::printf("  until its heartbeat ran out      %6.2f s   (<= leaseSeconds %d)\n", expired_s,
              kLeaseSeconds);
  std::printf(
      "  until the survivors held them    %6.2f s   (%lld of %d taken: %lld by replica-a, %lld by replica-b; "
      "the takeover itself %.2f s, once its row had stayed run out for 2 x leaseSeconds)\n",
      total_s, static_cast<long long>(by_a + by_b), held + 1, static_cast<long long>(by_a),
      static_cast<long long>(by_b), take_s);
  const int batches = a.takeover_batches() + b.takeover_batches();
  std::printf(
      "  statements per container taken   %6.3f     (%d batches; DB CPU %.0f ms in all, replica-a's own "
      "requests "
      "included)\n",
      static_cast<double>(batches) / static_cast<double>(std::max<int64_t>(1, by_a + by_b)), batches,
      load_after.cpu_ms - load_before.cpu_ms);
  std::printf(
      "  replica-a's own requests (GET /containers): during the takeover p50 %.2f ms, p99 %.2f ms (n=%zu); "
      "before the kill p50 %.2f ms, p99 %.2f ms (n=%zu): %.2fx, %.2fx; after p50 %.2f ms, p99 %.2f ms "
      "(n=%zu): %.2fx, %.2fx\n",
      s_during.p50_ms, s_during.p99_ms, s_during.n, s_before.p50_ms, s_before.p99_ms, s_before.n,
      s_during.p50_ms / std::max(0.001, s_before.p50_ms), s_during.p99_ms / std::max(0.001, s_before.p99_ms),
      s_after.p50_ms, s_after.p99_ms, s_after.n, s_during.p50_ms / std::max(0.001, s_after.p50_ms),
      s_during.p99_ms / std::max(0.001, s_after.p99_ms));
  std::fflush(stdout);

  // --- 4. a burst of requests for a dead replica's containers -------------------------
  // replica-b killed; right after its heartbeat ran out (before the background takeover
  // begins), requests for 2,000 of its containers reach replica-a at once (POST
  // /admin/test/leases with as_requests: each read, paced, claimed as the request's
  // would be). Those refused (their turn more than 2 s away: 503 with Retry-After) come
  // back a second later, as a client would.
  const int burst = std::min(held, 2000);
  // The reference: the same burst for 2,000 containers replica-a holds already (each
  // request's lease read, no takeover): what the burst of requests costs by itself.
  const auto reference_started = Clock::now();
  a.hold(a.id() + "-", 0, burst, /*as_requests=*/true);
  const auto reference_ended = Clock::now();
  b.stop(SIGKILL);
  while (heartbeat_expiry(load.database(), b.id()) > unix_ms())
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto burst_started = Clock::now();
  int64_t burst_held = 0, burst_refused = 0;
  int attempts = 0;
  for (; attempts < 30 && burst_held < burst; ++attempts) {
    if (attempts > 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    auto tally = a.hold(b.id() + "-", 0, burst, /*as_requests=*/true);  // (those held already: held)
    burst_held = tally.at("held").to_number<int64_t>();
    if (attempts == 0) burst_refused = tally.at("refused").to_number<int64_t>();
  }
  const auto burst_ended = Clock::now();
  requesting = false;
  requester.join();
  std::vector<double> burst_ms, reference_ms;
  for (const auto& r : own_so_far()) {
    if (r.at >= burst_started && r.at <= burst_ended) burst_ms.push_back(r.ms);
    if (r.at >= reference_started && r.at <= reference_ended) reference_ms.push_back(r.ms);
  }
  const auto s_burst = summarize(burst_ms), s_reference = summarize(reference_ms);
  std::printf(
      "\n4. a burst: replica-b killed; requests for %d of its containers reach replica-a at once, right "
      "after its heartbeat ran out\n",
      burst);
  std::printf(
      "  all %lld held after %.2f s (%d round(s) of the burst; the first refused %lld as 503 past the 2 s "
      "wait: their clients come back)\n",
      static_cast<long long>(burst_held), std::chrono::duration<double>(burst_ended - burst_started).count(),
      attempts, static_cast<long long>(burst_refused));
  std::printf(
      "  replica-a's own requests meanwhile: p50 %.2f ms, p99 %.2f ms (n=%zu) against p50 %.2f ms, p99 %.2f "
      "ms before replica-c's kill: %.2fx, %.2fx\n",
      s_burst.p50_ms, s_burst.p99_ms, s_burst.n, s_before.p50_ms, s_before.p99_ms,
      s_burst.p50_ms / std::max(0.001, s_before.p50_ms), s_burst.p99_ms / std::max(0.001, s_before.p99_ms));
  std::printf(
      "  the same burst for 2,000 containers it holds (no takeover: the burst's own cost) %.2f s: p50 %.2f "
      "ms, "
      "p99 %.2f ms (n=%zu); the takeover burst against it: %.2fx, %.2fx\n",
      std::chrono::duration<double>(reference_ended - reference_started).count(), s_reference.p50_ms,
      s_reference.p99_ms, s_reference.n, s_burst.p50_ms / std::max(0.001, s_reference.p50_ms),
      s_burst.p99_ms / std::max(0.001, s_reference.p99_ms));
  replicas.clear();
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}
