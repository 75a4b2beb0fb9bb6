// What the host has of each table that all sandboxes share (process ids, memory, CPU,
// open files), and the share of it that sandboxes get by default: enough that one
// owner's sandboxes cannot take what the server and the rest of the host need.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/user.h"

namespace sandboxd::runtime {

struct HostCapacity {
  uint64_t tasks = 0;         // min(kernel.pid_max, kernel.threads-max)
  uint64_t memory_bytes = 0;  // MemTotal
  uint64_t cpu_millis = 0;    // online CPUs x 1000
  uint64_t file_max = 0;      // fs.file-max
};

HostCapacity read_host_capacity();

// The defaults for the limits on all sandboxes together (runtime.sandboxes*):
// half the tasks, 80 % of the memory, every CPU but half a core (at least half a core),
// and for each sandbox process an open-file limit so that a sandbox at its pids limit
// holds at most a quarter of fs.file-max (at least 64, at most 4096).
uint64_t default_sandboxes_pids(const HostCapacity& host);
uint64_t default_sandboxes_memory(const HostCapacity& host);
uint64_t default_sandboxes_cpu_millis(const HostCapacity& host);
uint64_t default_open_files_per_process(const HostCapacity& host, uint64_t pids_per_sandbox);

// Each sandbox's own caps on the per-user kernel counters (set in its user namespace,
// see user.h): a sixteenth of the host's per-user inotify limits (at least 1), no
// namespaces of any kind (seccomp refuses them too), a sixteenth of fanotify's.
std::vector<UsernsLimit> default_userns_limits();

// oom_score_adj of the server (it should be the last thing the kernel kills) and of
// every sandbox process (the first).
inline constexpr int kServerOomScoreAdj = -900;
inline constexpr int kSandboxOomScoreAdj = 1000;
// Writes /proc/<pid>/oom_score_adj (pid 0: this process); best effort, returns success.
bool set_oom_score_adj(int pid, int value);

}  // namespace sandboxd::runtime
