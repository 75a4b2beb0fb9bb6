#include "runtime/runtime.h"

#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/use_awaitable.hpp>
#include <climits>
#include <cstdio>

#include "runtime/gvisor_launcher.h"
#include "runtime/host_capacity.h"
#include "runtime/mount_template.h"
#include "runtime/native_launcher.h"
#include "runtime/seccomp.h"
#include "runtime/spawn.h"
#include "runtime/spec.h"
#include "runtime/syscall_error.h"
#include "runtime/user.h"
#include "runtime/userns.h"
#include "runtime/volume.h"

namespace sandboxd::runtime {

std::string default_init_path() {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "sandboxd-init";
  self[n] = '\0';
  std::string dir = self;
  dir = dir.substr(0, dir.rfind('/') + 1);
  // The build tree has it next to sandboxd; the Debian package in /usr/lib/sandboxd
  // (a helper, not a command on PATH) beside /usr/bin.
  std::string installed = dir + "../lib/sandboxd/sandboxd-init";
  if (access((dir + "sandboxd-init").c_str(), X_OK) != 0 && access(installed.c_str(), X_OK) == 0)
    return installed;
  return dir + "sandboxd-init";
}

bool Runtime::valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return true;
}

Runtime::Runtime(RuntimeOptions options) : options_(std::move(options)) {
  if (!valid_name(options_.instance))
    throw std::invalid_argument("runtime instance name must be 1-64 of [A-Za-z0-9_-]");
  if (options_.host_uid == 0 || options_.host_gid == 0)
    throw std::invalid_argument("the sandbox's host uid/gid must not be 0");
  if (options_.init_path.empty()) options_.init_path = default_init_path();
  if (access(options_.init_path.c_str(), X_OK) != 0)
    throw SyscallError("access(" + options_.init_path + ", X_OK)", errno);
  options_.cgroups.instance = options_.instance;
  cgroups_ = detect_cgroups(options_.cgroups);
  if (options_.userns_limits.empty()) options_.userns_limits = default_userns_limits();
  // The tier, chosen once: the one place it is looked at (launcher.h).
  if (options_.isolation == Isolation::kGvisor)
    launcher_ = std::make_unique<GvisorLauncher>(options_, *cgroups_);
  else
    launcher_ = std::make_unique<NativeLauncher>(options_, *cgroups_);
  // Every sandbox's PID 1 is re-parented to this process when its launcher exits, so
  // that we can reap it and learn of its exit through a pidfd.
  check(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)");
}

Runtime::~Runtime() {
  launcher_.reset();
  // Leaves no empty instance folder behind (one with sandboxes in it stays).
  cgroups_->remove_instance();
}

size_t Runtime::cleanup_stale(const std::string& volumes_root) {
  // Processes first (killing PID 1 ends each sandbox's namespaces and the mounts in
  // them), then the host-side volume mounts those sandboxes used.
  size_t found = cgroups_->destroy_all();
  if (!volumes_root.empty())
    for (const auto& mount_point : Volume::mounts_under(volumes_root)) Volume::unmount(mount_point);
  launcher_->cleanup_stale();
  return found;
}

asio::awaitable<std::shared_ptr<Sandbox>> Runtime::start(asio::any_io_executor executor,
                                                         SandboxOptions options) {
  if (!valid_name(options.name)) throw SandboxError("invalid sandbox name: " + options.name);
  if (!options.restore_from.empty() && !launcher_->keeps_memory())
    throw SandboxError("this isolation tier cannot restore a checkpoint");
  auto sandbox = co_await launcher_->start(std::move(executor), options);
  if (!options_.trust_dir.empty()) sandbox->set_trust_env();
  sandbox->set_nameserver(options.nameserver);
  co_return sandbox;
}

bool Runtime::keeps_memory() const { return launcher_->keeps_memory(); }
bool Runtime::starts_over_slots() const { return launcher_->starts_over_slots(); }

asio::awaitable<void> Runtime::checkpoint(std::shared_ptr<Sandbox> sandbox, std::string image_dir) {
  co_await launcher_->checkpoint(std::move(sandbox), std::move(image_dir));
}

asio::awaitable<void> Runtime::pause(std::shared_ptr<Sandbox> sandbox) {
  co_await launcher_->pause(std::move(sandbox));
}

asio::awaitable<void> Runtime::resume(std::shared_ptr<Sandbox> sandbox) {
  co_await launcher_->resume(std::move(sandbox));
}

}  // namespace sandboxd::runtime
