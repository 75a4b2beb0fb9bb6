// Metadata benchmark: requests/s of the store-bound file calls with 8 connections at
// once, `metadata.backend: sqlite` against `postgres`, each on a real `sandboxd serve`
// on loopback (no code-execution provider: only the Files API is measured) and, for
// PostgreSQL, a real server started here (tests/postgres_harness.h, Debian's package).
// Rounds alternate between the two servers; printed: the median round's rate of each, the
// median of the rounds' ratios (each round's two measurements are seconds apart, so a
// change in what else the machine runs touches both alike), and the CPU time per call
// of the server plus, for PostgreSQL, every process of the database server (the figure
// the machine's other load changes least).
//   usage: sandboxd_metadata_bench [SANDBOXD_BINARY]
//   SANDBOXD_BENCH_METADATA_SECONDS: seconds per measurement (default 3)
//   SANDBOXD_BENCH_METADATA_ROUNDS: rounds per call (default 5)

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <thread>

#include "bench_util.h"
#include "http_client.h"
#include "postgres_harness.h"

namespace fs = std::filesystem;
using namespace sandboxd::bench;

namespace {

const char* kToken = "bench-token-123";
constexpr int kConnections = 8;
constexpr int kFiles = 200;

// Every process of the database server (pg_stat_activity lists the sessions and the
// background ones).
double postgres_cpu_ms(sandboxd::store::db::Database& database) {
  auto conn = database.acquire();
  sandboxd::store::db::Statement query(conn, "SELECT pid FROM pg_stat_activity");
  double ms = 0;
  while (query.step()) ms += cpu_ms_of(static_cast<int>(query.integer(0)));
  return ms;
}

class Server {
 public:
  Server(const std::string& binary, const std::string& metadata_yaml) {
    char pattern[] = "/var/tmp/sandboxd-metabench.XXXXXX";
    if (!mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    const fs::path log = dir_ / "server.log";
    std::ofstream(dir_ / "config.yaml")
        << "server:\n  listen: \"127.0.0.1:0\"\n  dataDir: \"" << (dir_ / "data").string()
        << "\"\nauth:\n  tokens:\n    - { token: " << kToken
        << ", owner: bench }\nruntime:\n  provider: none\n"
        << metadata_yaml;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::string config = (dir_ / "config.yaml").string();
    char* argv[] = {const_cast<char*>(binary.c_str()), const_cast<char*>("serve"),
                    const_cast<char*>("--config"), config.data(), nullptr};
    posix_spawn(&pid_, argv[0], &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 1000 && !port_; ++i) {
      std::smatch m;
      std::string text = read_all(log);
      if (std::regex_search(text, m, listening))
        port_ = std::stoi(m[1]);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!port_) throw std::runtime_error("sandboxd did not start:\n" + read_all(log));
  }
  ~Server() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  int port() const { return port_; }
  double cpu_ms() const { return cpu_ms_of(pid_); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  fs::path dir_;
};

// `kFiles` small uploads in container "bench"; returns one file's id.
std::string fill(const Server& server) {
  sandboxd::testing::HttpClient client(server.port(), kToken);
  std::string id;
  for (int i = 0; i < kFiles; ++i) {
    auto reply = client.put("/api/gpt/v1/files/data/f" + std::to_string(i) + ".txt?scope_id=bench",
                            std::string(1024, 'a' + i % 26));
    if (reply.status != 200) throw std::runtime_error("upload failed: " + reply.body);
    id = std::string(boost::json::parse(reply.body).at("id").as_string());
  }
  return id;
}

// Requests/s over `seconds` with kConnections clients, each sending `request(client, n)`
// one after another; only 200 replies count. `calls` gets the number of 200s.
double rate(
    const Server& server, double seconds,
    const std::function<sandboxd::testing::HttpClient::Reply(sandboxd::testing::HttpClient&, int)>& request,
    long* calls = nullptr) {
  std::atomic<bool> stop{false};
  std::atomic<long> ok{0}, failed{0};
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int c = 0; c < kConnections; ++c)
    threads.emplace_back([&, c] {
      sandboxd::testing::HttpClient client(server.port(), kToken);
      for (int n = c * 1000000; !stop; ++n) {
        if (request(client, n).status == 200)
          ++ok;
        else
          ++failed;
      }
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double elapsed = ms_since(start) / 1000.0;
  if (failed) std::fprintf(stderr, "  (%ld requests failed)\n", failed.load());
  if (calls) *calls = ok;
  return static_cast<double>(ok) / elapsed;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string binary = argc > 1 ? argv[1] : SANDBOXD_PATH;
  const double seconds = env_int("SANDBOXD_BENCH_METADATA_SECONDS", 3);
  sandboxd::testing::PostgresServer postgres;
  const std::string url = postgres.create_database();
  Server sqlite(binary, "");
  Server pg(binary, "metadata:\n  backend: postgres\n  postgres:\n    url: \"" + url + "\"\n");
  const std::string sqlite_file = fill(sqlite), pg_file = fill(pg);

  struct Case {
    const char* name;
    std::function<sandboxd::testing::HttpClient::Reply(sandboxd::testing::HttpClient&, int,
                                                       const std::string&)>
        run;
  };
  const std::vector<Case> cases = {
      {"list a container's files (limit 20)",
       [](auto& client, int, const std::string&) { return client.get("/api/gpt/v1/files?scope_id=bench"); }},
      {"one file's metadata",
       [](auto& client, int, const std::string& id) {
         return client.get("/api/gpt/v1/files/" + id + "?scope_id=bench");
       }},
      {"list containers",
       [](auto& client, int, const std::string&) { return client.get("/api/gpt/v1/containers"); }},
      {"upload 1 KiB (PUT, 100 keys overwritten)",
       [](auto& client, int n, const std::string&) {
         return client.put("/api/gpt/v1/files/put/k" + std::to_string(n % 100) + "?scope_id=bench",
                           std::string(1024, 'x'));
       }},
  };
  const int rounds = std::max(1, env_int("SANDBOXD_BENCH_METADATA_ROUNDS", 5));
  auto sampler = sandboxd::store::db::open_postgres(url, 1);
  std::printf(
      "metadata-bound requests/s, %d connections, %.0f s per measurement, %d rounds (median); CPU per call: "
      "the server's, plus the database server's for PostgreSQL\n",
      kConnections, seconds, rounds);
  std::printf("  %-44s %9s %9s %9s %10s %12s %12s %9s\n", "", "sqlite", "postgres", "pg/sqlite", "(rounds)",
              "sqlite us", "postgres us", "cpu ratio");
  for (const auto& c : cases) {
    std::vector<double> on_sqlite, on_pg, ratios;
    double sqlite_cpu = 0, pg_cpu = 0;
    long sqlite_calls = 0, pg_calls = 0;
    for (int round = 0; round < rounds; ++round) {
      long calls = 0;
      double cpu = sqlite.cpu_ms();
      on_sqlite.push_back(rate(
          sqlite, seconds, [&](auto& client, int n) { return c.run(client, n, sqlite_file); }, &calls));
      sqlite_cpu += sqlite.cpu_ms() - cpu;
      sqlite_calls += calls;
      cpu = pg.cpu_ms() + postgres_cpu_ms(*sampler);
      on_pg.push_back(rate(
          pg, seconds, [&](auto& client, int n) { return c.run(client, n, pg_file); }, &calls));
      pg_cpu += pg.cpu_ms() + postgres_cpu_ms(*sampler) - cpu;
      pg_calls += calls;
      ratios.push_back(on_pg.back() / std::max(1.0, on_sqlite.back()));
    }
    const double s = median(on_sqlite), p = median(on_pg);
    std::string each;
    for (double r : ratios)
      each += (each.empty() ? "" : " ") + std::to_string(static_cast<int>(100 * r + 0.5));
    const double sqlite_us = 1000 * sqlite_cpu / std::max(1L, sqlite_calls);
    const double pg_us = 1000 * pg_cpu / std::max(1L, pg_calls);
    std::printf("  %-44s %9.0f %9.0f %8.0f%% %10s %12.0f %12.0f %8.0f%%\n", c.name, s, p,
                100.0 * median(ratios), ("(" + each + ")").c_str(), sqlite_us, pg_us,
                100.0 * sqlite_us / std::max(0.001, pg_us));
    std::fflush(stdout);
  }
  return 0;
}
