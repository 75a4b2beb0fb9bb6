// Test support for end-to-end tests: a real `sandboxd serve` on loopback with its own
// data directory and configuration, and curl, as a user would drive it.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "host_leftovers.h"
#include "process_stats.h"

extern char** environ;

namespace sandboxd::testing {

namespace fs = std::filesystem;

// Runs a shell command; returns its stdout (stderr goes to the test log).
inline std::string sh(const std::string& command, int* status = nullptr) {
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed");
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  int rc = pclose(pipe);
  if (status) *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The file id of a sandbox path: base64url of its exact bytes, no padding.
inline std::string file_id(const std::string& path) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  uint32_t bits = 0;
  int held = 0;
  for (unsigned char c : path) {
    bits = (bits << 8) | c;
    held += 8;
    while (held >= 6) {
      held -= 6;
      out += kAlphabet[(bits >> held) & 63];
    }
  }
  if (held > 0) out += kAlphabet[(bits << (6 - held)) & 63];
  return out;
}

struct SseEvent {
  std::string name;
  boost::json::object data;
};

// Splits an SSE body into its events (the server writes "event: X\ndata: Y\n\n").
inline std::vector<SseEvent> parse_sse(const std::string& text);

// One sample of a Prometheus text page at `metrics_url` ("name" or "name{labels}" exactly
// as exposed); -1 when the page has no such sample.
inline double metric_sample(const std::string& metrics_url, const std::string& sample) {
  std::string text = sh("curl -s '" + metrics_url + "'");
  auto at = text.find("\n" + sample + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + sample.size() + 2));
}

inline boost::json::value json(const std::string& text) {
  boost::system::error_code ec;
  auto value = boost::json::parse(text, ec);
  if (ec) throw std::runtime_error("not JSON: " + text.substr(0, 500));
  return value;
}

// A process's resident memory and open descriptors (tests/process_stats.h).
using sandboxd::testing::count_fds;
using sandboxd::testing::rss_kib;

