#include "runtime/native_launcher.h"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/use_awaitable.hpp>
#include <cstdio>

#include "runtime/mount_template.h"
#include "runtime/runtime.h"
#include "runtime/seccomp.h"
#include "runtime/spawn.h"
#include "runtime/spec.h"
#include "runtime/syscall_error.h"
#include "runtime/user.h"
#include "runtime/userns.h"
#include "runtime/volume.h"

namespace sandboxd::runtime {

NativeLauncher::NativeLauncher(const RuntimeOptions& options, CgroupBackend& cgroups)
    : options_(options), cgroups_(cgroups) {
  auto program = build_seccomp_program();
  seccomp_bpf_.assign(reinterpret_cast<const char*>(program.instructions.data()),
                      program.instructions.size() * sizeof(sock_filter));
  // Fails here, at start-up, on a host where the sandboxes' user namespaces cannot be made.
  close(
      create_agent_userns(options_.init_path, options_.host_uid, options_.host_gid, options_.userns_limits));
  // The mount namespace sandboxes are made from: the host paths they read, nothing else.
  std::vector<std::string> needed{"/dev"};
  if (options_.image_root.empty())
    needed.insert(needed.end(), {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"});
  else
    needed.push_back(options_.image_root);
  if (!options_.trust_dir.empty()) needed.push_back(options_.trust_dir);
  std::string template_error;
  mount_template_fd_ =
      create_mount_template(options_.init_path, options_.service_dir, needed, template_error);
  // The container's folders are cloned by this process (clone_folders), which a
  // seccomp profile or a tracer (valgrind) may deny it even when the helper could.
  if (mount_template_fd_ >= 0 && !can_clone_folders(template_error)) {
    close(mount_template_fd_);
    mount_template_fd_ = -1;
  }
  if (mount_template_fd_ < 0)
    std::fprintf(stderr,
                 "sandboxd: %s; each sandbox copies the server's mount namespace instead (slower to start "
                 "with many sandboxes running)\n",
                 template_error.c_str());
}

NativeLauncher::~NativeLauncher() {
  if (mount_template_fd_ >= 0) close(mount_template_fd_);
}

asio::awaitable<std::shared_ptr<Sandbox>> NativeLauncher::start(asio::any_io_executor executor,
                                                                const SandboxOptions& options) {
  // The user namespace's holder is a process to spawn and wait for: on threads of its
  // own, never this I/O thread, and from now on, while the cgroups and the launcher are
  // made here.
  auto userns = PendingUserns::start(executor, options_.init_path, options_.host_uid, options_.host_gid,
                                     options_.userns_limits);
  Spec spec;
  spec.image_root = options_.image_root;
  spec.workspace_dir = options.workspace_dir;
  spec.uploads_dir = options.uploads_dir;
  spec.outputs_dir = options.outputs_dir;
  spec.skills_dir = options.skills_dir;
  spec.host_uid = options_.host_uid;
  spec.host_gid = options_.host_gid;
  spec.tmp_size_bytes = options.tmp_size_bytes;
  spec.home_size_bytes = options.home_size_bytes;
  spec.max_open_files = options.max_open_files;
  spec.hosts_entries = options.hosts_entries;
  spec.listeners = options.listeners;
  spec.nameserver = options.nameserver;
  spec.trust_dir = options_.trust_dir;
  spec.seccomp_bpf = seccomp_bpf_;
  spec.receive_mounts = options.pre_started || options.receive_mounts;
  spec.mount_trees = mount_template_fd_ >= 0;
  std::string payload;
  try {
    SandboxCgroups cg = cgroups_.create(options.name, options.limits);
    spec.cgroup_dirs = cg.join_dirs;
    spec.exec_cgroup_parent = cg.exec_parent;
    spec.kill_method = cg.kill_method;
    payload = encode(spec);
  } catch (const std::exception& e) {
    try {
      cgroups_.destroy(options.name);
    } catch (...) {
    }
    throw SandboxError(std::string("creating the sandbox's cgroups: ") + e.what());
  }

  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    int err = errno;
    cgroups_.destroy(options.name);
    throw SandboxError(describe_errno("socketpair(AF_UNIX, SOCK_SEQPACKET)", err));
  }
  pid_t launcher = -1;
  try {
    launcher = spawn_program({options_.init_path}, pair[1]);
  } catch (const std::exception& e) {
    close(pair[0]);
    close(pair[1]);
    cgroups_.destroy(options.name);
    throw SandboxError(e.what());
  }
  close(pair[1]);
  auto sandbox = std::make_shared<Sandbox>(executor, options.name, pair[0], launcher, &cgroups_);
  int userns_fd = -1;
  std::string userns_error;
  try {
    userns_fd = co_await userns->get();
  } catch (const std::exception& e) {
    userns_error = e.what();
  }
  if (userns_fd < 0) {
    co_await sandbox->stop();
    throw SandboxError("creating the sandbox's user namespace: " + userns_error);
  }
  // With the template, the container's folders go as clones of their mounts (a
  // folder missing or unreadable fails the start here, naming it).
  std::vector<int> fds{userns_fd};
  if (spec.mount_trees) {
    std::string clone_error;
    try {
      auto trees =
          clone_folders({&spec.workspace_dir, &spec.uploads_dir, &spec.outputs_dir, &spec.skills_dir});
      fds.push_back(mount_template_fd_);
      fds.insert(fds.end(), trees.begin(), trees.end());
    } catch (const std::exception& e) {
      clone_error = e.what();
    }
    if (!clone_error.empty()) {
      close(userns_fd);
      co_await sandbox->stop();
      throw SandboxError("cloning the container's folders: " + clone_error);
    }
  }
  int rc = protocol::send_message(pair[0], protocol::Type::kSpec, 0, 0, payload, fds.data(), fds.size());
  // PID 1 holds them now (the template stays here, for the next sandbox).
  for (int fd : fds)
    if (fd != mount_template_fd_) close(fd);
  if (rc < 0) {
    co_await sandbox->stop();
    throw SandboxError(describe_errno("sending the spec to sandboxd-init", -rc));
  }
  co_await sandbox->wait_ready(options_.start_timeout);
  co_return sandbox;
}

}  // namespace sandboxd::runtime
