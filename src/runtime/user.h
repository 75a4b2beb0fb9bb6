// The user namespace and credentials of sandboxed commands: uid/gid 1000 ("agent")
// inside, an unprivileged host uid outside, no capabilities at all.
#pragma once

#include <cstdint>

namespace sandboxd::runtime {

inline constexpr uint32_t kAgentUid = 1000;
inline constexpr uint32_t kAgentGid = 1000;

// Creates a user namespace in which only uid/gid 1000 exist, mapped to the given host
// ids, and returns an fd for it (O_CLOEXEC). Throws SyscallError.
int create_agent_userns(uint32_t host_uid, uint32_t host_gid);

// In a freshly forked child (async-signal-safe): enter the namespace, become agent,
// drop every capability from every set. Returns 0, or -errno with *failed_step set.
int become_agent(int userns_fd, int last_cap, const char** failed_step);

// The highest capability number the kernel knows (/proc/sys/kernel/cap_last_cap).
int read_last_cap();

}  // namespace sandboxd::runtime
