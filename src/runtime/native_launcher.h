// The native tier: sandboxd-init builds the sandbox from Linux namespaces (a user
// namespace per sandbox, a mount namespace from the template, pid/net/ipc/uts/cgroup)
// over the host's kernel, with the seccomp filter on every command, and is its PID 1.
#pragma once

#include <string>

#include "runtime/cgroup.h"
#include "runtime/launcher.h"

namespace sandboxd::runtime {

struct RuntimeOptions;

class NativeLauncher : public SandboxLauncher {
 public:
  // Fails (throws) on a host where the sandboxes' user namespaces cannot be made.
  NativeLauncher(const RuntimeOptions& options, CgroupBackend& cgroups);
  ~NativeLauncher() override;

  asio::awaitable<std::shared_ptr<Sandbox>> start(asio::any_io_executor executor,
                                                  const SandboxOptions& options) override;

 private:
  const RuntimeOptions& options_;
  CgroupBackend& cgroups_;
  std::string seccomp_bpf_;     // compiled once, sent to every sandbox
  int mount_template_fd_ = -1;  // mount_template.h; -1: sandboxes copy this process's namespace
};

}  // namespace sandboxd::runtime
