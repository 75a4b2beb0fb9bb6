// Replicas for the cluster tests with every real part (tests/cluster_durability_test.cc):
// `sandboxd serve` processes with their own data directories and ports, the metadata
// they share (SharedMetadata: the one place that says how), and nginx in front of them,
// run by the test in the foreground with a configuration of its own. The same shapes as
// tests/cluster_test.cc's, with room for more configuration (storage.backend s3).
#pragma once

#include <functional>
#include <iostream>
#include <optional>

#include "host_leftovers.h"
#include "loopback.h"
#include "postgres_harness.h"
#include "server_harness.h"
#include "store/lease_store.h"
#include "store/manifest_store.h"
#include "store/metadata.h"

namespace sandboxd::testing {

// Spawns `args` with stdout and stderr appended to `log`; returns the pid.
inline pid_t spawn_logged(std::vector<std::string> args, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0)
    throw std::runtime_error("spawn failed");
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

inline bool wait_for_port(uint16_t port, pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return false;
    if (loopback_accepts(port)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// The metadata every replica shares, and the test's own look at it. PostgreSQL: a
// database of its own on the test process's real PostgreSQL server (postgres_harness.h),
// which every replica reaches through metadata.backend postgres, as on a cluster.
// SQLite: one file in WAL mode, each replica's <dataDir>/sandboxd.db a symbolic link to
// it (replicas on one host).
class SharedMetadata {
 public:
  explicit SharedMetadata(store::db::Backend backend) : db_(backend) {}

  // Readies a replica's data directory; returns the configuration it needs (YAML).
  std::string attach(const fs::path& data_dir) const {
    if (db_.backend() == store::db::Backend::kSqlite) {
      fs::create_symlink(db_.sqlite_path(), data_dir / "sandboxd.db");
      return "";
    }
    return "metadata:\n  backend: postgres\n  postgres:\n    url: \"" + db_.postgres_url() + "\"\n" +
           postgres_yaml_;
  }
  // More keys of metadata.postgres for the replicas attached from now on (YAML lines,
  // indented for that section).
  void set_postgres_yaml(std::string yaml) { postgres_yaml_ = std::move(yaml); }
  const TestDatabase& database() const { return db_; }
  std::string storage_of(const std::string& owner, const std::string& container) const {
    store::Metadata metadata(db_.open());
    auto record = metadata.find_container(owner, container);
    return record ? record->storage : std::string();
  }
  std::optional<store::Lease> lease_of(const std::string& owner, const std::string& container) const {
    const std::string storage = storage_of(owner, container);
    if (storage.empty()) return std::nullopt;
    return lease_of_storage(storage);
  }
  std::optional<store::Lease> lease_of_storage(const std::string& storage) const {
    store::LeaseStore leases(db_.open());
    return leases.find(storage);
  }
  std::vector<store::ManifestRow> manifest_of_storage(const std::string& storage) const {
    store::ManifestStore manifest(db_.open());
    return manifest.rows(storage);
  }
  size_t file_rows_of_storage(const std::string& storage) const {
    store::Metadata metadata(db_.open());
    return metadata.files_of(storage).size();
  }
  // The container's manifest rows: sandbox path -> row.
  std::map<std::string, store::ManifestRow> manifest_of(const std::string& owner,
                                                        const std::string& container) const {
    std::map<std::string, store::ManifestRow> out;
    const std::string storage = storage_of(owner, container);
    if (storage.empty()) return out;
    store::ManifestStore manifest(db_.open());
    for (auto& row : manifest.rows(storage)) out.emplace(row.path, row);
    return out;
  }

 private:
  TestDatabase db_;
  std::string postgres_yaml_;
};

// One replica: a sandboxd process on its own port and data directory. `extra_yaml` is
// appended to its configuration (top-level sections); `runtime_yaml`, lines of its
// `runtime:` section (indented two spaces), which the harness writes itself.
class Replica {
 public:
  static constexpr const char* kToken = "secret-alice";
  static constexpr const char* kBobToken = "secret-bob";  // another owner
  static constexpr const char* kAdminToken = "admin-secret-0123456789";

  Replica(std::string id, const fs::path& root, const SharedMetadata& metadata, const std::string& model_url,
          int lease_seconds, const std::string& extra_yaml, const std::string& runtime_yaml = "")
      : id_(std::move(id)), dir_(root / id_), port_(free_loopback_port()) {
    fs::create_directories(dir_ / "data");
    const std::string metadata_yaml = metadata.attach(dir_ / "data");
    std::ofstream(dir_ / "config.yaml")
        << "server:\n  listen: \"127.0.0.1:" << port_ << "\"\n  dataDir: \"" << (dir_ / "data").string()
        << "\"\n"
        << "auth:\n  tokens:\n    - { token: " << kToken << ", owner: alice }\n    - { token: " << kBobToken
        << ", owner: bob }\n  adminToken: " << kAdminToken << "\n"
        << "runtime:\n  prestartedSandboxes: 0\n"
        << runtime_yaml << "model:\n  baseUrl: \"" << model_url
        << "\"\n  apiKey: k\n  models: { default: upstream-model }\n"
        << "  timeoutSec: 10\n  pingIntervalSec: 1\n"
        << "cluster:\n  replicaId: " << id_ << "\n  advertiseUrl: \"" << url()
        << "\"\n  leaseSeconds: " << lease_seconds << "\n  shutdownGraceSec: 10\n"
        << metadata_yaml << extra_yaml;
  }
  // A replica that was killed (SIGKILL: no shutdown of its own) and not started again
  // leaves its volumes mounted and its sandboxes' cgroups: removed here, as its next
  // start would have (host_leftovers.h).
  ~Replica() {
    stop(SIGTERM);
    if (killed_) {
      const std::string failed = host::clean(dir_ / "data");
      if (!failed.empty())
        std::fprintf(stderr, "cleaning what replica %s left: %s", id_.c_str(), failed.c_str());
    }
  }

  void start() {
    pid_ = spawn_logged({SANDBOXD_PATH, "serve", "--config", (dir_ / "config.yaml").string()},
                        dir_ / "server.log");
    killed_ = false;  // its start cleans what a killed predecessor left
    if (!wait_for_port(port_, pid_)) throw std::runtime_error(id_ + " did not start: " + log());
  }
  // The exit status, or -signal.
  int stop(int signo) {
    if (pid_ <= 0) return 0;
    kill(pid_, SIGCONT);  // a paused one too
    kill(pid_, signo);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    if (!WIFEXITED(status)) killed_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  void signal(int signo) { kill(pid_, signo); }
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  const std::string& id() const { return id_; }
  uint16_t port() const { return port_; }
  std::string url(const std::string& path = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::string log() const { return read_file(dir_ / "server.log"); }
  // For a failed test's output: the end of this replica's log, under its id.
  void print_log_tail(size_t max_bytes = 30000) const {
    const std::string text = log();
    std::cerr << "---- " << id() << " log tail:\n"
              << (text.size() > max_bytes ? text.substr(text.size() - max_bytes) : text);
  }
  const fs::path& dir() const { return dir_; }

 private:
  std::string id_;
  fs::path dir_;
  uint16_t port_;
  pid_t pid_ = -1;
  bool killed_ = false;  // ended by a signal, not started since
};

// nginx in the foreground, one process, its files in `dir`: round-robin over the
// replicas; a replica that refuses connections is skipped for the next one.
class Nginx {
 public:
  Nginx(const fs::path& dir, const std::vector<uint16_t>& ports) : dir_(dir), port_(free_loopback_port()) {
    fs::create_directories(dir_ / "logs");
    std::ofstream conf(dir_ / "nginx.conf");
    conf << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << (dir_ / "nginx.pid").string()
         << ";\n"
         << "error_log " << (dir_ / "logs" / "error.log").string() << " info;\n"
         << "events { worker_connections 256; }\n"
         << "http {\n  access_log " << (dir_ / "logs" / "access.log").string() << ";\n";
    for (const char* temp : {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"})
      conf << "  " << temp << "_temp_path " << (dir_ / temp).string() << ";\n";
    conf << "  upstream replicas {\n";
    for (auto port : ports) conf << "    server 127.0.0.1:" << port << " max_fails=0;\n";
    conf << "  }\n  server {\n    listen 127.0.0.1:" << port_ << ";\n"
         << "    client_max_body_size 0;\n    proxy_request_buffering off;\n    proxy_buffering off;\n"
         << "    proxy_http_version 1.1;\n    proxy_set_header Connection \"\";\n    proxy_read_timeout "
            "300s;\n"
         << "    location / { proxy_pass http://replicas; }\n  }\n}\n";
    conf.close();
    pid_ = spawn_logged({"/usr/sbin/nginx", "-p", dir_.string(), "-e", (dir_ / "logs" / "error.log").string(),
                         "-c", (dir_ / "nginx.conf").string()},
                        dir_ / "logs" / "stderr.log");
    if (!wait_for_port(port_, pid_))
      throw std::runtime_error("nginx did not start: " + read_file(dir_ / "logs" / "error.log") +
                               read_file(dir_ / "logs" / "stderr.log"));
  }
  ~Nginx() {
    kill(pid_, SIGQUIT);
    waitpid(pid_, nullptr, 0);
  }
  std::string url(const std::string& path = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  fs::path dir_;
  uint16_t port_;
  pid_t pid_ = -1;
};

// Sends a PUT upload to `port` in two halves: the first half once the server said
// 100 Continue (the container is open and its lease taken then), the rest on finish().
class SlowUpload {
 public:
  SlowUpload(uint16_t port, const std::string& target, std::string body) : body_(std::move(body)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("connect");
    timeval timeout{30, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    const std::string header = "PUT " + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                               Replica::kToken + "\r\nContent-Length: " + std::to_string(body_.size()) +
                               "\r\nExpect: 100-continue\r\n\r\n";
    send_all(header);
    continued_ = read_some().find("100 Continue") != std::string::npos;
    send_all(body_.substr(0, body_.size() / 2));
  }
  ~SlowUpload() { close(fd_); }
  bool continued() const { return continued_; }
  // The rest of the body; returns the whole answer.
  std::string finish() {
    send_all(body_.substr(body_.size() / 2));
    std::string answer;
    for (;;) {
      std::string piece = read_some();
      if (piece.empty()) break;
      answer += piece;
      const auto end = answer.find("\r\n\r\n");
      const auto length_at = answer.find("Content-Length: ");
      if (end != std::string::npos && length_at != std::string::npos &&
          answer.size() >= end + 4 + std::stoul(answer.substr(length_at + 16)))
        break;
    }
    return answer;
  }

 private:
  void send_all(const std::string& data) {
    for (size_t at = 0; at < data.size();) {
      ssize_t n = ::send(fd_, data.data() + at, data.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return;
      at += static_cast<size_t>(n);
    }
  }
  std::string read_some() {
    char buf[65536];
    ssize_t n = recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  }
  int fd_ = -1;
  std::string body_;
  bool continued_ = false;
};

}  // namespace sandboxd::testing
