// Small helpers for the benchmarks: percentiles and timing external commands.
#pragma once

#include <spawn.h>
#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace sandboxd::bench {

using Clock = std::chrono::steady_clock;

struct Stats {
  double p50_ms = 0, p99_ms = 0, mean_ms = 0;
  size_t n = 0;
};

inline Stats summarize(std::vector<double> ms) {
  Stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.n = ms.size();
  s.p50_ms = ms[ms.size() / 2];
  s.p99_ms = ms[std::min(ms.size() - 1, (ms.size() * 99) / 100)];
  double sum = 0;
  for (double v : ms) sum += v;
  s.mean_ms = sum / static_cast<double>(ms.size());
  return s;
}

// An iteration count from the environment.
inline std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The CPU (user + system) a process has used so far, in ms, from /proc/PID/stat.
inline double cpu_ms_of(int pid) {
  std::string stat = read_all("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; fields >> field; ++i) {  // field 3 is the state; 14 utime, 15 stime
    if (i == 14) utime = std::stoll(field);
    if (i == 15) {
      stime = std::stoll(field);
      break;
    }
  }
  return 1000.0 * static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

inline double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Runs argv with stdout/stderr on /dev/null; returns the exit status or -1.
inline int run_quiet(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", 1, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", 1, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline Stats time_command(const std::vector<std::string>& argv, int iterations, bool* ok = nullptr) {
  std::vector<double> samples;
  bool all_ok = true;
  for (int i = 0; i < iterations; ++i) {
    auto start = Clock::now();
    all_ok &= run_quiet(argv) == 0;
    samples.push_back(ms_since(start));
  }
  if (ok) *ok = all_ok;
  return summarize(samples);
}

inline void print_row(const char* name, const Stats& s) {
  std::printf("  %-44s p50 %8.3f ms   p99 %8.3f ms   (n=%zu)\n", name, s.p50_ms, s.p99_ms, s.n);
}

// What a sandbox runs for `bash -c` on the host image: its bash-static when the host
// has one (sandboxd-init looks at these two paths), else /bin/bash. A bare peer must run
// the very same binary.
inline std::string sandbox_bash() {
  for (const char* candidate : {"/usr/bin/bash-static", "/bin/bash-static"})
    if (access(candidate, X_OK) == 0) return candidate;
  return "/bin/bash";
}

// bubblewrap with every namespace unshared and the mounts a sandbox has: the host's
// /usr (and its /bin, /lib* links), /proc, a minimal /dev, a tmpfs /tmp, and the
// container's workspace, uploads and outputs bound in; then `command`.
inline std::vector<std::string> bwrap_argv(const std::string& workspace, const std::string& uploads,
                                           const std::string& outputs, std::vector<std::string> command) {
  std::vector<std::string> argv = {"/usr/bin/bwrap", "--unshare-all", "--die-with-parent",
                                   "--ro-bind",      "/usr",          "/usr",
                                   "--symlink",      "usr/bin",       "/bin",
                                   "--symlink",      "usr/sbin",      "/sbin",
                                   "--symlink",      "usr/lib",       "/lib",
                                   "--symlink",      "usr/lib64",     "/lib64",
                                   "--proc",         "/proc",         "--dev",
                                   "/dev",           "--tmpfs",       "/tmp"};
  if (!workspace.empty())
    for (const auto& [from, to] :
         {std::pair{workspace, "/home/agent/workspace"}, std::pair{uploads, "/mnt/user-data/uploads"},
          std::pair{outputs, "/mnt/user-data/outputs"}}) {
      argv.insert(argv.end(), {"--bind", from, to});
    }
  if (!workspace.empty()) argv.insert(argv.end(), {"--chdir", "/home/agent/workspace"});
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

// Spawns `argv` (bare, stdout/stderr on /dev/null) from `threads` threads for
// `seconds`; returns completed runs per second.
inline double spawn_rate(const std::vector<std::string>& argv, int threads, double seconds) {
  std::atomic<long> done{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  auto start = Clock::now();
  for (int i = 0; i < threads; ++i)
    workers.emplace_back([&] {
      while (!stop.load()) {
        if (run_quiet(argv) == 0) ++done;
      }
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : workers) t.join();
  return static_cast<double>(done.load()) / std::chrono::duration<double>(Clock::now() - start).count();
}

// Docker, when scripts/bench.sh has an engine and an imported image for the run
// (SANDBOXD_BENCH_DOCKER: the client; SANDBOXD_BENCH_DOCKER_IMAGE: the image).
struct DockerPeer {
  bool ok = false;
  Stats run, exec;
};

inline DockerPeer measure_docker(int runs, int execs) {
  DockerPeer peer;
  const char* docker = std::getenv("SANDBOXD_BENCH_DOCKER");
  const char* image = std::getenv("SANDBOXD_BENCH_DOCKER_IMAGE");
  if (!docker || !image || run_quiet({docker, "info"}) != 0) return peer;
  const std::string name = "sandboxd-bench-" + std::to_string(getpid());
  bool run_ok = false, exec_ok = false;
  peer.run = time_command({docker, "run", "--rm", "--network", "none", image, "true"}, runs, &run_ok);
  run_quiet({docker, "run", "-d", "--name", name, "--network", "none", image, "sleep", "3600"});
  peer.exec = time_command({docker, "exec", name, "true"}, execs, &exec_ok);
  run_quiet({docker, "rm", "-f", name});
  peer.ok = run_ok && exec_ok;
  return peer;
}

}  // namespace sandboxd::bench
