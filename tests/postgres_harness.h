// A real PostgreSQL for the tests (Debian's postgresql package, installed by
// scripts/setup.sh): one server per test process, started on first use with initdb into
// a fresh temporary folder, listening on 127.0.0.1 at a free port with its unix socket
// in that folder, run as the unprivileged `postgres` user (the server refuses root), and
// stopped when the process's tests end. Each test takes a database of its own.
#pragma once

#include <glob.h>
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "loopback.h"
#include "store/database.h"

namespace sandboxd::testing {

inline std::string pg_sh(const std::string& command, int* status = nullptr) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed");
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  int rc = pclose(pipe);
  if (status) *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

// The newest installed server's bin folder (/usr/lib/postgresql/<version>/bin), found
// without naming a version; empty when none is installed.
inline std::filesystem::path postgres_bin_dir() {
  glob_t found{};
  std::vector<std::filesystem::path> dirs;
  if (glob("/usr/lib/postgresql/*/bin/initdb", 0, nullptr, &found) == 0)
    for (size_t i = 0; i < found.gl_pathc; ++i)
      dirs.emplace_back(std::filesystem::path(found.gl_pathv[i]).parent_path());
  globfree(&found);
  if (dirs.empty()) return {};
  auto version = [](const std::filesystem::path& bin) {
    return std::atof(bin.parent_path().filename().c_str());  // "15", "9.6"
  };
  return *std::max_element(dirs.begin(), dirs.end(),
                           [&](const auto& a, const auto& b) { return version(a) < version(b); });
}

class PostgresServer {
 public:
  PostgresServer() {
    bin_ = postgres_bin_dir();
    if (bin_.empty()) throw std::runtime_error("PostgreSQL is not installed (scripts/setup.sh installs it)");
    std::string pattern = (std::filesystem::temp_directory_path() / "sandboxd-pgtest-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    dir_ = pattern;
    // The server's user must reach the folder; its data folder is its own.
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all |
                                           std::filesystem::perms::group_exec |
                                           std::filesystem::perms::others_exec);
    const std::string data = (dir_ / "data").string();
    run("cp -a " + template_cluster().string() + " " + data);
    port_ = free_loopback_port();
    // fsync off: a test server's data need not survive a power cut, and it is faster.
    run(as_postgres("pg_ctl") + " -D " + data + " -l " + data + "/server.log -w -o \"-p " +
        std::to_string(port_) + " -c listen_addresses=127.0.0.1 -k " + data +
        " -c fsync=off -c max_connections=200\" start");
    running_ = true;
  }

  ~PostgresServer() {
    if (running_)
      pg_sh(as_postgres("pg_ctl") + " -D " + (dir_ / "data").string() +
            " -m immediate -w stop >/dev/null 2>&1");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  uint16_t port() const { return port_; }
  const std::filesystem::path& bin() const { return bin_; }

  std::string url(const std::string& database) const {
    return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/" + database;
  }

  // A new, empty database; returns its URL.
  std::string create_database() {
    static std::atomic<int> counter{0};
    std::string name = "t" + std::to_string(getpid()) + "_" + std::to_string(++counter);
    auto admin = store::db::open_postgres(url("postgres"), 1);
    auto conn = admin->acquire();
    conn.exec("CREATE DATABASE " + name);
    return url(name);
  }

  // Stops (fast) or starts the server on the same folder and port.
  void stop() {
    run(as_postgres("pg_ctl") + " -D " + (dir_ / "data").string() + " -m fast -w stop");
    running_ = false;
  }
  void start() {
    const std::string data = (dir_ / "data").string();
    run(as_postgres("pg_ctl") + " -D " + data + " -l " + data + "/server.log -w -o \"-p " +
        std::to_string(port_) + " -c listen_addresses=127.0.0.1 -k " + data +
        " -c fsync=off -c max_connections=200\" start");
    running_ = true;
  }

 private:
  // initdb takes most of a start, and every test process (ctest runs one per test)
  // starts a server: one initdb'd cluster is kept in the temporary folder, per server
  // version, and copied. Made under another name and renamed, so a cut initdb leaves
  // no half template.
  std::filesystem::path template_cluster() {
    const std::string version = bin_.parent_path().filename().string();
    std::filesystem::path cached =
        std::filesystem::temp_directory_path() / ("sandboxd-pgtest-template-" + version);
    if (std::filesystem::exists(cached / "PG_VERSION")) return cached;
    std::filesystem::path staging = dir_ / "template";
    run("install -d -o postgres -g postgres -m 700 " + staging.string());
    run(as_postgres("initdb") + " -D " + staging.string() +
        " -A trust -U postgres -E UTF8 --locale=C --no-sync");
    std::error_code ec;
    std::filesystem::remove_all(cached, ec);       // a broken one (no PG_VERSION)
    std::filesystem::rename(staging, cached, ec);  // another process may have made it first
    if (ec) std::filesystem::remove_all(staging, ec);
    return cached;
  }
  std::string as_postgres(const std::string& program) const {
    return "runuser -u postgres -- " + (bin_ / program).string();
  }
  void run(const std::string& command) {
    int status = 0;
    std::string out = pg_sh("cd / && " + command + " 2>&1", &status);
    if (status != 0) throw std::runtime_error("`" + command + "` failed:\n" + out);
  }

  std::filesystem::path bin_, dir_;
  uint16_t port_ = 0;
  bool running_ = false;
};

// The process's server: started by the first test that needs one, stopped after the
// last test (a gtest Environment), so tests that need none pay nothing.
class PostgresEnvironment : public ::testing::Environment {
 public:
  static PostgresServer& server() {
    if (!server_) server_ = std::make_unique<PostgresServer>();
    return *server_;
  }
  void TearDown() override { server_.reset(); }

 private:
  static inline std::unique_ptr<PostgresServer> server_;
};

inline ::testing::Environment* const kPostgresEnvironment =
    ::testing::AddGlobalTestEnvironment(new PostgresEnvironment);

// A fresh database of either backend, and more handles on it (a reopen, a second
// process's view): a SQLite file in a temporary folder, or a new PostgreSQL database.
class TestDatabase {
 public:
  explicit TestDatabase(store::db::Backend backend) : backend_(backend) {
    if (backend == store::db::Backend::kPostgres) {
      url_ = PostgresEnvironment::server().create_database();
    } else {
      std::string pattern = (std::filesystem::temp_directory_path() / "sandboxd-dbtest-XXXXXX").string();
      if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
      dir_ = pattern;
      path_ = (dir_ / "meta.db").string();
    }
  }
  ~TestDatabase() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  TestDatabase(const TestDatabase&) = delete;
  TestDatabase& operator=(const TestDatabase&) = delete;

  store::db::Backend backend() const { return backend_; }
  const std::string& sqlite_path() const { return path_; }
  const std::string& postgres_url() const { return url_; }

  std::shared_ptr<store::db::Database> open() const {
    return backend_ == store::db::Backend::kPostgres ? store::db::open_postgres(url_)
                                                     : store::db::open_sqlite(path_);
  }

 private:
  store::db::Backend backend_;
  std::filesystem::path dir_;
  std::string path_, url_;
};

inline std::string backend_name(const ::testing::TestParamInfo<store::db::Backend>& info) {
  return info.param == store::db::Backend::kPostgres ? "Postgres" : "Sqlite";
}

}  // namespace sandboxd::testing
