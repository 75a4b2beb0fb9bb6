// The mount namespace every sandbox is made from, and the container folders it is
// given as detached mount trees.
//
// unshare(CLONE_NEWNS) copies every mount of the caller's namespace, and the sandbox
// then walks them all twice more (making them slaves, detaching the old root). The
// server's namespace holds a few mounts per running sandbox (its volume, its slot's
// binds, its skills), so with 1,000 sandboxes each new one copied and tore down some
// 8,000 mounts: a cold start grew from 13 ms to 94 ms. Instead, the launcher enters a
// template namespace taken once at start-up and unshares from that. The template is
// private (nothing mounted later reaches it) and holds only what a sandbox reads from
// the host (mount.h run_mount_template): never a volume, so it pins no loop device,
// ours or another service's. The container's folders come as open_tree(2) clones the
// server makes of them, attached inside the sandbox with move_mount(2). A clone of a
// shared mount is a peer of it, so a pre-started sandbox (a slave of it) still
// receives the container binds the server makes on its slot.
#pragma once

#include <string>
#include <vector>

namespace sandboxd::runtime {

// Runs `init_path --mount-template SERVICE_DIR NEEDED...` (mount.h) and returns the
// namespace it made (an fd of its /proc/self/ns/mnt), or -1 with `error` set when this host cannot (a kernel
// without open_tree, a container engine that forbids it): the launcher then copies
// the server's namespace as before.
int create_mount_template(const std::string& init_path, const std::string& service_dir,
                          const std::vector<std::string>& needed, std::string& error);

// The container's folders as detached trees for the spec message (spec.h
// mount_trees), in its order; an empty path is skipped. Closes what it opened and
// throws SyscallError naming the folder when one cannot be cloned.
std::vector<int> clone_folders(const std::vector<const std::string*>& folders);

// Whether this process may clone folders (open_tree), which the helper's success does
// not prove: a seccomp profile or a tracer (valgrind) may deny the server alone. False
// with `error` set: the server then copies its namespace as on a host without it.
bool can_clone_folders(std::string& error);

}  // namespace sandboxd::runtime
