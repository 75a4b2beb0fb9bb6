// The sandbox's filesystem, built the way bubblewrap builds one: propagation private
// first, a fresh tmpfs root, read-only binds of the image, the container's four
// folders, a masked /proc, a minimal /dev, generated /etc files, then pivot_root and
// the old root detached.
#pragma once

#include "runtime/spec.h"

namespace sandboxd::runtime {

// Runs in sandboxd-init as PID 1 of the new PID namespace, inside a fresh mount
// namespace, with full privileges. Throws SyscallError naming the failed call.
void setup_filesystem(const Spec& spec);

}  // namespace sandboxd::runtime
