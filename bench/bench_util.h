// Small helpers for the benchmarks: percentiles and timing external commands.
#pragma once

#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
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

}  // namespace sandboxd::bench
