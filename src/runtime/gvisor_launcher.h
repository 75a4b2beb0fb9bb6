// The gvisor tier: every sandbox is a runsc container, so that what runs in it meets
// gVisor's kernel (the sentry), never the host's. The bundle (config.json) gives the
// container the native tier's layout: the host's (or the image's) read-only system, a
// generated /etc, /tmp and the home as size-limited tmpfs, the container's folders at
// their places (over slots, SandboxOptions::pre_started: the slots' two parents bound
// whole, and PID 1 binds each folder onto its place inside), and sandboxd-init as PID 1
// (the container's only process with capabilities, which it drops for every command:
// uid 1000, none left). runsc, its sentry and its gofer run in the sandbox's cgroups,
// whose limits thus hold for all of it.
#pragma once

#include <string>
#include <vector>

#include "runtime/cgroup.h"
#include "runtime/launcher.h"

namespace sandboxd::runtime {

struct RuntimeOptions;

// What the sentry and gofer take beyond the sandbox's own processes, added to the
// sandbox's memory limit so that the limit is the processes' (docs/limits.md).
inline constexpr uint64_t kGvisorMemoryOverhead = 96ull << 20;
// Likewise the host tasks of runsc, the sentry's and the gofer's threads, added to the
// pids limit on the host; the sandbox's own limit is RLIMIT_NPROC inside gVisor. An idle
// sandbox held about 200 host tasks with Debian's runsc (20221219, ptrace platform).
inline constexpr uint64_t kGvisorTaskOverhead = 384;
// And each process inside costs host tasks of its own (on the ptrace platform its stub
// process and the sentry threads that trace its tasks; about 20 each were measured): the
// host cgroup allows this many per process of the sandbox's limit on top, so that a fork
// bomb inside meets RLIMIT_NPROC (EAGAIN) before the host's limit stops the sentry from
// making a thread, which ends the whole sandbox.
inline constexpr uint64_t kGvisorHostTasksPerTask = 24;

class GvisorLauncher : public SandboxLauncher {
 public:
  // Throws std::runtime_error when runsc is not installed or its state folder cannot be made.
  GvisorLauncher(const RuntimeOptions& options, CgroupBackend& cgroups);
  // Leaves no empty state folder behind (one with sandboxes in it stays).
  ~GvisorLauncher() override;

  asio::awaitable<std::shared_ptr<Sandbox>> start(asio::any_io_executor executor,
                                                  const SandboxOptions& options) override;
  // Removes the state and bundles runsc containers of a killed predecessor left.
  void cleanup_stale() override;
  bool keeps_memory() const override { return true; }
  bool starts_over_slots() const override { return true; }
  // `runsc checkpoint` (run in runsc's own namespaces: sandboxd-init --gvisor-enter),
  // which ends the sandbox once its state is saved.
  asio::awaitable<void> checkpoint(std::shared_ptr<Sandbox> sandbox, std::string image_dir) override;
  // The sandbox's host cgroup frozen and thawed: runsc, its sentry and its gofer (all in
  // it) stop where they are, their memory kept, in microseconds where `runsc pause` and
  // `runsc resume` take tens of milliseconds each (a runsc process, its urpc call). A
  // checkpoint thaws it first.
  asio::awaitable<void> pause(std::shared_ptr<Sandbox> sandbox) override;
  asio::awaitable<void> resume(std::shared_ptr<Sandbox> sandbox) override;

  const std::string& runsc_path() const { return runsc_; }

 private:
  // Writes the sandbox's bundle (its root skeleton and config.json); returns its folder
  // and the host paths it binds in.
  struct Bundle {
    std::string folder;
    std::vector<std::string> sources;
  };
  Bundle write_bundle(const SandboxOptions& options) const;
  // Removes a stopped sandbox's bundle and what runsc keeps of it.
  void remove_leftovers(const std::string& name) const;

  const RuntimeOptions& options_;
  CgroupBackend& cgroups_;
  std::string runsc_;
  std::string preload_;    // sandboxd-gvisor-preload.so (runtime/gvisor_preload.cc); empty: none found
  std::string state_dir_;  // runsc --root is state_dir_/runsc, bundles are in state_dir_/bundles
};

// Removes a stopped sandbox's bundle and what runsc kept of it under `state_dir`.
void remove_gvisor_leftovers(const std::string& state_dir, const std::string& name);

// The runsc on PATH (or `configured` when set and executable); empty when none.
std::string find_runsc(const std::string& configured = "");

}  // namespace sandboxd::runtime
