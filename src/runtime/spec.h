// What sandboxd-init needs to build one sandbox. The server fills it in, encodes it and
// sends it as the first control message; the init decodes it before touching anything.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sandboxd::runtime {

// How the per-execution cgroup's process tree is killed.
enum class KillMethod { kCgroupKill /* v2 cgroup.kill */, kFreezer /* v1 freezer */, kSignalLoop };

// /etc names a sandbox never takes from its image: generated for each sandbox (passwd,
// hosts, ...) or hidden (shadow, ...). The image store gives every image a regular file
// at each of them, so that an image's /etc can be bound whole with these bound over it.
inline constexpr const char* kGeneratedEtc[] = {"passwd",      "group",         "hosts",  "hostname",
                                                "resolv.conf", "nsswitch.conf", "shadow", "gshadow",
                                                "subuid",      "subgid"};

struct Spec {
  // Image: empty = the host's /usr, /bin, /sbin, /lib* and an allow-list of /etc.
  std::string image_root;
  // Container directories on the host (bind-mounted into the sandbox).
  std::string workspace_dir;  // -> /home/agent/workspace (rw)
  std::string uploads_dir;    // -> /mnt/user-data/uploads (ro)
  std::string outputs_dir;    // -> /mnt/user-data/outputs (rw)
  std::string skills_dir;     // -> /mnt/skills (ro); empty = an empty read-only folder

  // Host ids that uid/gid 1000 ("agent") map to through the sandbox's user namespace.
  uint32_t host_uid = 0;
  uint32_t host_gid = 0;

  uint64_t tmp_size_bytes = 64ull << 20;   // /tmp tmpfs
  uint64_t home_size_bytes = 64ull << 20;  // /home/agent tmpfs (outside the workspace)
  uint64_t shm_size_bytes = 64ull << 20;   // /dev/shm
  uint64_t max_open_files = 0;             // RLIMIT_NOFILE; 0 = inherit
  std::string hostname = "sandbox";

  // cgroup directories (host paths) PID 1 joins before unsharing its cgroup namespace:
  // one per hierarchy (v1) or one (v2).
  std::vector<std::string> cgroup_dirs;
  // The directory under which per-execution child cgroups are made, and how to kill one.
  std::string exec_cgroup_parent;
  KillMethod kill_method = KillMethod::kSignalLoop;

  // The seccomp filter of every command, as BPF instructions (struct sock_filter[]),
  // compiled once by the server.
  std::string seccomp_bpf;

  // Receive mounts the server later makes on the container directories' host paths
  // (slave propagation instead of private): how a pre-started sandbox is given its
  // container when it is claimed.
  bool receive_mounts = false;

  // The spec message carries, after the user namespace, the mount namespace sandboxes
  // are made from and the container's folders as detached mount trees (open_tree
  // clones, in the order workspace, uploads, outputs, then skills when skills_dir is
  // set), so that the sandbox's namespace is never a copy of the host's, whatever it
  // holds (mount_template.h). Without them (a kernel without open_tree) the launcher
  // copies the server's namespace and binds the folders by their host paths.
  bool mount_trees = false;

  // Extra /etc/hosts lines ("ADDRESS NAME"): how the API and allow-listed services are
  // found by name.
  std::vector<std::string> hosts_entries;

  // TCP listeners PID 1 opens inside the sandbox's network namespace (on its loopback)
  // and hands to the server with the ready message: the only way out of the sandbox.
  struct Listener {
    std::string address;  // an IPv4 loopback address, e.g. 127.0.2.1
    uint16_t port = 0;
  };
  std::vector<Listener> listeners;

  // The DNS server the sandbox's resolver asks after /etc/hosts (an address on its own
  // loopback, answered by the server), or empty: /etc/hosts only, no resolver.
  std::string nameserver;

  // The folder of certificates the sandbox trusts beyond its system's (a host path,
  // runtime/trust_bundle.h), bound read-only at kTrustDir with its bundle over the
  // system's; empty: none.
  std::string trust_dir;
};

// At most this many listeners per sandbox (one control message carries their fds).
inline constexpr size_t kMaxListeners = 32;

std::string encode(const Spec& spec);
// Returns an empty string on success, otherwise what is wrong with the payload.
std::string decode(std::string_view payload, Spec& out);

}  // namespace sandboxd::runtime
