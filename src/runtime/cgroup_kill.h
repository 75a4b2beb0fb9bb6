// Killing the whole process tree of one cgroup — setsid'd and double-forked
// descendants included, nothing outside it — shared by sandboxd-init (per-execution
// timeouts) and the server (cleaning up after a crashed predecessor).
#pragma once

#include "runtime/spec.h"

namespace sandboxd::runtime {

// Kills every process in the cgroup open at dirfd and waits (bounded) until it is empty.
// Returns 0, or -errno when the cgroup could not be emptied.
int kill_cgroup_tree(int dirfd, KillMethod method);

// True when no process is left in the cgroup open at dirfd.
bool cgroup_is_empty(int dirfd);

}  // namespace sandboxd::runtime
