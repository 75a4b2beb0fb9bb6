// The seccomp filter of sandboxed commands, modelled on Docker's default profile: what
// a container never needs and an attacker wants (mounts, new namespaces, kernel
// modules, bpf, keyrings, clock setting, ...) fails with EPERM; foreign architectures
// are killed.
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
