// The sandbox's filesystem, built the way bubblewrap builds one: propagation private
// first, a fresh tmpfs root, read-only binds of the image, the container's four
// folders, a masked /proc, a minimal /dev, generated /etc files, then pivot_root and
// the old root detached.
#pragma once

#include <optional>
#include <string>
#include <vector>

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

// The mounts of this process's mount namespace (/proc/self/mountinfo): each one's mount
// point (unescaped) and source; nullopt when it cannot be read.
struct MountEntry {
  std::string point, source;
};
std::optional<std::vector<MountEntry>> read_mounts();

// In a mount namespace copied from the server's: detaches (MNT_DETACH, deepest first)
// every mount that neither holds one of `needed` (an ancestor) nor is part of one (at
// or below it) and is the service's own (strictly below SERVICE_DIR; "": none) or a
// loop device's (a volume of another server on this host). A copy of a container's
// volume mount kept in such a namespace keeps its file system alive after its server
// unmounts it, so that the next mount of the same image (another loop device) is a
// second file system over the same file: what one writes the other never sees, and
// overwrites. Returns false when the mounts cannot be read.
bool detach_volume_mounts(const std::string& service_dir, const std::vector<std::string>& needed);

}  // namespace sandboxd::runtime
