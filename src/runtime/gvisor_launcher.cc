#include "runtime/gvisor_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "runtime/gvisor_command_cgroups.h"
#include "runtime/gvisor_init.h"
#include "runtime/host_etc.h"
#include "runtime/login_profile.h"
#include "runtime/netns.h"
#include "runtime/runtime.h"
#include "runtime/spawn.h"
#include "runtime/spec.h"
#include "runtime/syscall_error.h"
#include "runtime/trust_bundle.h"

namespace sandboxd::runtime {
namespace {

namespace fs = std::filesystem;

// The only capabilities PID 1 has inside gVisor: to change to the agent's ids, to drop
// the bounding set of each command, to kill a command's tree, to listen where the
// server listens (addresses on gVisor's own loopback, ports below 1024: DNS, HTTP), and
// to mount gVisor's cgroupfs for the commands' trees (CAP_SYS_ADMIN, the sentry's only:
// PID 1 gives it up right after that mount, gvisor_command_cgroups.cc says why it
// reaches nothing of the host), and to read the commands' working directories and roots
// in /proc when a skill comes off (CAP_SYS_PTRACE: gVisor asks for it to read another
// process's /proc/PID/cwd even of the same uid; it is gVisor's ptrace, over the
// sandbox's own processes, which PID 1 starts and kills anyway). Commands have none.
constexpr const char* kAgentCapabilities =
    R"(["CAP_SETUID","CAP_SETGID","CAP_SETPCAP","CAP_KILL","CAP_NET_ADMIN","CAP_NET_BIND_SERVICE",)"
    R"("CAP_SYS_ADMIN","CAP_SYS_PTRACE"])";

// Where the helper sits in the container's root (bound read-only from the host).
constexpr const char* kInitInContainer = "/.sandboxd/init";
constexpr const char* kPreloadInContainer = "/.sandboxd/preload.so";
// The two parents of a sandbox's slot folders (SandboxOptions::pre_started), checked to
// be the layout PID 1 binds from: <rw>/workspace, <rw>/outputs, <ro>/uploads, <ro>/skills.
struct SlotParents {
  std::string writable, read_only;
};
SlotParents slot_parents(const SandboxOptions& sandbox) {
  const fs::path workspace(sandbox.workspace_dir), outputs(sandbox.outputs_dir), uploads(sandbox.uploads_dir),
      skills(sandbox.skills_dir);
  if (workspace.filename() != "workspace" || outputs.filename() != "outputs" ||
      uploads.filename() != "uploads" || skills.filename() != "skills" ||
      workspace.parent_path() != outputs.parent_path() || uploads.parent_path() != skills.parent_path() ||
      workspace.parent_path() == uploads.parent_path())
    throw SandboxError("sandbox " + sandbox.name +
                       ": its slot folders are not <rw>/workspace, <rw>/outputs, <ro>/uploads, <ro>/skills");
  return {workspace.parent_path().string(), uploads.parent_path().string()};
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

void write_text(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw SyscallError("open(" + path + ", O_CREAT)", errno);
  const ssize_t n = write(fd, text.data(), text.size());
  const int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) throw SyscallError("write(" + path + ")", n < 0 ? err : EIO);
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw SyscallError("mkdir(" + path + ")", ec.value());
}

// The mounts of config.json, in order (a mount point inside an earlier mount comes after it).
class Mounts {
 public:
  void bind(const std::string& source, const std::string& destination, bool read_only) {
    add(destination, "bind", source,
        read_only ? R"(["rbind","ro","nosuid","nodev"])" : R"(["rbind","rw","nosuid","nodev"])");
    sources_.push_back(source);
  }
  void tmpfs(const std::string& destination, const std::string& options) {
    add(destination, "tmpfs", "tmpfs", "[" + options + "]");
  }
  void add(const std::string& destination, const std::string& type, const std::string& source,
           const std::string& options_json) {
    if (!json_.empty()) json_ += ",\n    ";
    json_ += "{\"destination\":" + json_string(destination) + ",\"type\":" + json_string(type) +
             ",\"source\":" + json_string(source) + ",\"options\":" + options_json + "}";
  }
  const std::string& json() const { return json_; }
  // The host paths bound in: what runsc's gofer opens (GvisorLauncher::Bundle::sources).
  std::vector<std::string> take_sources() { return std::move(sources_); }

