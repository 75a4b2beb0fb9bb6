// cgroups for sandboxes, v1 (a hierarchy per controller) and v2 (unified), detected at
// start. Layout: <root>/sandboxd/<instance>/<sandbox>/e<N>, where <instance> is tied
// to the data directory, so a new server finds and removes what a killed predecessor
// left, and never touches another instance's sandboxes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/spec.h"

namespace sandboxd::runtime {

struct CgroupLimits {
  uint64_t memory_bytes = 0;  // 0 = none; swap included (memsw / swap.max = 0)
  uint64_t pids = 512;        // 0 = none
  uint64_t cpu_millis = 0;    // 0 = none; 1000 = one CPU
};

// What sandboxd-init needs to know about a sandbox's cgroups.
struct SandboxCgroups {
  std::vector<std::string> join_dirs;  // PID 1 joins each
  std::string exec_parent;             // per-execution children are made here
  KillMethod kill_method = KillMethod::kSignalLoop;
};

class CgroupBackend {
 public:
  virtual ~CgroupBackend() = default;
  virtual std::string version() const = 0;  // "v1" or "v2"

  // Makes the sandbox's cgroups and applies the limits. Throws SyscallError.
  virtual SandboxCgroups create(const std::string& sandbox, const CgroupLimits& limits) = 0;
  // Kills anything left and removes the sandbox's cgroups, children first.
  virtual void destroy(const std::string& sandbox) = 0;
  // Thaws every frozen cgroup of the sandbox, top down; returns how many were frozen.
  // A process frozen by v1's freezer does not act on SIGKILL, so one that PID 1 froze to
  // kill a command's tree, and was itself killed before it thawed, would never exit, and
  // neither would PID 1 (the end of a PID namespace waits for every process in it).
  // (v2's freezer lets a killed process go.)
  virtual size_t thaw(const std::string& sandbox) = 0;
  // Freezes the sandbox's cgroup (v1: freezer.state FROZEN, v2: cgroup.freeze 1): each
  // of its processes stops where it is, its memory kept, until thaw(). Returns at once
  // (the kernel completes the freeze). False when the host has no freezer for it.
  virtual bool freeze(const std::string& sandbox) = 0;
  // Removes every sandbox cgroup of this instance (start-up cleanup). Returns how many
  // sandbox cgroups were found.
  virtual size_t destroy_all() = 0;
  // Removes this instance's own (empty) cgroup folders; best effort.
  virtual void remove_instance() = 0;
  // Memory charged to the sandbox, in bytes (0 when not measurable).
  virtual uint64_t memory_usage(const std::string& sandbox) const = 0;
  // Number of OOM kills in the sandbox so far (when the kernel reports it).
  virtual uint64_t oom_kills(const std::string& sandbox) const = 0;
  // CPU time the sandbox's processes have used so far, in microseconds (v2: cpu.stat's
  // usage_usec; v1: cpuacct.usage when the cpu hierarchy carries it and the sandbox
  // joined it, else its cgroup's processes' times from /proc); nullopt when unknown.
  virtual std::optional<uint64_t> cpu_usage_usec(const std::string& sandbox) const = 0;
};

struct CgroupOptions {
  std::string mode = "auto";  // auto | v1 | v2
  // v2: the unified hierarchy's mount point (tests point it at a scratch cgroup2 mount).
  std::string v2_root = "/sys/fs/cgroup";
  // v1: the directory holding one mount per controller.
  std::string v1_root = "/sys/fs/cgroup";
  std::string instance;  // [A-Za-z0-9_-]+
  // Limits on all of this instance's sandboxes together, set on the instance's cgroup
  // (0 = none): what one owner's sandboxes can take of the host's process table, memory
  // and CPU. (Each sandbox's own limits sit below them.)
  CgroupLimits total{0, 0, 0};
  // v2: the controllers handed down to the sandboxes (tests of the delegation use a
  // controller that a v1 host leaves to the unified hierarchy, such as hugetlb).
  std::vector<std::string> v2_controllers{"memory", "pids", "cpu"};
};

std::unique_ptr<CgroupBackend> make_cgroup_v1(const CgroupOptions& options);
std::unique_ptr<CgroupBackend> make_cgroup_v2(const CgroupOptions& options);
// Picks v2 when v2_root is a cgroup2 mount with controllers, v1 otherwise.
std::unique_ptr<CgroupBackend> detect_cgroups(const CgroupOptions& options);

namespace cgroupfs {
// Small helpers shared by both backends (host paths).
void write_file(const std::string& path, const std::string& value);
bool try_write_file(const std::string& path, const std::string& value);
std::string read_file(const std::string& path);
void make_dir(const std::string& path);
bool exists(const std::string& path);
// Names of the child cgroups (sub-directories) of dir.
std::vector<std::string> list_children(const std::string& dir);
// Kills every process below `dir` and removes it and its children, deepest first.
void remove_tree(const std::string& dir, KillMethod method);
// v1's freezer: writes THAWED to `dir` and each cgroup below it that is not, parents
// before children (a child stays frozen while its parent is). Returns how many were not.
size_t thaw_tree(const std::string& dir);
}  // namespace cgroupfs

}  // namespace sandboxd::runtime
