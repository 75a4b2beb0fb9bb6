// The gvisor tier's command trees: each command the agent (PID 1 inside gVisor) starts
// lives in a cgroup of its own in gVisor's cgroupfs, so that a timeout or kill finds every
// process the command started, one that made a session of its own (setsid) or was
// re-parented to PID 1 (a double fork) included. The native tier does the same with host
// cgroups (runtime/cgroup_kill.h); these are the sentry's, and none of them is the host's.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

namespace sandboxd::runtime {

// Where the agent mounts gVisor's cgroupfs: a directory of the container's read-only
// root (the launcher makes it in the bundle).
inline constexpr const char* kCommandCgroups = "/.sandboxd/cgroup";

// Gives up CAP_SYS_ADMIN in every set of PID 1, for good: it was wanted for its own
// mounts inside gVisor alone. Throws SyscallError.
void give_up_sys_admin();

class CommandCgroups {
 public:
  // Mounts gVisor's cgroupfs (its pids controller, with no limit set: the sandbox's limits
  // are the host cgroups' around the whole of gVisor) at `mount_point`. The capability
  // the mount takes (CAP_SYS_ADMIN) is PID 1's to give up (give_up_sys_admin) once its
  // mounts are made, before it runs any command. Throws SyscallError; the agent then
  // kills by session only (available() is false).
  void mount(const std::string& mount_point);
  bool available() const { return !root_.empty(); }

  // Makes command `id`'s cgroup. Returns the path of its cgroup.procs, which the command's
  // child writes "0" to (join) before it gives up root; empty when there is none (no
  // cgroupfs, or the mkdir failed: `error` says why).
  std::string create(uint32_t id, std::string* error);
  // In the command's child, before it becomes the agent's uid: moves itself in, so that
  // everything it starts is born there. Returns 0 or errno.
  static int join(const std::string& procs_path);

  // SIGKILLs every process of command `id`'s cgroup until none is left (a process forking
  // meanwhile adds one; each round takes what is there). Returns the processes killed.
  int kill_all(uint32_t id);
  // The command has ended (its shell was reaped, or it was killed): its cgroup is removed
  // once no process is left in it (a background process may outlive the command).
  void ended(uint32_t id);
  // Removes the cgroups of ended commands that no process is left in.
  void remove_empty();
  // Command `id`'s cgroup is still there: a process of its tree may still run (false
  // without cgroupfs).
  bool holds(uint32_t id) const { return groups_.count(id) > 0; }

 private:
  std::string dir_of(uint32_t id) const { return root_ + "/c" + std::to_string(id); }

  std::string root_;                 // where cgroupfs is mounted; empty: not mounted
  std::map<uint32_t, bool> groups_;  // command id -> ended
};

}  // namespace sandboxd::runtime