 private:
  std::string json_;
  std::vector<std::string> sources_;
};

std::string quoted(const std::string& option) { return json_string(option); }

}  // namespace

std::string find_runsc(const std::string& configured) {
  if (!configured.empty()) return access(configured.c_str(), X_OK) == 0 ? configured : "";
  for (const char* dir : {"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin", "/sbin", "/bin"}) {
    std::string candidate = std::string(dir) + "/runsc";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

GvisorLauncher::GvisorLauncher(const RuntimeOptions& options, CgroupBackend& cgroups)
    : options_(options), cgroups_(cgroups) {
  runsc_ = find_runsc(options_.gvisor.runsc_path);
  if (runsc_.empty())
    throw std::runtime_error(
        "runtime.isolation is gvisor but runsc is not installed (Debian: apt-get install runsc)" +
        (options_.gvisor.runsc_path.empty() ? std::string() : ": " + options_.gvisor.runsc_path));
  // Beside sandboxd-init, in the build tree and in the package alike.
  const std::string init_dir = options_.init_path.substr(0, options_.init_path.rfind('/') + 1);
  if (access((init_dir + "sandboxd-gvisor-preload.so").c_str(), R_OK) == 0)
    preload_ = init_dir + "sandboxd-gvisor-preload.so";
  else
    std::fprintf(
        stderr,
        "sandboxd: %ssandboxd-gvisor-preload.so is missing: `ls -l` and `stat` fail in gvisor sandboxes "
        "with this runsc\n",
        init_dir.c_str());
  state_dir_ = options_.gvisor.state_dir.empty() ? "/run/sandboxd-gvisor/" + options_.instance
                                                 : options_.gvisor.state_dir;
  make_dirs(state_dir_ + "/runsc");
  make_dirs(state_dir_ + "/bundles");
  // Only root reads the bundles (they name the container's host folders) and the state.
  check(chmod(state_dir_.c_str(), 0700), "chmod(" + state_dir_ + ", 0700)");
}

GvisorLauncher::~GvisorLauncher() {
  for (const std::string& dir : {state_dir_ + "/runsc", state_dir_ + "/bundles", state_dir_})
    rmdir(dir.c_str());
}

void GvisorLauncher::cleanup_stale() {
  // A killed predecessor's sandboxes were killed with their cgroups; what runsc kept of
  // them (its state files) and their bundles are all that is left.
  std::error_code ec;
  for (const char* sub : {"/runsc", "/bundles"}) {
    fs::remove_all(state_dir_ + sub, ec);
    make_dirs(state_dir_ + sub);
  }
}

void GvisorLauncher::remove_leftovers(const std::string& name) const {
  remove_gvisor_leftovers(state_dir_, name);
}

void remove_gvisor_leftovers(const std::string& state_dir, const std::string& name) {
  std::error_code ec;
  fs::remove_all(state_dir + "/bundles/" + name, ec);
  // runsc names its files after the sandbox and container ids (both `name` here); a
  // runsc that ended on its own has removed them already.
  for (const auto& entry : fs::directory_iterator(state_dir + "/runsc", ec)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind(name + "_", 0) == 0 || file.rfind(name + ".", 0) == 0 || file == name)
      fs::remove_all(entry.path(), ec);
  }
}

GvisorLauncher::Bundle GvisorLauncher::write_bundle(const SandboxOptions& sandbox) const {
  const std::string bundle = state_dir_ + "/bundles/" + sandbox.name;
  const std::string root = bundle + "/rootfs";
  std::error_code ec;
  fs::remove_all(bundle, ec);
  make_dirs(root);
  Mounts mounts;
  // The system: the image's top-level entries, or the host's /usr and friends, read-only;
  // a symlink (/bin -> usr/bin) stays a symlink.
  auto system_entry = [&](const std::string& source, const std::string& name) {
    struct stat st {};
    if (lstat(source.c_str(), &st) != 0) return;
    if (S_ISLNK(st.st_mode)) {
      fs::copy_symlink(source, root + "/" + name, ec);
      return;
    }
    if (!S_ISDIR(st.st_mode)) return;
    make_dirs(root + "/" + name);
    mounts.bind(source, "/" + name, /*read_only=*/true);
  };
  const std::vector<std::string> built = {"dev", "proc", "sys",  "tmp",   "home",       "mnt",      "run",
                                          "etc", "root", "boot", "media", "lost+found", ".sandboxd"};
  if (options_.image_root.empty()) {
    for (const char* top : {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"})
      system_entry(std::string("/") + top, top);
  } else {
    for (const auto& entry : fs::directory_iterator(options_.image_root, ec)) {
      const std::string name = entry.path().filename().string();
      if (std::find(built.begin(), built.end(), name) == built.end())
        system_entry(entry.path().string(), name);
    }
  }
  for (const char* dir : {"dev", "proc", "sys", "tmp", "home/agent", "mnt/user-data/uploads",
                          "mnt/user-data/outputs", "mnt/skills", "run", "root", "var", ".sandboxd"})
    make_dirs(root + "/" + dir);
  // Where PID 1 mounts gVisor's cgroupfs for its commands (gvisor_command_cgroups.h).
  make_dirs(root + kCommandCgroups);
  fs::create_symlink("/tmp", root + "/var/tmp", ec);
  // E2B's code expects a writable home at /home/user that lasts: the workspace, as on
  // the native tier (runtime/mount.cc).
  fs::create_symlink("agent/workspace", root + "/home/user", ec);
  write_text(root + kInitInContainer, "");
  mounts.bind(options_.init_path, kInitInContainer, /*read_only=*/true);
  if (!preload_.empty()) {
    write_text(root + kPreloadInContainer, "");
    mounts.bind(preload_, kPreloadInContainer, /*read_only=*/true);
  }

  // /etc: the generated files (as the native tier writes them) in the read-only root,
  // and the allowed host entries (or the image's own) bound over placeholders.
  const std::string etc = root + "/etc";
  make_dirs(etc);
  write_text(etc + "/passwd",
             "root:x:0:0:root:/root:/usr/sbin/nologin\n"
             "agent:x:1000:1000:agent:/home/agent:/bin/bash\n"
             "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
  write_text(etc + "/group", "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n");
  std::string hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox\n";
  for (const auto& entry : sandbox.hosts_entries) hosts += entry + "\n";
  write_text(etc + "/hosts", hosts);
  write_text(etc + "/hostname", "sandbox\n");
  // As the native tier writes them (runtime/mount.cc): without a nameserver names resolve
  // through /etc/hosts only and an unknown one fails at once; with one, it is the DNS
  // relay the server answers on the sandbox's loopback, asked over TCP (use-vc): PID 1
  // relays connections, not datagrams.
  if (sandbox.nameserver.empty())
    write_text(etc + "/resolv.conf", "# sandboxd: no DNS; known names are in /etc/hosts\n");
  else
    write_text(etc + "/resolv.conf", "# sandboxd: names the server resolves for this sandbox\nnameserver " +
                                         sandbox.nameserver + "\noptions timeout:2 attempts:2 use-vc\n");
  write_text(etc + "/nsswitch.conf", std::string("passwd: files\ngroup: files\nshadow: files\nhosts: files") +
                                         (sandbox.nameserver.empty() ? "" : " dns") +
                                         "\nnetworks: files\nprotocols: files\nservices: files\n");
  if (!preload_.empty()) write_text(etc + "/ld.so.preload", std::string(kPreloadInContainer) + "\n");
  // (shadow, gshadow, subuid and subgid are not there at all, as on the native tier: the
  // host's or the image's are never bound, kGeneratedEtc.)
  auto etc_entry = [&](const std::string& source, const std::string& name) {
    // The login profile as the native tier's (mount.cc): a file of the sandbox's own
    // without the `id -u` subshell of every login shell (login_profile.h); one that
    // cannot be rewritten is bound as it is.
    if (name == "profile") {
      const int fd = open(source.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0) {
        unsigned mode = 0644;
        auto rewritten = rewritten_profile(fd, mode);
        close(fd);
        if (rewritten) {
          write_text(etc + "/profile", *rewritten);
          check(chmod((etc + "/profile").c_str(), mode & 07777), "chmod(" + etc + "/profile)");
          return;
        }
      }
    }
    struct stat st {};
    if (stat(source.c_str(), &st) != 0) return;  // (a dangling link: nothing to see)
    if (S_ISDIR(st.st_mode))
      make_dirs(etc + "/" + name);
    else if (S_ISREG(st.st_mode))
      write_text(etc + "/" + name, "");
    else
      return;
    mounts.bind(source, "/etc/" + name, /*read_only=*/true);
  };
  if (options_.image_root.empty()) {
    for (const char* name : kHostEtcAllowList) etc_entry(std::string("/etc/") + name, name);
  } else {
    for (const auto& entry : fs::directory_iterator(options_.image_root + "/etc", ec)) {
      const std::string name = entry.path().filename().string();
      if (std::find(std::begin(kGeneratedEtc), std::end(kGeneratedEtc), name) == std::end(kGeneratedEtc))
        etc_entry(entry.path().string(), name);
    }
  }

  // The certificates the sandbox trusts beyond its system's (trust_bundle.h), as on the
  // native tier (runtime/mount.cc): the folder, and its bundle over the system's own
  // where that is a plain file of the image (or the host's /etc/ssl, bound above).
  if (!options_.trust_dir.empty()) {
    make_dirs(root + kTrustDir);
    mounts.bind(options_.trust_dir, kTrustDir, /*read_only=*/true);
    if (plain_file_beneath(options_.image_root.empty() ? "/" : options_.image_root, kSystemBundle))
      mounts.bind(options_.trust_dir + "/" + kTrustBundleName, kSystemBundle, /*read_only=*/true);
  }

  // The writable places, each with the native tier's size and modes.
  mounts.add("/proc", "proc", "proc", R"(["nosuid","noexec","nodev"])");
  mounts.tmpfs("/tmp", quoted("mode=1777") + "," + quoted("size=" + std::to_string(sandbox.tmp_size_bytes)) +
                           R"(,"nosuid","nodev")");
  mounts.tmpfs("/dev/shm", quoted("mode=1777") + "," + quoted("size=" + std::to_string(64ull << 20)) +
                               R"(,"nosuid","nodev","noexec")");
  mounts.tmpfs("/home/agent", quoted("mode=0755") + "," + quoted("uid=1000") + "," + quoted("gid=1000") +
                                  "," + quoted("size=" + std::to_string(sandbox.home_size_bytes)) +
                                  R"(,"nosuid","nodev")");
  if (sandbox.pre_started) {
    // Over slots: a host bind made after runsc started is not seen on top of a folder
    // runsc was given (its gofer holds the folder it opened), but is seen beneath one.
    // So runsc gets the slots' parents, and PID 1 binds each folder onto its place
    // inside once the container's are on the slots (protocol::kAttachFolders). A sandbox
    // started for its container, or restored, takes the same layout, so that a
    // checkpoint always restores into the mounts it was taken with.
    // kSlotFolders is a folder of the read-only root that only root may enter, so the
    // agent never reaches the parents whole (an upload's folder writable, say).
    const SlotParents parents = slot_parents(sandbox);
    make_dirs(root + kSlotFolders + "/rw");
    make_dirs(root + kSlotFolders + "/ro");
    check(chmod((root + kSlotFolders).c_str(), 0700), "chmod(" + root + kSlotFolders + ", 0700)");
    mounts.bind(parents.writable, std::string(kSlotFolders) + "/rw", /*read_only=*/false);
    // Read-only in runsc's gofer too: gVisor has no read-only remount of a bind, and a
    // bind inside keeps the read-only of the mount it is taken from.
    mounts.bind(parents.read_only, std::string(kSlotFolders) + "/ro", /*read_only=*/true);
  } else {
    mounts.bind(sandbox.workspace_dir, kWorkspacePath, /*read_only=*/false);
    mounts.bind(sandbox.uploads_dir, "/mnt/user-data/uploads", /*read_only=*/true);
    mounts.bind(sandbox.outputs_dir, "/mnt/user-data/outputs", /*read_only=*/false);
    if (!sandbox.skills_dir.empty()) mounts.bind(sandbox.skills_dir, "/mnt/skills", /*read_only=*/true);
  }

  std::string rlimits;
  if (sandbox.max_open_files > 0)
    rlimits = ",\"rlimits\":[{\"type\":\"RLIMIT_NOFILE\",\"hard\":" + std::to_string(sandbox.max_open_files) +
              ",\"soft\":" + std::to_string(sandbox.max_open_files) + "}]";
  const std::string config =
      std::string("{\"ociVersion\":\"1.0.2\",\n") +
      "  \"process\":{\"terminal\":false,\"user\":{\"uid\":0,\"gid\":0},\"args\":[" +
      json_string(kInitInContainer) + ",\"--gvisor-agent\",\"" + std::to_string(sandbox.max_open_files) +
      "\",\"" + std::to_string(sandbox.limits.pids) +
      (sandbox.pre_started ? "\",\"" + std::string(kOverSlotsArg) : "") +
      "\"],\"env\":[\"PATH=/usr/sbin:/usr/bin:/sbin:/bin\"],\"cwd\":\"/\",\"noNewPrivileges\":true," +
      "\"capabilities\":{\"bounding\":" + kAgentCapabilities + ",\"effective\":" + kAgentCapabilities +
      ",\"permitted\":" + kAgentCapabilities + "}" + rlimits + "},\n" +
      "  \"root\":{\"path\":\"rootfs\",\"readonly\":true},\n  \"hostname\":\"sandbox\",\n" +
      "  \"mounts\":[" + mounts.json() + "],\n" +
      // No network namespace of its own: runsc stays in the launcher's (the sandbox's,
      // with the server's listeners), which gVisor's own network stack never touches.
      "  \"linux\":{\"namespaces\":[{\"type\":\"pid\"},{\"type\":\"ipc\"},{\"type\":\"uts\"},"
      "{\"type\":\"mount\"}]}}\n";
  write_text(bundle + "/config.json", config);
  return {bundle, mounts.take_sources()};
}

asio::awaitable<std::shared_ptr<Sandbox>> GvisorLauncher::start(asio::any_io_executor executor,
                                                                const SandboxOptions& options) {
  // The sentry's and the gofer's own memory on top of the processes' (kGvisorMemoryOverhead).
  CgroupLimits limits = options.limits;
  if (limits.memory_bytes > 0) limits.memory_bytes += kGvisorMemoryOverhead;
  if (limits.pids > 0) limits.pids += limits.pids * kGvisorHostTasksPerTask + kGvisorTaskOverhead;
  SandboxCgroups cg;
  Bundle bundle;
  try {
    cg = cgroups_.create(options.name, limits);
    bundle = write_bundle(options);
  } catch (const std::exception& e) {
    try {
      cgroups_.destroy(options.name);
    } catch (...) {
    }
    remove_leftovers(options.name);
    throw SandboxError(std::string("preparing the gVisor sandbox: ") + e.what());
  }
  std::vector<std::string> argv{options_.init_path, "--gvisor-launch"};
  argv.insert(argv.end(), cg.join_dirs.begin(), cg.join_dirs.end());
  // What the launcher's copy of the server's mounts keeps of the volumes (the service's
  // own, a loop device's): what runsc uses (the rest, other containers' volumes above
  // all, it detaches).
  if (!options_.service_dir.empty()) argv.push_back(std::string(kServiceDirArg) + options_.service_dir);
  for (const auto& path : bundle.sources) argv.push_back(std::string(kKeepArg) + path);
  for (const auto& path : {bundle.folder, runsc_, state_dir_, options.restore_from})
    if (!path.empty()) argv.push_back(std::string(kKeepArg) + path);
  for (const auto& listener : options.listeners)
    argv.push_back("--listen=" + listener.address + ":" + std::to_string(listener.port));
  argv.insert(argv.end(),
              {"--", runsc_, "--root=" + state_dir_ + "/runsc", "--platform=" + options_.gvisor.platform,
               // gVisor's own network stack with nothing but its loopback: no socket
               // call of the sandbox reaches the host kernel's TCP/UDP code. PID 1
               // listens there where the server listens in the sandbox's namespace and
               // relays each connection over the control socket (Sandbox::relay_network),
               // so the sandbox reaches what the native tier's does, by the same names
               // and addresses, and nothing else. And a sandbox with no host sockets
               // can be checkpointed (runsc refuses to with hostinet).
               "--network=none",
               // The launcher has put runsc in the sandbox's cgroups already.
               "--ignore-cgroups"});
  if (options.restore_from.empty()) {
    argv.insert(argv.end(), {"run", "--bundle", bundle.folder, options.name});
  } else {
    // The same bundle as the checkpointed sandbox's (the same folders at the same
    // places, the same limits): its processes go on where they were.
    argv.insert(argv.end(),
                {"restore", "--image-path=" + options.restore_from, "--bundle", bundle.folder, options.name});
  }
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    int err = errno;
    cgroups_.destroy(options.name);
    remove_leftovers(options.name);
    throw SandboxError(describe_errno("socketpair(AF_UNIX, SOCK_SEQPACKET)", err));
  }
  pid_t launcher = -1;
  try {
    launcher = spawn_program(argv, pair[1]);
  } catch (const std::exception& e) {
    close(pair[0]);
    close(pair[1]);
    cgroups_.destroy(options.name);
    remove_leftovers(options.name);
    throw SandboxError(e.what());
  }
  close(pair[1]);
  auto sandbox = std::make_shared<Sandbox>(executor, options.name, pair[0], launcher, &cgroups_);
  // (The runtime may be gone by the time a sandbox stops: nothing of it is captured.)
  sandbox->on_stopped(
      [state_dir = state_dir_, name = options.name] { remove_gvisor_leftovers(state_dir, name); });
  sandbox->set_processes_invisible_to_host();
  if (options.pre_started) sandbox->set_binds_folders_inside();
  if (!options.restore_from.empty()) sandbox->expect_restore();
  co_await sandbox->wait_ready(options_.start_timeout);
  std::string network_error;
  try {
    sandbox->relay_network(open_network_namespace(sandbox->pid()));
  } catch (const SyscallError& e) {
    network_error = e.what();
  }
  if (!network_error.empty()) {
    co_await sandbox->stop();
    throw SandboxError("sandbox " + options.name + ": its network: " + network_error);
  }
  for (const auto& listener : options.listeners) sandbox->listen_inside(listener.address, listener.port);
  co_return sandbox;
}

namespace {
// Runs argv to its end without blocking a thread (the runtime's own child: its pidfd
// becomes readable at its exit). Returns its wait status.
asio::awaitable<int> run_to_exit(asio::any_io_executor executor, const std::vector<std::string>& argv) {
  const pid_t pid = spawn_program(argv);
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    const int err = errno;
    kill(pid, SIGKILL);  // (its end is then a moment away)
    int status = 0;
    retry_eintr([&] { return waitpid(pid, &status, 0); });
    throw SyscallError("pidfd_open(" + std::to_string(pid) + ")", err);
  }
  asio::posix::stream_descriptor exit_watch(executor, pidfd);
  boost::system::error_code ec;
  co_await exit_watch.async_wait(asio::posix::descriptor_base::wait_read,
                                 asio::redirect_error(asio::use_awaitable, ec));
  int status = 0;
  retry_eintr([&] { return waitpid(pid, &status, 0); });
  co_return status;
}
}  // namespace

asio::awaitable<void> GvisorLauncher::checkpoint(std::shared_ptr<Sandbox> sandbox, std::string image_dir) {
  if (!sandbox->running() || sandbox->pid() <= 0)
    throw SandboxError("sandbox " + sandbox->name() + " is not running: nothing to checkpoint");
  // runsc saves the sandbox through its sentry, which must run for that: a paused
  // sandbox is let go first (its processes run for the moment runsc takes to stop them).
  cgroups_.thaw(sandbox->name());
  // runsc knows its container by the pids of runsc's own PID namespace, whose init is
  // the sandbox's PID 1 as the server sees it (run_reaper).
  const std::vector<std::string> argv{options_.init_path,
                                      "--gvisor-enter",
                                      std::to_string(sandbox->pid()),
                                      "--",
                                      runsc_,
                                      "--root=" + state_dir_ + "/runsc",
                                      "checkpoint",
                                      "--image-path=" + image_dir,
                                      sandbox->name()};
  int status = 0;
  try {
    status = co_await run_to_exit(sandbox->executor(), argv);
  } catch (const std::exception& e) {
    throw SandboxError("sandbox " + sandbox->name() + ": starting runsc checkpoint: " + e.what());
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw SandboxError("sandbox " + sandbox->name() + ": runsc checkpoint " +
                       (WIFEXITED(status) ? "exited with " + std::to_string(WEXITSTATUS(status))
                                          : "was killed by signal " + std::to_string(WTERMSIG(status))) +
                       " (its message is in the server's log)");
}

asio::awaitable<void> GvisorLauncher::pause(std::shared_ptr<Sandbox> sandbox) {
  if (!sandbox->running())
    throw SandboxError("sandbox " + sandbox->name() + " is not running: nothing to pause");
  if (!cgroups_.freeze(sandbox->name()))
    throw SandboxError("sandbox " + sandbox->name() + ": the host has no cgroup freezer for it");
  co_return;
}

asio::awaitable<void> GvisorLauncher::resume(std::shared_ptr<Sandbox> sandbox) {
  if (!sandbox->running())
    throw SandboxError("sandbox " + sandbox->name() + " is not running: nothing to resume");
  cgroups_.thaw(sandbox->name());
  co_return;
}

}  // namespace sandboxd::runtime
