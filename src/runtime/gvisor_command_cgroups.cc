#include "runtime/gvisor_command_cgroups.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "runtime/syscall_error.h"

namespace sandboxd::runtime {
namespace {

// The pids in a cgroup.procs file (empty when it cannot be read: the cgroup is gone).
std::vector<pid_t> read_procs(const std::string& path) {
  std::vector<pid_t> pids;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return pids;
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  const char* at = text.c_str();
  while (*at) {
    char* end = nullptr;
    const long pid = std::strtol(at, &end, 10);
    if (end == at) {
      ++at;
      continue;
    }
    if (pid > 1) pids.push_back(static_cast<pid_t>(pid));
    at = end;
  }
  return pids;
}

// A zombie is dead already: PID 1 reaps it (or its parent does); it cannot fork again.
bool is_zombie(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;  // gone
  char stat[512];
  const ssize_t n = read(fd, stat, sizeof stat - 1);
  close(fd);
  if (n <= 0) return true;
  stat[n] = '\0';
  const char* rest = std::strrchr(stat, ')');
  char state = 0;
  if (!rest || std::sscanf(rest + 1, " %c", &state) != 1) return false;
  return state == 'Z' || state == 'X';
}

}  // namespace

void give_up_sys_admin() {
  if (prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) != 0 && errno != EINVAL)
    throw SyscallError("prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN)", errno);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) throw SyscallError("capget()", errno);
  const unsigned word = CAP_SYS_ADMIN / 32;
  const uint32_t bit = 1u << (CAP_SYS_ADMIN % 32);
  data[word].effective &= ~bit;
  data[word].permitted &= ~bit;
  data[word].inheritable &= ~bit;
  if (syscall(SYS_capset, &header, data) != 0) throw SyscallError("capset(without CAP_SYS_ADMIN)", errno);
}

void CommandCgroups::mount(const std::string& mount_point) {
  // CAP_SYS_ADMIN here is gVisor's, inside the sentry: it lets PID 1 mount the sentry's
  // own cgroupfs, a table of the sentry's tasks, and reaches no host kernel interface
  // (the sentry makes no host mount for it, and the host cgroups around gVisor are the
  // launcher's, out of the sandbox's sight). PID 1 gives it up once its mounts are made,
  // before it runs any command; commands never had it (each drops its whole bounding set).
  if (::mount("none", mount_point.c_str(), "cgroup", MS_NOSUID | MS_NODEV | MS_NOEXEC, "pids") != 0)
    throw SyscallError("mount(cgroup, " + mount_point + ", pids)", errno);
  // Only root (PID 1 and a command's child before it becomes the agent's uid) makes a
  // cgroup or moves a process: a command's processes (uid 1000, no capability) can read
  // which process is where and change nothing, so none can leave its command's cgroup.
  if (chmod(mount_point.c_str(), 0755) != 0) throw SyscallError("chmod(" + mount_point + ", 0755)", errno);
  root_ = mount_point;
}

std::string CommandCgroups::create(uint32_t id, std::string* error) {
  if (root_.empty()) return "";
  const std::string dir = dir_of(id);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    *error = describe_errno("mkdir(" + dir + ")", errno);
    return "";
  }
  groups_[id] = false;
  return dir + "/cgroup.procs";
}

int CommandCgroups::join(const std::string& procs_path) {
  const int fd = open(procs_path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t n = write(fd, "0", 1);
  const int err = errno;
  close(fd);
  return n == 1 ? 0 : err;
}

int CommandCgroups::kill_all(uint32_t id) {
  if (groups_.find(id) == groups_.end()) return 0;
  const std::string procs = dir_of(id) + "/cgroup.procs";
  // A SIGKILLed process can start no other (a fork with a fatal signal pending fails),
  // so once a round finds only processes killed before, none is left to start one.
  std::set<pid_t> killed;
  for (int round = 0; round < 1000; ++round) {
    bool new_ones = false;
    for (pid_t pid : read_procs(procs)) {
      if (killed.count(pid) || is_zombie(pid)) continue;
      kill(pid, SIGKILL);
      killed.insert(pid);
      new_ones = true;
    }
    if (!new_ones) break;
  }
  return static_cast<int>(killed.size());
}

void CommandCgroups::ended(uint32_t id) {
  auto it = groups_.find(id);
  if (it == groups_.end()) return;
  it->second = true;
  if (::rmdir(dir_of(id).c_str()) == 0 || errno == ENOENT) groups_.erase(it);
}

void CommandCgroups::remove_empty() {
  for (auto it = groups_.begin(); it != groups_.end();) {
    if (it->second && (::rmdir(dir_of(it->first).c_str()) == 0 || errno == ENOENT))
      it = groups_.erase(it);
    else
      ++it;
  }
}

}  // namespace sandboxd::runtime
