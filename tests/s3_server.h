// A real S3 server for the tests: s3rver (npm, pinned in tests/s3/package-lock.json,
// installed by scripts/test.sh with `npm ci`) as a node process on a free loopback
// port, its objects in a directory of its own. s3rver refuses an unknown access key id
// but does not verify SigV4 signatures, so it sits behind tests/s3/sigv4_verifier.js
// (the AWS SDK's signer, @smithy/signature-v4, from the same lockfile): endpoint() is the
// verifier, which recomputes every request's signature as S3 does, answers 403
// SignatureDoesNotMatch (S3's XML error) on a mismatch and forwards the rest to s3rver.
// Credentials: s3rver's default S3RVER / S3RVER. s3rver keeps multipart parts in a folder
// per upload under the bucket until they are completed.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "loopback.h"
#include "server_harness.h"
#include "store/s3_client.h"

extern char** environ;

namespace sandboxd::testing {

class S3Server {
 public:
  static constexpr const char* kAccessKey = "S3RVER";
  static constexpr const char* kSecretKey = "S3RVER";
  static constexpr const char* kBucket = "sessions";

  // kUnverified: s3rver alone on endpoint() (the benchmarks measure it without the extra
  // hop; curl's own requests there are not all canonically signed).
  enum class Signatures { kVerified, kUnverified };

  explicit S3Server(Signatures signatures = Signatures::kVerified)
      : verify_(signatures == Signatures::kVerified) {
    std::string pattern = (std::filesystem::temp_directory_path() / "sandboxd-s3-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    port_ = free_loopback_port();
    backend_port_ = port_;
    while (verify_ && backend_port_ == port_) backend_port_ = free_loopback_port();
    start();
    // The bucket, made through the API (s3rver's --configure-bucket needs config files).
    int status = 0;
    run_curl("-X PUT '" + endpoint() + "/" + kBucket + "'", &status);
  }
  ~S3Server() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // s3rver's own CLI and the verifier in front of it, each a node process (the node
  // binary on PATH).
  void start() {
    const std::string dir = SANDBOXD_S3RVER_DIR;
    const std::string data = (dir_ / "data").string(), backend = std::to_string(backend_port_),
                      port = std::to_string(port_), credentials = std::string(kAccessKey) + ":" + kSecretKey;
    log_ = dir_ / "s3rver.log";
    verifier_log_ = dir_ / "verifier.log";
    // s3rver makes its listing continuation tokens with DES, which Node's OpenSSL 3 only
    // has in the legacy provider.
    pid_ = spawn_node({"--openssl-legacy-provider", dir + "/node_modules/s3rver/bin/s3rver.js", "-d", data,
                       "-a", "127.0.0.1", "-p", backend, "--silent"},
                      log_);
    if (verify_)
      verifier_pid_ = spawn_node({dir + "/sigv4_verifier.js", "--listen", port, "--upstream", backend,
                                  "--region", "us-east-1", "--credentials", credentials},
                                 verifier_log_);
    for (int i = 0; i < 500; ++i) {
      if (loopback_accepts(backend_port_) && loopback_accepts(port_)) return;
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) throw std::runtime_error("s3rver exited: " + log());
      if (verify_ && waitpid(verifier_pid_, nullptr, WNOHANG) == verifier_pid_)
        throw std::runtime_error("the SigV4 verifier exited: " + verifier_log());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("s3rver or its verifier did not start: " + log() + verifier_log());
  }
  // (SIGTERM lets s3rver and the verifier finish the requests they have open first;
  // SIGKILL drops them.)
  void stop(int signo = SIGTERM) {
    for (pid_t* pid : {&verifier_pid_, &pid_}) {
      if (*pid <= 0) continue;
      kill(*pid, signo);
      waitpid(*pid, nullptr, 0);
      *pid = -1;
    }
  }

  // Pauses (SIGSTOP) or resumes (SIGCONT) s3rver itself: the verifier in front still
  // accepts and forwards, and requests wait as on a bucket that stopped answering.
  void signal_s3rver(int signo) const { kill(pid_, signo); }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // A client of this server's bucket, with its credentials.
  sandboxd::store::S3Settings client_settings() const {
    sandboxd::store::S3Settings settings;
    settings.endpoint = endpoint();
    settings.bucket = kBucket;
    settings.access_key_id = kAccessKey;
    settings.secret_access_key = kSecretKey;
    settings.force_path_style = true;
    return settings;
  }
  // The storage section of a sandboxd configuration pointing at this server.
  // (5 MiB parts, S3's smallest: a test's "large" upload is a multipart one at 11 MiB.)
  std::string storage_yaml(const std::string& prefix = "sbx/", int flush_interval = 30) const {
    return "storage:\n  backend: s3\n  flushIntervalSec: " + std::to_string(flush_interval) +
           "\n  s3:\n    endpoint: \"" + endpoint() + "\"\n    region: us-east-1\n    bucket: " + kBucket +
           "\n    prefix: \"" + prefix + "\"\n    accessKeyId: " + kAccessKey +
           "\n    secretAccessKey: " + kSecretKey + "\n    forcePathStyle: true\n    partSize: 5Mi\n";
  }
  // Where s3rver keeps the bucket's objects and pending multipart uploads.
  std::filesystem::path bucket_dir() const { return dir_ / "data" / kBucket; }
  // Pending multipart uploads: s3rver keeps each in a folder under the bucket's
  // uploads resource until it is completed.
  size_t pending_multipart_uploads() const {
    size_t count = 0;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(bucket_dir(), ec);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it->path().filename() == "key" &&
          it->path().parent_path().parent_path().filename().string().find("uploads") != std::string::npos)
        ++count;
    }
    return count;
  }
  std::string log() const { return read_all(log_); }
  // One line per request the verifier saw: "verified METHOD URL" or "refused CODE METHOD
  // URL" (with the canonical request it computed after a SignatureDoesNotMatch).
  std::string verifier_log() const { return read_all(verifier_log_); }
  size_t verified_requests() const { return count_lines_starting("verified "); }
  size_t refused_requests() const { return count_lines_starting("refused "); }
  // The verifier's log without its "verified" lines: what it refused, and why.
  std::string refusals() const {
    std::istringstream in(verifier_log());
    std::string out;
    for (std::string line; std::getline(in, line);)
      if (line.rfind("verified ", 0) != 0) out += line + "\n";
    return out;
  }

  // curl signed as s3rver's default user.
  std::string run_curl(const std::string& args, int* status = nullptr) const {
    return sh(std::string("curl -sS --aws-sigv4 aws:amz:us-east-1:s3 -u ") + kAccessKey + ":" + kSecretKey +
                  " -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' " + args,
              status);
  }

 private:
  static std::string read_all(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  size_t count_lines_starting(const std::string& start) const {
    std::istringstream in(verifier_log());
    size_t count = 0;
    for (std::string line; std::getline(in, line);) count += line.rfind(start, 0) == 0;
    return count;
  }
  // `node args...` with stdout and stderr appended to `log`.
  static pid_t spawn_node(std::vector<std::string> args, const std::filesystem::path& log) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    args.insert(args.begin(), "node");
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, "node", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error("cannot start node " + args[1]);
    return pid;
  }

  bool verify_ = true;
  std::filesystem::path dir_, log_, verifier_log_;
  uint16_t port_ = 0;          // the verifier: what clients talk to
  uint16_t backend_port_ = 0;  // s3rver itself
  pid_t pid_ = -1, verifier_pid_ = -1;
};

}  // namespace sandboxd::testing
