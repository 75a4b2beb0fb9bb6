// A real S3 server for the tests: s3rver (npm, pinned in tests/s3/package-lock.json,
// installed by scripts/test.sh with `npm ci`) as a node process on a free loopback
// port, its objects in a directory of its own. It checks SigV4 signatures with its
// default credentials (S3RVER / S3RVER): it refuses an unknown access key id but does
// not verify SigV4 signatures themselves. It keeps multipart parts in a folder per
// upload under the bucket until they are completed.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "loopback.h"
#include "server_harness.h"

extern char** environ;

namespace sandboxd::testing {

class S3Server {
 public:
  static constexpr const char* kAccessKey = "S3RVER";
  static constexpr const char* kSecretKey = "S3RVER";
  static constexpr const char* kBucket = "sessions";

  S3Server() {
    std::string pattern = (std::filesystem::temp_directory_path() / "sandboxd-s3-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    port_ = free_loopback_port();
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

  // The node binary on PATH runs s3rver's own CLI.
  void start() {
    const std::string script = std::string(SANDBOXD_S3RVER_DIR) + "/node_modules/s3rver/bin/s3rver.js";
    const std::string data = (dir_ / "data").string(), port = std::to_string(port_);
    log_ = dir_ / "s3rver.log";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::string node = "node";
    // s3rver makes its listing continuation tokens with DES, which Node's OpenSSL 3 only
    // has in the legacy provider.
    char* argv[] = {node.data(), const_cast<char*>("--openssl-legacy-provider"), const_cast<char*>(script.c_str()), const_cast<char*>("-d"), const_cast<char*>(data.c_str()),
                    const_cast<char*>("-a"), const_cast<char*>("127.0.0.1"), const_cast<char*>("-p"),
                    const_cast<char*>(port.c_str()), const_cast<char*>("--silent"), nullptr};
    if (posix_spawnp(&pid_, "node", &actions, nullptr, argv, environ) != 0) throw std::runtime_error("cannot start s3rver");
    posix_spawn_file_actions_destroy(&actions);
    for (int i = 0; i < 500; ++i) {
      if (loopback_accepts(port_)) return;
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) throw std::runtime_error("s3rver exited: " + log());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("s3rver did not start: " + log());
  }
  // (SIGTERM lets s3rver finish the requests it has open first; SIGKILL drops them.)
  void stop(int signo = SIGTERM) {
    if (pid_ <= 0) return;
    kill(pid_, signo);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The storage section of a sandboxd configuration pointing at this server.
  // (5 MiB parts, S3's smallest: a test's "large" upload is a multipart one at 11 MiB.)
  std::string storage_yaml(const std::string& prefix = "sbx/", int flush_interval = 30) const {
    return "storage:\n  backend: s3\n  flushIntervalSec: " + std::to_string(flush_interval) +
           "\n  s3:\n    endpoint: \"" + endpoint() + "\"\n    region: us-east-1\n    bucket: " + kBucket +
           "\n    prefix: \"" + prefix + "\"\n    accessKeyId: " + kAccessKey + "\n    secretAccessKey: " +
           kSecretKey + "\n    forcePathStyle: true\n    partSize: 5Mi\n";
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
      if (it->path().filename() == "key" && it->path().parent_path().parent_path().filename().string().find("uploads") !=
                                               std::string::npos)
        ++count;
    }
    return count;
  }
  std::string log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // curl signed as s3rver's default user.
  std::string run_curl(const std::string& args, int* status = nullptr) const {
    return sh(std::string("curl -sS --aws-sigv4 aws:amz:us-east-1:s3 -u ") + kAccessKey + ":" + kSecretKey +
                  " -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' " + args,
              status);
  }


 private:


  std::filesystem::path dir_, log_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace sandboxd::testing
