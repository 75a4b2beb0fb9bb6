// The seccomp filter of sandboxed commands. It is a deny-list (default allow), unlike
// Docker's default profile, which is an allow-list (default ERRNO) of about 350 calls:
// the syscalls a sandbox never needs and an attacker wants (mounts, new namespaces,
// kernel modules, bpf, io_uring, keyrings, clock setting, terminal input injection,
// ...) fail with EPERM (clone3, whose flags seccomp cannot read, with ENOSYS so that libc
// falls back to clone), and foreign architectures are killed. A deny-list because
// sandboxes run arbitrary user programs on whatever kernel the host has: an allow-list
// would break new but harmless syscalls that newer libcs and runtimes use, while the
// dangerous surface is small and already behind the user namespace and the dropped
// capabilities; this filter is the second wall for that surface, not the only one.
#pragma once

#include <linux/filter.h>

#include <vector>

namespace sandboxd::runtime {

struct SeccompProgram {
  std::vector<sock_filter> instructions;
};

// Builds the filter (once, in the server; it reaches each sandboxd-init in its spec).
// Throws SyscallError.
SeccompProgram build_seccomp_program();

// In a forked child, last before execve: no_new_privs, then the filter.
// Returns 0 or -errno with *failed_step set. Async-signal-safe.
int apply_seccomp(const SeccompProgram& program, const char** failed_step);

}  // namespace sandboxd::runtime
