// cgroup v2 (unified): controllers enabled down to the instance's cgroup; the sandbox's
// cgroup carries the limits and holds PID 1; each execution gets a child (no
// controllers of its own, so the no-internal-process rule does not apply) that
// cgroup.kill empties in one write.

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "runtime/cgroup.h"
#include "runtime/syscall_error.h"

namespace sandboxd::runtime {
namespace {

using namespace cgroupfs;

// The leaf that the processes found in v2_root move into (see enable_for_children).
constexpr const char* kServerLeaf = "sandboxd-server";

// Enables `enable` ("+memory +pids") for the children of `dir`. On a host, v2_root is the
// root cgroup, which the kernel exempts from its no-internal-process rule. In a container
// with a cgroup namespace of its own (a Kubernetes pod on a cgroup v2 node), v2_root is
// the pod's cgroup and holds the server itself: enabling a controller for children of a
// non-root cgroup that has processes fails with EBUSY. Like Docker-in-Docker's entrypoint,
// the processes found there move into a leaf of their own first (the server's children,
// such as mke2fs, follow it; sandboxes join their own cgroups below `sandboxd/`). A
// process started meanwhile (an exec into the pod) makes the write fail again: a few
// rounds, then the error with the call.
void enable_for_children(const std::string& dir, const std::string& enable) {
  const std::string control = dir + "/cgroup.subtree_control";
  for (int round = 0;; ++round) {
    int fd = open(control.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw SyscallError("open(" + control + ")", errno);
    ssize_t n = write(fd, enable.data(), enable.size());
    int err = errno;
    close(fd);
    if (n >= 0) return;
    if (err != EBUSY || round == 4) throw SyscallError("write(" + control + ", \"" + enable + "\")", err);
    const std::string leaf = dir + "/" + kServerLeaf;
    make_dir(leaf);
    std::istringstream procs(read_file(dir + "/cgroup.procs"));
    for (std::string pid; procs >> pid;)
      try_write_file(leaf + "/cgroup.procs", pid);  // gone meanwhile: ESRCH
  }
}

class CgroupV2 final : public CgroupBackend {
 public:
  explicit CgroupV2(const CgroupOptions& options) {
    std::istringstream available(read_file(options.v2_root + "/cgroup.controllers"));
    for (std::string name; available >> name;)
      if (std::find(options.v2_controllers.begin(), options.v2_controllers.end(), name) !=
          options.v2_controllers.end())
        controllers_.push_back(name);
    std::string enable;
    for (const auto& name : controllers_) enable += (enable.empty() ? "+" : " +") + name;
    std::string base = options.v2_root + "/sandboxd";
    root_ = base + "/" + options.instance;
    // Each level hands the controllers down; the sandbox level does not, so that it
    // may hold PID 1 itself.
    if (!enable.empty()) enable_for_children(options.v2_root, enable);
    make_dir(base);
    if (!enable.empty()) write_file(base + "/cgroup.subtree_control", enable);
    make_dir(root_);
    if (!enable.empty()) write_file(root_ + "/cgroup.subtree_control", enable);
    apply_total(options.total);
    kill_method_ = probe_kill_method();
  }

  std::string version() const override { return "v2"; }

  SandboxCgroups create(const std::string& sandbox, const CgroupLimits& limits) override {
    std::string dir = root_ + "/" + sandbox;
    make_dir(dir);
    if (limits.memory_bytes > 0) {
      require("memory");
      write_file(dir + "/memory.max", std::to_string(limits.memory_bytes));
      // Swap included: the sandbox may not go past its limit by swapping.
      if (exists(dir + "/memory.swap.max")) write_file(dir + "/memory.swap.max", "0");
    }
    if (limits.pids > 0) {
      require("pids");
      write_file(dir + "/pids.max", std::to_string(limits.pids));
    }
    if (limits.cpu_millis > 0) {
      require("cpu");
      write_file(dir + "/cpu.max", std::to_string(limits.cpu_millis * 100) + " 100000");
    }
    SandboxCgroups out;
    out.join_dirs.push_back(dir);
    out.exec_parent = dir;
    out.kill_method = kill_method();
    return out;
  }

  void destroy(const std::string& sandbox) override { remove_tree(root_ + "/" + sandbox, kill_method()); }

  size_t thaw(const std::string& sandbox) override {
    const std::string file = root_ + "/" + sandbox + "/cgroup.freeze";
    if (read_file(file).rfind('1', 0) != 0) return 0;
    write_file(file, "0");
    return 1;
  }

  bool freeze(const std::string& sandbox) override {
    const std::string file = root_ + "/" + sandbox + "/cgroup.freeze";
    if (!exists(file)) return false;
    write_file(file, "1");
    return true;
  }

  size_t destroy_all() override {
    auto names = list_children(root_);
    for (const auto& name : names) remove_tree(root_ + "/" + name, kill_method());
    return names.size();
  }

  void remove_instance() override { rmdir(root_.c_str()); }

  uint64_t memory_usage(const std::string& sandbox) const override {
    return std::strtoull(read_file(root_ + "/" + sandbox + "/memory.current").c_str(), nullptr, 10);
  }

  std::optional<uint64_t> cpu_usage_usec(const std::string& sandbox) const override {
    // cpu.stat's usage_usec is kept for every cgroup, with or without the cpu controller.
    const std::string stat = read_file(root_ + "/" + sandbox + "/cpu.stat");
    const auto pos = stat.find("usage_usec ");
    if (pos != 0 && (pos == std::string::npos || stat[pos - 1] != '\n')) return std::nullopt;
    return std::strtoull(stat.c_str() + pos + 11, nullptr, 10);
  }

  uint64_t oom_kills(const std::string& sandbox) const override {
    std::string events = read_file(root_ + "/" + sandbox + "/memory.events");
    auto pos = events.find("oom_kill ");
    return pos == std::string::npos ? 0 : std::strtoull(events.c_str() + pos + 9, nullptr, 10);
  }

 private:
  void require(const std::string& controller) const {
    if (std::find(controllers_.begin(), controllers_.end(), controller) == controllers_.end())
      throw SyscallError("cgroup v2: the " + controller + " controller is not available under " + root_,
                         ENOTSUP);
  }

  KillMethod kill_method() const { return kill_method_; }

  // The instance's cgroup holds every sandbox: its limits are the total for all of them.
  void apply_total(const CgroupLimits& total) {
    if (total.pids > 0) {
      require("pids");
      write_file(root_ + "/pids.max", std::to_string(total.pids));
    }
    if (total.memory_bytes > 0) {
      require("memory");
      write_file(root_ + "/memory.max", std::to_string(total.memory_bytes));
      if (exists(root_ + "/memory.swap.max")) write_file(root_ + "/memory.swap.max", "0");
    }
    if (total.cpu_millis > 0) {
      require("cpu");
      write_file(root_ + "/cpu.max", std::to_string(total.cpu_millis * 100) + " 100000");
    }
  }

  // cgroup.kill exists from Linux 5.14 (and never in the root cgroup); earlier kernels
  // get the signal loop.
  KillMethod probe_kill_method() const {
    std::string probe = root_ + "/.kill-probe";
    make_dir(probe);
    bool found = exists(probe + "/cgroup.kill");
    rmdir(probe.c_str());
    return found ? KillMethod::kCgroupKill : KillMethod::kSignalLoop;
  }

  std::vector<std::string> controllers_;
  std::string root_;
  KillMethod kill_method_ = KillMethod::kSignalLoop;
};

}  // namespace

std::unique_ptr<CgroupBackend> make_cgroup_v2(const CgroupOptions& options) {
  return std::make_unique<CgroupV2>(options);
}

}  // namespace sandboxd::runtime
