// What a process holds, read from /proc: its resident memory and open descriptors (the
// figures a test compares before, during and after an attack on the server).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace sandboxd::testing {

// VmRSS of /proc/PID/status, in KiB (0 when the process is gone).
inline long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string key; in >> key;) {
    if (key == "VmRSS:") {
      long v = 0;
      in >> v;
      return v;
    }
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

// The entries of /proc/PID/fd.
inline long count_fds(pid_t pid) {
  long n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

}  // namespace sandboxd::testing
