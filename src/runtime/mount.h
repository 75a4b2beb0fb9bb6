// The sandbox's filesystem, built the way bubblewrap builds one: propagation private
// first, a fresh tmpfs root, read-only binds of the image, the container's four
// folders, a masked /proc, a minimal /dev, generated /etc files, then pivot_root and
// the old root detached.
#pragma once

#include "runtime/spec.h"

namespace sandboxd::runtime {

// The container's folders as detached mount trees (mount_template.h), or -1 each where
// they are bound by their host paths instead.
struct FolderTrees {
  int workspace = -1, uploads = -1, outputs = -1, skills = -1;
};

// Runs in sandboxd-init as PID 1 of the new PID namespace, inside a fresh mount
// namespace, with full privileges. Throws SyscallError naming the failed call.
void setup_filesystem(const Spec& spec, const FolderTrees& trees);

// sandboxd-init --mount-template SERVICE_DIR NEEDED...: a private copy of this mount
// namespace that keeps only "/", the host paths a sandbox reads (NEEDED: /usr, /etc,
// /dev, the image root, ...; their mounts, the ones below them and above them) and
// the virtual /proc and /sys, never a mount below SERVICE_DIR ("-": none); reported on
// fd 3 as 'o' and the namespace's descriptor (SCM_RIGHTS), or 'e'.
int run_mount_template(int argc, char** argv);

}  // namespace sandboxd::runtime
