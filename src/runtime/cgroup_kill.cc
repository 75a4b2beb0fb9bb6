#include "runtime/cgroup_kill.h"

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace sandboxd::runtime {
namespace {

// Reads a small control file at dirfd. Returns bytes read or -errno.
ssize_t read_control(int dirfd, const char* name, char* buf, size_t size) {
  int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t total = 0;
  while (total < size) {
    ssize_t n = read(fd, buf + total, size - total);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
  close(fd);
  return static_cast<ssize_t>(total);
}

int write_control(int dirfd, const char* name, const char* value) {
  int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t n = write(fd, value, std::strlen(value));
  int err = errno;
  close(fd);
  return n < 0 ? -err : 0;
}

std::vector<pid_t> list_pids(int dirfd) {
  std::vector<pid_t> pids;
  std::vector<char> buf(1 << 16);
  for (;;) {
    ssize_t n = read_control(dirfd, "cgroup.procs", buf.data(), buf.size());
    if (n < 0) return pids;
    if (static_cast<size_t>(n) < buf.size()) {
      buf.resize(static_cast<size_t>(n));
      break;
    }
    buf.resize(buf.size() * 2);
  }
  pid_t current = 0;
  bool in_number = false;
  for (char c : buf) {
    if (c >= '0' && c <= '9') {
      current = current * 10 + (c - '0');
      in_number = true;
    } else if (in_number) {
      pids.push_back(current);
      current = 0;
      in_number = false;
    }
  }
  if (in_number) pids.push_back(current);
  return pids;
}

void pause_briefly() {
  timespec ts{0, 1'000'000};  // 1 ms
  nanosleep(&ts, nullptr);
}

int wait_empty(int dirfd) {
  for (int i = 0; i < 5000; ++i) {  // up to ~5 s
    if (cgroup_is_empty(dirfd)) return 0;
    pause_briefly();
  }
  return -EBUSY;
}

}  // namespace

bool cgroup_is_empty(int dirfd) {
  // One byte says whether there is a first pid (a cgroup that cannot be read counts as
  // empty, as an empty list would).
  char first;
  return read_control(dirfd, "cgroup.procs", &first, 1) <= 0;
}

int kill_cgroup_tree(int dirfd, KillMethod method) {
  switch (method) {
    case KillMethod::kCgroupKill: {
      if (int rc = write_control(dirfd, "cgroup.kill", "1"); rc < 0) return rc;
      return wait_empty(dirfd);
    }
    case KillMethod::kFreezer: {
      // Freeze first so that nothing can fork between reading the list and the kill.
      if (write_control(dirfd, "freezer.state", "FROZEN") == 0) {
        char state[32] = {};
        for (int i = 0; i < 2000; ++i) {
          ssize_t n = read_control(dirfd, "freezer.state", state, sizeof state - 1);
          if (n > 0 && std::strncmp(state, "FROZEN", 6) == 0) break;
          pause_briefly();
        }
        for (pid_t pid : list_pids(dirfd)) kill(pid, SIGKILL);
        write_control(dirfd, "freezer.state", "THAWED");
        if (wait_empty(dirfd) == 0) return 0;
      }
      [[fallthrough]];
    }
    case KillMethod::kSignalLoop: {
      for (int round = 0; round < 5000; ++round) {
        auto pids = list_pids(dirfd);
        if (pids.empty()) return 0;
        for (pid_t pid : pids) kill(pid, SIGKILL);
        pause_briefly();
      }
      return -EBUSY;
    }
  }
  return -EINVAL;
}

}  // namespace sandboxd::runtime
