#include "runtime/host_capacity.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

namespace sandboxd::runtime {
namespace {

uint64_t read_number(const char* path) {
  std::ifstream in(path);
  uint64_t value = 0;
  in >> value;
  return value;
}

uint64_t mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    uint64_t kib = 0;
    in >> kib;
    if (key == "MemTotal:") return kib * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

}  // namespace

HostCapacity read_host_capacity() {
  HostCapacity host;
  uint64_t pid_max = read_number("/proc/sys/kernel/pid_max");
  uint64_t threads_max = read_number("/proc/sys/kernel/threads-max");
  host.tasks = pid_max && threads_max ? std::min(pid_max, threads_max) : std::max(pid_max, threads_max);
  if (host.tasks == 0) host.tasks = 32768;
  host.memory_bytes = mem_total_bytes();
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  host.cpu_millis = static_cast<uint64_t>(cpus > 0 ? cpus : 1) * 1000;
  host.file_max = read_number("/proc/sys/fs/file-max");
  return host;
}

uint64_t default_sandboxes_pids(const HostCapacity& host) { return std::max<uint64_t>(host.tasks / 2, 64); }

uint64_t default_sandboxes_memory(const HostCapacity& host) { return host.memory_bytes / 10 * 8; }

uint64_t default_sandboxes_cpu_millis(const HostCapacity& host) {
  return std::max<uint64_t>(host.cpu_millis > 500 ? host.cpu_millis - 500 : 500, 500);
}

uint64_t default_open_files_per_process(const HostCapacity& host, uint64_t pids_per_sandbox) {
  if (host.file_max == 0 || pids_per_sandbox == 0) return 1024;
  return std::clamp<uint64_t>(host.file_max / 4 / pids_per_sandbox, 64, 4096);
}

std::vector<UsernsLimit> default_userns_limits() {
  auto share = [](const char* host_file, uint64_t fallback) {
    uint64_t host = read_number(host_file);
    return std::max<uint64_t>((host ? host : fallback) / 16, 1);
  };
  std::vector<UsernsLimit> limits{
      {"max_inotify_instances", share("/proc/sys/fs/inotify/max_user_instances", 128)},
      {"max_inotify_watches", share("/proc/sys/fs/inotify/max_user_watches", 8192)},
      {"max_fanotify_groups", share("/proc/sys/fs/fanotify/max_user_groups", 128)},
      {"max_fanotify_marks", share("/proc/sys/fs/fanotify/max_user_marks", 8192)},
  };
  for (const char* ns :
       {"max_user_namespaces", "max_mnt_namespaces", "max_pid_namespaces", "max_net_namespaces",
        "max_ipc_namespaces", "max_uts_namespaces", "max_cgroup_namespaces", "max_time_namespaces"})
    limits.push_back({ns, 0});
  return limits;
}

bool set_oom_score_adj(int pid, int value) {
  std::string path = pid > 0 ? "/proc/" + std::to_string(pid) + "/oom_score_adj" : "/proc/self/oom_score_adj";
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string text = std::to_string(value);
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

}  // namespace sandboxd::runtime