class ServerProcess {
 public:
  // `extra_yaml` is appended to a configuration that sets the data dir, a free port
  // and two owners: alice (token secret-alice) and bob (token secret-bob).
  explicit ServerProcess(const std::string& extra_yaml = "", fs::path data_dir = {}) {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-e2e-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    data_dir_ = data_dir.empty() ? dir_ / "data" : data_dir;
    config_ = dir_ / "config.yaml";
    write_config(extra_yaml);
    start();
  }
  ~ServerProcess() {
    stop(SIGTERM);
    // Killed and not started again: what its next start would have removed (its
    // volumes' mounts and loop devices, its sandboxes' cgroups) is removed here.
    if (killed_) {
      const std::string failed = host::clean(data_dir_);
      if (!failed.empty()) std::fprintf(stderr, "cleaning what a killed server left: %s", failed.c_str());
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // (Re)writes the configuration file; a running server reads it again on reload().
  void write_config(const std::string& extra_yaml) {
    std::ofstream(config_) << "server:\n  listen: \"127.0.0.1:0\"\n  dataDir: \"" << data_dir_.string()
                           << "\"\n"
                           << section_lines(extra_yaml, "server")
                           << "auth:\n  tokens:\n    - { token: secret-alice, owner: alice }\n"
                              "    - { token: secret-bob-x, owner: bob }\n"
                           << section_lines(extra_yaml, "auth")
                           << strip_section(strip_section(extra_yaml, "server"), "auth");
  }
  // SIGHUP, then waits until the log tells how the reload went (returns that line).
  std::string reload() {
    const size_t before = count_reload_lines();
    kill(pid_, SIGHUP);
    for (int i = 0; i < 250; ++i) {
      if (count_reload_lines() > before) {
        std::string text = log();
        size_t at = text.rfind("SIGHUP: ");
        return text.substr(at, text.find('\n', at) - at);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("no reload in the log: " + log());
  }

  void start() {
    log_ = dir_ / ("server-" + std::to_string(++starts_) + ".log");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::string binary = SANDBOXD_PATH, config = config_.string();
    char* argv[] = {binary.data(), const_cast<char*>("serve"), const_cast<char*>("--config"), config.data(),
                    nullptr};
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv, environ) != 0)
      throw std::runtime_error("spawn failed");
    killed_ = false;  // its start cleans what a killed predecessor left
    posix_spawn_file_actions_destroy(&actions);
    std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 300; ++i) {
      std::smatch m;
      std::string text = log();
      if (std::regex_search(text, m, listening)) {
        port_ = std::stoi(m[1]);
        return;
      }
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) throw std::runtime_error("server exited: " + text);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("server did not start: " + log());
  }

  // Stops the server with `signo`; returns its exit status (or -signal).
  int stop(int signo) {
    if (pid_ <= 0) return 0;
    kill(pid_, signo);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    if (!WIFEXITED(status)) killed_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  void restart() {
    stop(SIGTERM);
    start();
  }

  std::string log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url(const std::string& path = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::string base() const { return url("/api/gpt/v1"); }
  // A sample of this server's /metrics (see metric_sample).
  double metric(const std::string& sample) const { return metric_sample(url("/metrics"), sample); }
  const fs::path& dir() const { return dir_; }
  const fs::path& data_dir() const { return data_dir_; }

  // curl with alice's token; returns the body.
  std::string curl(const std::string& args, const std::string& token = "secret-alice") const {
    return sh("curl -sS -H 'Authorization: Bearer " + token + "' " + args);
  }
  boost::json::value curl_json(const std::string& args, const std::string& token = "secret-alice") const {
    return json(curl(args, token));
  }
  // Status code only.
  int status(const std::string& args, const std::string& token = "secret-alice") const {
    return std::stoi(
        sh("curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer " + token + "' " + args));
  }

 private:
  size_t count_reload_lines() const {
    std::string text = log();
    size_t n = 0;
    for (size_t at = 0; (at = text.find("SIGHUP: configuration reloaded", at)) != std::string::npos; ++at)
      ++n;
    for (size_t at = 0; (at = text.find("not reloaded", at)) != std::string::npos; ++at) ++n;
    return n;
  }

  // Keys of the server: and auth: sections are merged into ours; the rest is appended.
  static std::string section_lines(const std::string& yaml, const std::string& section) {
    auto pos = yaml.find(section + ":\n");
    if (pos == std::string::npos) return "";
    std::string out;
    std::istringstream lines(yaml.substr(pos + section.size() + 2));
    for (std::string line; std::getline(lines, line) && line.rfind("  ", 0) == 0;) out += line + "\n";
    return out;
  }
  static std::string strip_section(const std::string& yaml, const std::string& section) {
    auto pos = yaml.find(section + ":\n");
    if (pos == std::string::npos) return yaml;
    std::string out = yaml.substr(0, pos);
    std::istringstream lines(yaml.substr(pos + section.size() + 2));
    bool inside = true;
    for (std::string line; std::getline(lines, line);) {
      if (inside && line.rfind("  ", 0) == 0) continue;
      inside = false;
      out += line + "\n";
    }
    return out;
  }

  fs::path dir_, data_dir_, config_, log_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool killed_ = false;  // ended by a signal, not started since
  int starts_ = 0;
};

inline std::vector<SseEvent> parse_sse(const std::string& text) {
  std::vector<SseEvent> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find("\n\n", at);
    if (end == std::string::npos) break;
    std::string block = text.substr(at, end - at);
    at = end + 2;
    SseEvent event;
    std::istringstream lines(block);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("event: ", 0) == 0) event.name = line.substr(7);
      if (line.rfind("data: ", 0) == 0) event.data = json(line.substr(6)).as_object();
    }
    out.push_back(std::move(event));
  }
  return out;
}

}  // namespace sandboxd::testing
