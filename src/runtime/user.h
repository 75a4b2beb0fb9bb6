// The user namespace and credentials of sandboxed commands: uid/gid 1000 ("agent")
// inside, an unprivileged host uid outside, no capabilities at all.
#pragma once

#include <cstdint>
#include <string>

namespace sandboxd::runtime {

inline constexpr uint32_t kAgentUid = 1000;
inline constexpr uint32_t kAgentGid = 1000;

// Server side: makes the user namespace every sandbox's commands enter, in which only
// uid/gid 1000 exist, mapped to the given host ids. A short-lived `sandboxd-init
// --userns-holder` creates it (the server itself never forks); returns an fd for it
// (O_CLOEXEC). Sandboxes share it: they share the host uid anyway, and it owns nothing.
// Throws SyscallError.
int create_agent_userns(const std::string& init_path, uint32_t host_uid, uint32_t host_gid);

// sandboxd-init --userns-holder: unshare the user namespace, say so on fd 3, wait for
// fd 3 to close.
int run_userns_holder();

// In a freshly forked child (async-signal-safe): enter the namespace, become agent,
// drop every capability from every set. Returns 0, or -errno with *failed_step set.
int become_agent(int userns_fd, int last_cap, const char** failed_step);

// The highest capability number the kernel knows (/proc/sys/kernel/cap_last_cap).
int read_last_cap();

}  // namespace sandboxd::runtime
