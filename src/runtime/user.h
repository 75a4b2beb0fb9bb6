// The user namespace and credentials of sandboxed commands: uid/gid 1000 ("agent")
// inside, an unprivileged host uid outside, no capabilities at all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sandboxd::runtime {

inline constexpr uint32_t kAgentUid = 1000;
inline constexpr uint32_t kAgentGid = 1000;

// Server side: makes a user namespace for one sandbox's commands, in which only
// uid/gid 1000 exist, mapped to the given host ids. A short-lived `sandboxd-init
// --userns-holder` creates it (the server itself never forks); returns an fd for it
// (O_CLOEXEC). The namespace is created by the unprivileged host uid, not by root: the
// kernel charges every per-user counter used inside (inotify instances and watches,
// user namespaces, message queues, processes) up the namespace chain to the
// namespace's owner, so a sandbox can never exhaust root's. Each `limits` entry is a
// /proc/sys/user/<name> value set inside the namespace: the sandbox's own cap on that
// counter. Throws SyscallError.
struct UsernsLimit {
  std::string name;  // e.g. max_inotify_instances
  uint64_t value;
};
int create_agent_userns(const std::string& init_path, uint32_t host_uid, uint32_t host_gid,
                        const std::vector<UsernsLimit>& limits = {});

// sandboxd-init --userns-holder UID GID [NAME=VALUE...]: become UID/GID (keeping the
// capabilities, so that this works where unprivileged user namespaces are off), unshare
// the user namespace, set its limits, say so on fd 3, wait for fd 3 to close.
int run_userns_holder(int argc, char** argv);

// The highest capability number the kernel knows (/proc/sys/kernel/cap_last_cap).
int read_last_cap();

}  // namespace sandboxd::runtime
