// The runtime: starts sandboxes over container directories. Owns the cgroup backend
// and the identity of this sandboxd instance (its cgroups are named after it, so a
// restarted server can find and remove what its predecessor left).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cgroup.h"
#include "runtime/launcher.h"
#include "runtime/sandbox.h"
#include "runtime/spec.h"
#include "runtime/user.h"

namespace sandboxd::runtime {

// How sandboxes are isolated (runtime.isolation), for every sandbox of the server.
enum class Isolation {
  kNative,  // Linux namespaces, cgroups and seccomp over the host's kernel
  kGvisor,  // every sandbox a runsc container: gVisor's kernel between it and the host's
};

struct GvisorOptions {
  std::string runsc_path;           // empty: runsc on PATH (/usr/sbin, /usr/bin, ...)
  std::string platform = "ptrace";  // runsc --platform: ptrace, systrap or kvm
  std::string state_dir;            // runsc --root and the bundles; empty: /run/sandboxd-gvisor/INSTANCE
};

struct RuntimeOptions {
  std::string init_path;             // empty: sandboxd-init next to this executable
  std::string instance = "default";  // [A-Za-z0-9_-]{1,64}
  uint32_t host_uid = 101000;        // what agent (1000) is on the host
  uint32_t host_gid = 101000;
  std::string image_root;  // empty: the host's /usr and friends
  CgroupOptions cgroups;   // .instance is set from `instance`
  std::chrono::milliseconds start_timeout{10'000};
  // Each sandbox's caps on per-user kernel counters (user.h); empty: default_userns_limits().
  std::vector<UsernsLimit> userns_limits;
  // The service's own directory (volumes, slots, skills): none of its mounts is ever in
  // the template sandboxes are made from (mount_template.h).
  std::string service_dir;
  // The folder of certificates every sandbox trusts beyond its system's (trust_bundle.h:
  // write_trust_folder made it), bound read-only into each; empty: none.
  std::string trust_dir;
  Isolation isolation = Isolation::kNative;
  GvisorOptions gvisor;  // with Isolation::kGvisor
};

struct SandboxOptions {
  std::string name;  // unique among running sandboxes: [A-Za-z0-9_-]{1,64}
  std::string workspace_dir, uploads_dir, outputs_dir, skills_dir;  // host paths
  CgroupLimits limits;
  uint64_t tmp_size_bytes = 64ull << 20;
  uint64_t home_size_bytes = 64ull << 20;
  uint64_t max_open_files = 0;
  std::vector<std::string> hosts_entries;
  std::vector<Spec::Listener> listeners;  // see Spec::listeners; Sandbox::take_listeners
  std::string nameserver;                 // see Spec::nameserver
  // The directories are slots: shared mount points on which the service binds a
  // container's folders later (see Spec::receive_mounts), then calls
  // Sandbox::attach_folders. They are named workspace, outputs (one parent) and
  // uploads, skills (another parent), as SandboxPool makes them.
  bool pre_started = false;
  // Receives the mounts the server makes later under its (shared) skills folder: the
  // skills of each request, bound there by the server while the request runs.
  bool receive_mounts = false;
  // A checkpoint folder (Runtime::checkpoint) the sandbox goes on from instead of starting
  // fresh: its processes run on where they were (the tiers that keep memory only). Its
  // folders, limits and listeners must be those it was checkpointed with.
  std::string restore_from;
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Starts a sandbox; returns once its PID 1 is ready. Throws SandboxError.
  asio::awaitable<std::shared_ptr<Sandbox>> start(asio::any_io_executor executor, SandboxOptions options);
  // Whether sandboxes of this runtime can be checkpointed (the gvisor tier).
  bool keeps_memory() const;
  // Whether every sandbox of this runtime is to start over slot folders
  // (SandboxOptions::pre_started), a cold one too: the gvisor tier, whose checkpoint
  // restores only into the mounts it was taken with, so one layout serves a sandbox
  // taken from the pool, one started for its container and one restored.
  bool starts_over_slots() const;
  // Saves a running sandbox's processes and memory into the empty folder `image_dir`,
  // ending it; a later start with SandboxOptions::restore_from = image_dir goes on from
  // there. Throws SandboxError when it cannot (the sandbox then runs on).
  asio::awaitable<void> checkpoint(std::shared_ptr<Sandbox> sandbox, std::string image_dir);
  // Stops every process of a running sandbox where it is, its memory kept in place (no
  // image: microseconds either way), and lets them go on; the tiers that keep memory
  // only. A paused sandbox can be checkpointed (Runtime::checkpoint lets it go first)
  // and stopped; nothing is to be run in it until it is resumed. Throw SandboxError.
  asio::awaitable<void> pause(std::shared_ptr<Sandbox> sandbox);
  asio::awaitable<void> resume(std::shared_ptr<Sandbox> sandbox);

  // Kills and removes every sandbox cgroup this instance left behind (a crashed
  // predecessor's), and unmounts every volume still mounted under `volumes_root` (when
  // given). Returns how many sandboxes were found.
  size_t cleanup_stale(const std::string& volumes_root = "");

  CgroupBackend& cgroups() { return *cgroups_; }
  const RuntimeOptions& options() const { return options_; }

  static bool valid_name(const std::string& name);

 private:
  RuntimeOptions options_;
  std::unique_ptr<CgroupBackend> cgroups_;
  std::unique_ptr<SandboxLauncher> launcher_;  // the tier's (launcher.h)
};

// The sandboxd-init next to the running executable, else in ../lib/sandboxd/ (installed).
std::string default_init_path();

}  // namespace sandboxd::runtime
