// Replicas with fenced leases (issue 13 §3), end to end: three `sandboxd serve`
// processes with their own data directories and one shared metadata file (SQLite in
// WAL mode, each replica's <dataDir>/sandboxd.db a link to it), distinct replica ids
// and advertised URLs, and nginx (Debian's, run by the test in the foreground with a
// configuration of its own) in front of them as a round-robin load balancer. The
// upstream model is the scripted one. The test reads the lease rows from the shared
// file itself.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "scripted_upstream.h"
#include "server_harness.h"
#include "store/lease_store.h"
#include "store/metadata.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

constexpr int kLeaseSeconds = 3;
const char* kToken = "secret-alice";

uint16_t free_port() {
  uint16_t port = 0;
  close(listen_loopback(0, port, "free port"));
  return port;
}

// Spawns `argv` with stdout and stderr to `log`; returns the pid.
pid_t spawn_logged(std::vector<std::string> args, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) throw std::runtime_error("spawn failed");
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

bool wait_for_port(uint16_t port, pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return false;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    bool up = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    if (up) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// One replica: a sandboxd process on its own port and data directory.
class Replica {
 public:
  Replica(std::string id, const fs::path& root, const fs::path& shared_db, const std::string& model_url)
      : id_(std::move(id)), dir_(root / id_), port_(free_port()) {
    fs::create_directories(dir_ / "data");
    fs::create_symlink(shared_db, dir_ / "data" / "sandboxd.db");
    std::ofstream(dir_ / "config.yaml")
        << "server:\n  listen: \"127.0.0.1:" << port_ << "\"\n  dataDir: \"" << (dir_ / "data").string() << "\"\n"
        << "auth:\n  tokens:\n    - { token: " << kToken << ", owner: alice }\n  adminToken: admin-secret-0123456789\n"
        << "runtime:\n  prestartedSandboxes: 0\n"
        << "model:\n  baseUrl: \"" << model_url << "\"\n  apiKey: k\n  models: { default: upstream-model }\n"
        << "  timeoutSec: 10\n  pingIntervalSec: 1\n"
        << "cluster:\n  replicaId: " << id_ << "\n  advertiseUrl: \"" << url() << "\"\n  leaseSeconds: " << kLeaseSeconds
        << "\n  shutdownGraceSec: 10\n";
  }
  ~Replica() { stop(SIGTERM); }

  void start() {
    pid_ = spawn_logged({SANDBOXD_PATH, "serve", "--config", (dir_ / "config.yaml").string()}, dir_ / "server.log");
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
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  // A replica killed outright left sandboxes and mounts: a start cleans them up, a
  // SIGTERM then ends it cleanly (and the test leaves nothing behind).
  void restart_after_kill() {
    start();
  }
  void signal(int signo) { kill(pid_, signo); }

  const std::string& id() const { return id_; }
  uint16_t port() const { return port_; }
  std::string url(const std::string& path = "") const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  std::string log() const { return read_file(dir_ / "server.log"); }
  const fs::path& dir() const { return dir_; }

 private:
  std::string id_;
  fs::path dir_;
  uint16_t port_;
  pid_t pid_ = -1;
};

// nginx in the foreground, one process, its files in `dir`: round-robin over the replicas.
class Nginx {
 public:
  Nginx(const fs::path& dir, const std::vector<uint16_t>& ports) : dir_(dir), port_(free_port()) {
    fs::create_directories(dir_ / "logs");
    std::ofstream conf(dir_ / "nginx.conf");
    conf << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << (dir_ / "nginx.pid").string() << ";\n"
         << "error_log " << (dir_ / "logs" / "error.log").string() << " info;\n"
         << "events { worker_connections 256; }\n"
         << "http {\n  access_log " << (dir_ / "logs" / "access.log").string() << ";\n";
    for (const char* temp : {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"})
      conf << "  " << temp << "_temp_path " << (dir_ / temp).string() << ";\n";
    conf << "  upstream replicas {\n";
    for (auto port : ports) conf << "    server 127.0.0.1:" << port << " max_fails=0;\n";
    conf << "  }\n  server {\n    listen 127.0.0.1:" << port_ << ";\n"
         << "    client_max_body_size 0;\n    proxy_request_buffering off;\n    proxy_buffering off;\n"
         << "    proxy_http_version 1.1;\n    proxy_set_header Connection \"\";\n    proxy_read_timeout 300s;\n"
         << "    location / { proxy_pass http://replicas; }\n  }\n}\n";
    conf.close();
    // -e: even the log nginx opens before it reads the configuration is ours.
    pid_ = spawn_logged({"/usr/sbin/nginx", "-p", dir_.string(), "-e", (dir_ / "logs" / "error.log").string(), "-c",
                         (dir_ / "nginx.conf").string()},
                        dir_ / "logs" / "stderr.log");
    if (!wait_for_port(port_, pid_))
      throw std::runtime_error("nginx did not start: " + read_file(dir_ / "logs" / "error.log") +
                               read_file(dir_ / "logs" / "stderr.log"));
  }
  ~Nginx() {
    kill(pid_, SIGQUIT);
    waitpid(pid_, nullptr, 0);
  }
  std::string url(const std::string& path = "") const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

 private:
  fs::path dir_;
  uint16_t port_;
  pid_t pid_ = -1;
};

std::string random_bytes(size_t n) {
  std::mt19937_64 rng{std::random_device{}()};
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

std::string sha256_of(const fs::path& file) {
  return sh("sha256sum '" + file.string() + "' | cut -d' ' -f1");
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists("/usr/sbin/nginx")) GTEST_SKIP() << "nginx is not installed (scripts/setup.sh installs it)";
    std::string pattern = (fs::temp_directory_path() / "sandboxd-cluster-XXXXXX").string();
    root = mkdtemp(pattern.data());
    shared_db = root / "shared" / "metadata.db";
    fs::create_directories(shared_db.parent_path());
    upstream = new ScriptedUpstream();
    for (const char* id : {"replica-a", "replica-b", "replica-c"})
      replicas.push_back(new Replica(id, root, shared_db, upstream->base_url()));
    for (auto* replica : replicas) replica->start();
    nginx = new Nginx(root / "nginx", {replicas[0]->port(), replicas[1]->port(), replicas[2]->port()});
  }
  static void TearDownTestSuite() {
    delete nginx;
    for (auto* replica : replicas) delete replica;
    replicas.clear();
    delete upstream;
    std::error_code ec;
    if (!root.empty()) fs::remove_all(root, ec);
  }
  void SetUp() override {
    if (!nginx) GTEST_SKIP() << "no cluster";
    work = root / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(work);
  }

  static Replica& a() { return *replicas[0]; }
  static Replica& b() { return *replicas[1]; }
  static Replica& c() { return *replicas[2]; }

  // curl with alice's token against `base` (a replica's or nginx's URL).
  static std::string curl(const std::string& args) {
    return sh(std::string("curl -sS -H 'Authorization: Bearer ") + kToken + "' " + args);
  }
  // GET `url` into `file`; the status.
  static int download(const std::string& url, const fs::path& file) {
    return std::stoi(sh(std::string("curl -s -o '") + file.string() + "' -w '%{http_code}' -H 'Authorization: Bearer " +
                        kToken + "' '" + url + "'"));
  }
  static int status_of(const std::string& args) {
    return std::stoi(sh(std::string("curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer ") + kToken +
                        "' " + args));
  }
  // A bash command through a replica's (or nginx's) containers API: its JSON answer.
  static std::string bash_raw(const std::string& base, const std::string& container, const std::string& command,
                              int* status = nullptr) {
    const fs::path body = root / ("cmd-" + std::to_string(++counter) + ".json");
    std::ofstream(body) << bj::serialize(bj::object{{"command", command}});
    const std::string out = curl("-w '\\n%{http_code}' -X POST '" + base + "/api/gpt/v1/containers/" + container +
                                 "/tools/bash_code_execution' --data-binary @" + body.string());
    const size_t split = out.rfind('\n');
    if (status) *status = std::stoi(out.substr(split + 1));
    return out.substr(0, split);
  }
  static bj::object bash(const std::string& base, const std::string& container, const std::string& command) {
    int status = 0;
    std::string text = bash_raw(base, container, command, &status);
    EXPECT_EQ(status, 200) << text;
    return json(text).as_object();
  }
  // The container's lease as the shared database has it.
  static std::optional<sandboxd::store::Lease> lease_of(const std::string& container) {
    sandboxd::store::Metadata metadata(shared_db.string());
    auto record = metadata.find_container("alice", container);
    if (!record) return std::nullopt;
    sandboxd::store::LeaseStore leases(shared_db.string());
    return leases.find(record->storage);
  }
  // Files of a container through `base`: file name -> file id.
  static std::map<std::string, std::string> files_of(const std::string& base, const std::string& container) {
    std::map<std::string, std::string> out;
    for (const auto& [name, file] : listing_of(base, container)) out[name] = std::string(file.at("id").as_string());
    return out;
  }
  // The same, each file's whole object (etag, size_bytes).
  static std::map<std::string, bj::object> listing_of(const std::string& base, const std::string& container) {
    auto listing = json(curl("'" + base + "/api/gpt/v1/files?scope_id=" + container + "&limit=100'")).as_object();
    std::map<std::string, bj::object> out;
    for (const auto& file : listing.at("data").as_array())
      out[std::string(file.at("filename").as_string())] = file.as_object();
    return out;
  }

  static inline fs::path root, shared_db;
  static inline ScriptedUpstream* upstream = nullptr;
  static inline std::vector<Replica*> replicas;
  static inline Nginx* nginx = nullptr;
  static inline int counter = 0;
  fs::path work;
};

TEST_F(ClusterTest, UploadThroughOneRunThroughAnotherDownloadThroughTheThird) {
  const std::string container = "shared-bytes";
  const fs::path original = work / "data.bin";
  std::ofstream(original, std::ios::binary) << random_bytes(3 << 20);
  // Uploaded through A: A takes the container.
  auto uploaded = json(curl("-X POST '" + a().url("/api/gpt/v1/files?scope_id=" + container) + "' -F 'file=@" +
                            original.string() + "'"));
  ASSERT_TRUE(uploaded.as_object().contains("id")) << bj::serialize(uploaded);
  auto lease = lease_of(container);
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->holder, "replica-a");
  EXPECT_EQ(lease->epoch, 1);
  // Run through B (relayed to A): reads the upload, writes an output.
  auto ran = bash(b().url(), container,
                  "sha256sum /mnt/user-data/uploads/data.bin | cut -d' ' -f1; "
                  "cp /mnt/user-data/uploads/data.bin /mnt/user-data/outputs/copy.bin");
  EXPECT_EQ(ran.at("return_code"), 0) << bj::serialize(ran);
  EXPECT_EQ(std::string(ran.at("stdout").as_string()), sha256_of(original));
  // Downloaded through C: the same bytes.
  auto files = files_of(c().url(), container);
  ASSERT_TRUE(files.count("copy.bin")) << "listed through C";
  const fs::path downloaded = work / "downloaded.bin";
  EXPECT_EQ(download(c().url("/api/gpt/v1/files/" + files["copy.bin"] + "/content?scope_id=" + container), downloaded),
            200);
  EXPECT_EQ(sha256_of(downloaded), sha256_of(original));
  // Through the load balancer, each replica in turn: every answer the same bytes,
  // HEAD with its length.
  for (int i = 0; i < 6; ++i) {
    const fs::path again = work / ("again-" + std::to_string(i) + ".bin");
    EXPECT_EQ(download(nginx->url("/api/gpt/v1/files/" + files["copy.bin"] + "/content?scope_id=" + container), again),
              200);
    EXPECT_EQ(sha256_of(again), sha256_of(original)) << "download " << i;
  }
  // Uploads through a non-holder stream on to A, sized and chunked alike.
  const fs::path second = work / "second.bin";
  std::ofstream(second, std::ios::binary) << random_bytes(5 << 20);
  const std::string second_md5 = sh("md5sum '" + second.string() + "' | cut -d' ' -f1 | tr -d '\\n'");
  EXPECT_EQ(status_of("-X PUT --data-binary @" + second.string() + " '" +
                      c().url("/api/gpt/v1/files/sized.bin?scope_id=" + container) + "'"),
            200);
  EXPECT_EQ(status_of("-X PUT -H 'Transfer-Encoding: chunked' --data-binary @" + second.string() + " '" +
                      b().url("/api/gpt/v1/files/chunked.bin?scope_id=" + container) + "'"),
            200);
  auto listed = listing_of(a().url(), container);
  for (const char* name : {"sized.bin", "chunked.bin"}) {
    ASSERT_TRUE(listed.count(name)) << name;
    EXPECT_EQ(std::string(listed[name].at("etag").as_string()), second_md5) << name;
  }
  const std::string head = curl("-I '" + b().url("/api/gpt/v1/files/" + files["data.bin"] + "?scope_id=" + container) + "'");
  EXPECT_NE(head.find("X-File-Size-Bytes: " + std::to_string(3 << 20)), std::string::npos) << head;
  // A request relayed once already is never relayed again: B, not the holder, refuses it.
  EXPECT_EQ(status_of("-H 'Sandboxd-Relayed-By: replica-x' '" + b().url("/api/gpt/v1/files?scope_id=" + container) + "'"),
            503);
  // Nobody took the container from A.
  lease = lease_of(container);
  EXPECT_EQ(lease->holder, "replica-a");
  EXPECT_EQ(lease->epoch, 1);
  // B's disk never held it: B relayed every request.
  EXPECT_EQ(b().log().find("took container storage " + [&] {
    sandboxd::store::Metadata metadata(shared_db.string());
    return metadata.find_container("alice", container)->storage;
  }()), std::string::npos);
}

TEST_F(ClusterTest, MessagesStreamThroughANonHolderArrivesIntact) {
  const std::string container = "shared-stream";
  bash(a().url(), container, "echo ready > /mnt/user-data/outputs/ready.txt");  // A holds it
  using U = ScriptedUpstream;
  upstream->push_message(U::message({U::text_block("Running it."),
                                     U::tool_use("toolu_c1", "bash_code_execution",
                                                 {{"command", "cat /mnt/user-data/outputs/ready.txt; echo streamed"}})},
                                    "tool_use"));
  upstream->push_message(U::message({U::text_block("It printed twice.")}, "end_turn"));
  bj::object body{{"model", "default"},
                  {"max_tokens", 1024},
                  {"stream", true},
                  {"container", container},
                  {"messages", bj::array{bj::object{{"role", "user"}, {"content", "run it"}}}},
                  {"tools", bj::array{bj::object{{"name", "code_execution"}, {"type", "code_execution_v1"}}}}};
  const fs::path file = work / "body.json";
  std::ofstream(file) << bj::serialize(body);
  const fs::path headers = work / "headers";
  const std::string text = curl("-N -D '" + headers.string() + "' -X POST '" + c().url("/api/gpt/v1/messages") +
                                "' -H 'content-type: application/json' --data-binary @" + file.string());
  EXPECT_NE(read_file(headers).find("text/event-stream"), std::string::npos) << read_file(headers);
  auto events = parse_sse(text);
  ASSERT_GE(events.size(), 10u) << text;
  EXPECT_EQ(events.front().name, "message_start");
  EXPECT_EQ(events.back().name, "message_stop");
  for (const auto& e : events) EXPECT_EQ(e.data.at("type").as_string(), e.name);
  std::string stdout_seen, text_seen;
  for (const auto& e : events) {
    if (e.name == "content_block_start")  // the tool result arrives whole, in its start event
      if (const auto* content = e.data.at("content_block").as_object().if_contains("content");
          content && content->is_object() && content->as_object().contains("stdout"))
        stdout_seen = content->at("stdout").as_string();
    if (e.name == "content_block_delta" && e.data.at("delta").at("type") == "text_delta")
      text_seen += e.data.at("delta").at("text").as_string();
  }
  EXPECT_EQ(stdout_seen, "ready\nstreamed\n") << "the command ran in A's sandbox: " << text;
  EXPECT_EQ(text_seen, "Running it.It printed twice.");
  EXPECT_EQ(upstream->pending_steps(), 0u);
  EXPECT_EQ(lease_of(container)->holder, "replica-a");
}

TEST_F(ClusterTest, KilledHolderIsReplacedWithinItsLease) {
  const std::string container = "shared-kill";
  bash(a().url(), container, "echo before");
  ASSERT_EQ(lease_of(container)->holder, "replica-a");
  a().stop(SIGKILL);
  // At once (A's lease still runs): a replica relaying to it answers 503, Retry-After,
  // the documented error shape and nothing of why.
  const fs::path headers = work / "headers";
  const std::string refused = curl("-D '" + headers.string() + "' -X POST '" +
                                   b().url("/api/gpt/v1/containers/" + container + "/tools/bash_code_execution") +
                                   "' -d '{\"command\": \"true\"}'");
  EXPECT_EQ(read_file(headers).rfind("HTTP/1.1 503", 0), 0u) << read_file(headers);
  EXPECT_NE(read_file(headers).find("Retry-After: "), std::string::npos) << read_file(headers);
  EXPECT_EQ(refused.rfind("{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"", 0), 0u) << refused;
  EXPECT_EQ(refused.find("refused"), std::string::npos) << refused;
  // Through the load balancer: 503s with Retry-After (relays to a dead holder) until
  // the lease runs out, then another replica takes the container and serves it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kLeaseSeconds + 10);
  int status = 0;
  std::string answer;
  while (std::chrono::steady_clock::now() < deadline) {
    answer = bash_raw(nginx->url(), container, "echo after", &status);
    if (status == 200) break;
    EXPECT_EQ(status, 503) << answer;
    EXPECT_NE(answer.find("\"type\":\"error\""), std::string::npos) << answer;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  ASSERT_EQ(status, 200) << "served within leaseSeconds + 10 s: " << answer;
  EXPECT_EQ(json(answer).at("stdout"), "after\n");
  auto lease = lease_of(container);
  ASSERT_TRUE(lease);
  EXPECT_TRUE(lease->holder == "replica-b" || lease->holder == "replica-c") << lease->holder;
  EXPECT_EQ(lease->epoch, 2) << "a fresh epoch";
  // (Without the bucket backend the new holder's copy starts empty; the lead adds the
  // restore checks when it lands: see the report.)
  a().restart_after_kill();
}

// Sends a PUT upload to `port` in two halves; the first half once the server said
// 100 Continue (the container is open and its lease taken then).
class SlowUpload {
 public:
  SlowUpload(uint16_t port, const std::string& target, std::string body) : body_(std::move(body)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("connect");
    timeval timeout{30, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    const std::string header = "PUT " + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + kToken +
                               "\r\nContent-Length: " + std::to_string(body_.size()) +
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

TEST_F(ClusterTest, PausedHolderIsFencedWhenItComesBackAndTheNewHoldersFilesStay) {
  const std::string container = "shared-pause";
  const std::string files_url = "/api/gpt/v1/files";
  ASSERT_EQ(status_of("-X PUT --data-binary 'first' '" + a().url(files_url + "/first.txt?scope_id=" + container) + "'"), 200);
  ASSERT_EQ(lease_of(container)->holder, "replica-a");
  bash(a().url(), container, "echo a sandbox on A");
  EXPECT_NE(sh("curl -sS -H 'Authorization: Bearer admin-secret-0123456789' '" + a().url("/admin/sandboxes") + "'")
                .find(container),
            std::string::npos);
  // An upload to A, half sent when A is paused.
  SlowUpload late(a().port(), files_url + "/late.txt?scope_id=" + container, random_bytes(256 << 10));
  ASSERT_TRUE(late.continued()) << "A opened the container for the upload";
  a().signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(kLeaseSeconds + 1));
  // B takes the container over (A's lease ran out) and writes.
  const fs::path newer = work / "newer.bin";
  std::ofstream(newer, std::ios::binary) << random_bytes(64 << 10);
  ASSERT_EQ(status_of("-X PUT --data-binary @" + newer.string() + " '" +
                      b().url(files_url + "/newer.bin?scope_id=" + container) + "'"),
            200);
  auto lease = lease_of(container);
  ASSERT_EQ(lease->holder, "replica-b");
  ASSERT_EQ(lease->epoch, 2);
  // A comes back and finishes its upload: refused (its epoch is gone), 503 with Retry-After.
  a().signal(SIGCONT);
  const std::string answer = late.finish();
  EXPECT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << answer;
  EXPECT_NE(answer.find("Retry-After: "), std::string::npos) << answer;
  EXPECT_NE(answer.find("{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\""), std::string::npos) << answer;
  EXPECT_NE(a().log().find("a write at epoch"), std::string::npos) << "A's write met the fence";
  // A gave the container up: its sandbox there stops (B runs the container's commands).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string sandboxes_on_a;
  while (std::chrono::steady_clock::now() < deadline) {
    sandboxes_on_a = sh("curl -sS -H 'Authorization: Bearer admin-secret-0123456789' '" + a().url("/admin/sandboxes") + "'");
    if (sandboxes_on_a.find(container) == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(sandboxes_on_a.find(container), std::string::npos) << sandboxes_on_a;
  EXPECT_NE(sandboxes_on_a.find("\"data\""), std::string::npos) << sandboxes_on_a;
  // Nothing of B's is lost and A's late file is not there, whichever replica is asked.
  const std::string newer_md5 = sh("md5sum '" + newer.string() + "' | cut -d' ' -f1 | tr -d '\\n'");
  for (auto* through : {&a(), &b(), &c()}) {
    auto files = listing_of(through->url(), container);
    ASSERT_TRUE(files.count("newer.bin")) << through->id();
    EXPECT_EQ(std::string(files["newer.bin"].at("etag").as_string()), newer_md5) << through->id();
    EXPECT_EQ(files["newer.bin"].at("size_bytes"), 64 << 10) << through->id();
    EXPECT_FALSE(files.count("late.txt")) << through->id();
  }
  // And its bytes are the ones B received (copied to outputs/ to download them).
  EXPECT_EQ(bash(c().url(), container, "cp /mnt/user-data/uploads/newer.bin /mnt/user-data/outputs/").at("return_code"), 0);
  const fs::path copy = work / "newer-copy.bin";
  EXPECT_EQ(download(a().url(files_url + "/" + file_id("/mnt/user-data/outputs/newer.bin") + "/content?scope_id=" + container), copy),
            200);
  EXPECT_EQ(sha256_of(copy), sha256_of(newer));
  lease = lease_of(container);
  EXPECT_EQ(lease->holder, "replica-b");
  EXPECT_EQ(lease->epoch, 2);
}

TEST_F(ClusterTest, SigtermReleasesTheLeasesAtOnceAndDrainDoesWithoutExiting) {
  const std::string by_term = "shared-term", by_drain = "shared-drain";
  bash(c().url(), by_term, "echo held");
  bash(b().url(), by_drain, "echo held");
  ASSERT_EQ(lease_of(by_term)->holder, "replica-c");
  ASSERT_EQ(lease_of(by_drain)->holder, "replica-b");
  EXPECT_EQ(c().stop(SIGTERM), 0);
  // Released, not left to run out: the row has no holder (expiry leaves it in place).
  auto lease = lease_of(by_term);
  EXPECT_EQ(lease->holder, "");
  EXPECT_EQ(lease->epoch, 1);
  EXPECT_EQ(bash(a().url(), by_term, "echo moved").at("stdout"), "moved\n");
  EXPECT_EQ(lease_of(by_term)->holder, "replica-a");
  EXPECT_EQ(lease_of(by_term)->epoch, 2);
  // `sandboxd admin drain` against B: the same, and B keeps running.
  int status = -1;
  const std::string drained = sh(std::string(SANDBOXD_PATH) + " admin drain --url " + b().url() +
                                 " --admin-token admin-secret-0123456789 2>&1", &status);
  EXPECT_EQ(status, 0) << drained;
  EXPECT_NE(drained.find("released"), std::string::npos) << drained;
  EXPECT_EQ(lease_of(by_drain)->holder, "");
  EXPECT_EQ(status_of("'" + b().url("/health") + "'"), 200) << "B still runs";
  // B refuses to take containers now; one held elsewhere it still relays.
  int refused = 0;
  bash_raw(b().url(), "shared-new-after-drain", "true", &refused);
  EXPECT_EQ(refused, 503);
  EXPECT_EQ(bash(b().url(), by_term, "echo relayed").at("stdout"), "relayed\n");
  // The admin token is required.
  EXPECT_EQ(status_of("-X POST '" + b().url("/admin/drain") + "'"), 401);
  // B again as it was, C back.
  EXPECT_EQ(b().stop(SIGTERM), 0);
  b().start();
  c().start();
}

}  // namespace
