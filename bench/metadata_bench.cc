// Metadata benchmark: requests/s of the store-bound file calls with 8 connections at
// once, `metadata.backend: sqlite` against `postgres`, each on a real `sandboxd serve`
// on loopback (no code-execution provider: only the Files API is measured) and, for
// PostgreSQL, a real server started here (tests/postgres_harness.h, Debian's package).
// Rounds alternate between the two servers; the median round is printed.
//   usage: sandboxd_metadata_bench [SANDBOXD_BINARY]
//   SANDBOXD_BENCH_METADATA_SECONDS: seconds per measurement (default 3)

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <atomic>
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

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Server {
 public:
  Server(const std::string& binary, const std::string& metadata_yaml) {
    char pattern[] = "/var/tmp/sandboxd-metabench.XXXXXX";
    if (!mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    const fs::path log = dir_ / "server.log";
    std::ofstream(dir_ / "config.yaml") << "server:\n  listen: \"127.0.0.1:0\"\n  dataDir: \""
                                        << (dir_ / "data").string() << "\"\nauth:\n  tokens:\n    - { token: "
                                        << kToken << ", owner: bench }\nruntime:\n  provider: none\n"
                                        << metadata_yaml;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::string config = (dir_ / "config.yaml").string();
    char* argv[] = {const_cast<char*>(binary.c_str()), const_cast<char*>("serve"), const_cast<char*>("--config"),
                    config.data(), nullptr};
    posix_spawn(&pid_, argv[0], &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 1000 && !port_; ++i) {
      std::smatch m;
      std::string text = read_all(log);
      if (std::regex_search(text, m, listening)) port_ = std::stoi(m[1]);
      else std::this_thread::sleep_for(std::chrono::milliseconds(20));
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
// one after another; only 200 replies count.
double rate(const Server& server, double seconds,
            const std::function<sandboxd::testing::HttpClient::Reply(sandboxd::testing::HttpClient&, int)>& request) {
  std::atomic<bool> stop{false};
  std::atomic<long> ok{0}, failed{0};
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int c = 0; c < kConnections; ++c)
    threads.emplace_back([&, c] {
      sandboxd::testing::HttpClient client(server.port(), kToken);
      for (int n = c * 1000000; !stop; ++n) {
        if (request(client, n).status == 200) ++ok;
        else ++failed;
      }
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double elapsed = ms_since(start) / 1000.0;
  if (failed) std::fprintf(stderr, "  (%ld requests failed)\n", failed.load());
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
    std::function<sandboxd::testing::HttpClient::Reply(sandboxd::testing::HttpClient&, int, const std::string&)> run;
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
  std::printf("metadata-bound requests/s, %d connections, %.0f s per measurement, median of 3 rounds\n",
              kConnections, seconds);
  std::printf("  %-44s %10s %10s %8s\n", "", "sqlite", "postgres", "pg/sqlite");
  for (const auto& c : cases) {
    std::vector<double> on_sqlite, on_pg;
    for (int round = 0; round < 3; ++round) {
      on_sqlite.push_back(rate(sqlite, seconds, [&](auto& client, int n) { return c.run(client, n, sqlite_file); }));
      on_pg.push_back(rate(pg, seconds, [&](auto& client, int n) { return c.run(client, n, pg_file); }));
    }
    const double s = median(on_sqlite), p = median(on_pg);
    std::printf("  %-44s %10.0f %10.0f %7.0f%%\n", c.name, s, p, 100.0 * p / s);
    std::fflush(stdout);
  }
  return 0;
}
