// cgroup v1: one hierarchy per controller. Limits go on the sandbox's cgroup in the
// memory, pids and cpu hierarchies; per-execution children only in the freezer
// hierarchy (one mkdir per command, and freezing makes the tree kill race-free).

#include <algorithm>
#include <cstdlib>
#include <string>

#include <unistd.h>
#include <vector>

#include "runtime/cgroup.h"
#include "runtime/syscall_error.h"

namespace sandboxd::runtime {
namespace {

using namespace cgroupfs;

// utime + stime + cutime + cstime of a process (clock ticks), from /proc/PID/stat; 0
// when it has gone. (The fields are counted after the command's closing parenthesis: a
// command may hold spaces and parentheses.)
uint64_t process_cpu_ticks(unsigned long pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  // After ") ": state (3), then fields 4..; utime is field 14, cstime field 17.
  const char* at = stat.c_str() + close + 1;
  uint64_t total = 0;
  for (int field = 3; field <= 17 && *at; ++field) {
    while (*at == ' ') ++at;
    if (field >= 14) total += std::strtoull(at, nullptr, 10);
    while (*at && *at != ' ') ++at;
  }
  return total;
}

class CgroupV1 final : public CgroupBackend {
 public:
  explicit CgroupV1(const CgroupOptions& options) {
    for (const char* controller : {"memory", "pids", "cpu", "freezer"}) {
      std::string mount = options.v1_root + "/" + controller;
      if (!exists(mount + "/cgroup.procs")) continue;
      std::string base = mount + "/sandboxd";
      make_dir(base);
      std::string instance = base + "/" + options.instance;
      make_dir(instance);
      roots_.push_back({controller, instance});
      // The instance's cgroup holds every sandbox: its limits are the total for all.
      const CgroupLimits& total = options.total;
      if (std::string(controller) == "pids" && total.pids > 0) {
        write_file(instance + "/pids.max", std::to_string(total.pids));
      } else if (std::string(controller) == "memory" && total.memory_bytes > 0) {
        // Swap included when it is accounted; memsw may never be below the memory limit,
        // so whichever order a change needs: memsw, memory, memsw again.
        const std::string bytes = std::to_string(total.memory_bytes);
        const bool memsw = exists(instance + "/memory.memsw.limit_in_bytes");
        if (memsw) try_write_file(instance + "/memory.memsw.limit_in_bytes", bytes);
        write_file(instance + "/memory.limit_in_bytes", bytes);
        if (memsw) write_file(instance + "/memory.memsw.limit_in_bytes", bytes);
      } else if (std::string(controller) == "cpu" && total.cpu_millis > 0) {
        write_file(instance + "/cpu.cfs_period_us", "100000");
        write_file(instance + "/cpu.cfs_quota_us", std::to_string(total.cpu_millis * 100));
        total_cpu_ = true;
      }
    }
    if (roots_.empty())
      throw SyscallError("cgroup v1: no memory, pids, cpu or freezer hierarchy under " + options.v1_root,
                         ENOENT);
  }

  std::string version() const override { return "v1"; }

  SandboxCgroups create(const std::string& sandbox, const CgroupLimits& limits) override {
    SandboxCgroups out;
    for (const auto& root : roots_) {
      // Each join is a cgroup migration (slow on v1): skip cpu when there is no quota.
      if (root.controller == "cpu" && limits.cpu_millis == 0 && !total_cpu_) continue;
      std::string dir = root.path + "/" + sandbox;
      make_dir(dir);
      out.join_dirs.push_back(dir);
      if (root.controller == "memory" && limits.memory_bytes > 0) {
        write_file(dir + "/memory.limit_in_bytes", std::to_string(limits.memory_bytes));
        // With swap accounting on, the limit covers memory and swap together.
        if (exists(dir + "/memory.memsw.limit_in_bytes"))
          write_file(dir + "/memory.memsw.limit_in_bytes", std::to_string(limits.memory_bytes));
        try_write_file(dir + "/memory.swappiness", "0");
      } else if (root.controller == "pids" && limits.pids > 0) {
        write_file(dir + "/pids.max", std::to_string(limits.pids));
      } else if (root.controller == "cpu" && limits.cpu_millis > 0) {
        write_file(dir + "/cpu.cfs_period_us", "100000");
        write_file(dir + "/cpu.cfs_quota_us", std::to_string(limits.cpu_millis * 100));
      }
    }
    if (const Root* freezer = find("freezer")) {
      out.exec_parent = freezer->path + "/" + sandbox;
      out.kill_method = KillMethod::kFreezer;
    } else {
      const Root* any = find("pids") ? find("pids") : &roots_.front();
      out.exec_parent = any->path + "/" + sandbox;
      out.kill_method = KillMethod::kSignalLoop;
    }
    return out;
  }

  void destroy(const std::string& sandbox) override {
    for (const Root* root : freezer_first())
      remove_tree(root->path + "/" + sandbox,
                  root->controller == "freezer" ? KillMethod::kFreezer : KillMethod::kSignalLoop);
  }

  size_t thaw(const std::string& sandbox) override {
    const Root* freezer = find("freezer");
    return freezer ? thaw_tree(freezer->path + "/" + sandbox) : 0;
  }

  bool freeze(const std::string& sandbox) override {
    const Root* freezer = find("freezer");
    if (!freezer) return false;
    write_file(freezer->path + "/" + sandbox + "/freezer.state", "FROZEN");
    return true;
  }

  size_t destroy_all() override {
    size_t found = 0;
    for (const Root* root : freezer_first()) {
      std::vector<std::string> names = list_children(root->path);
      found = std::max(found, names.size());
      for (const auto& name : names)
        remove_tree(root->path + "/" + name,
                    root->controller == "freezer" ? KillMethod::kFreezer : KillMethod::kSignalLoop);
    }
    return found;
  }

  void remove_instance() override {
    for (const auto& root : roots_) rmdir(root.path.c_str());
  }

  uint64_t memory_usage(const std::string& sandbox) const override {
    const Root* memory = find("memory");
    if (!memory) return 0;
    return std::strtoull(read_file(memory->path + "/" + sandbox + "/memory.usage_in_bytes").c_str(), nullptr,
                         10);
  }

  std::optional<uint64_t> cpu_usage_usec(const std::string& sandbox) const override {
    // cpuacct where it rides on the cpu hierarchy (cpu,cpuacct mounted together) and the
    // sandbox joined it (it does when it has a CPU quota).
    if (const Root* cpu = find("cpu"))
      if (const std::string path = cpu->path + "/" + sandbox + "/cpuacct.usage"; exists(path))
        return std::strtoull(read_file(path).c_str(), nullptr, 10) / 1000;  // (nanoseconds)
    // Otherwise the CPU time of the processes in its cgroup, without one more join (a
    // migration, slow on v1) at every start: each one's own time and what its children
    // that it has waited for used (cutime, cstime). What ended is in its waiting parent's
    // figures, PID 1's at the last (it reaps the orphans), so nothing counts twice.
    const Root* members = find("memory") ? find("memory") : find("pids");
    if (!members) return std::nullopt;
    const std::string procs = read_file(members->path + "/" + sandbox + "/cgroup.procs");
    if (procs.empty()) return std::nullopt;
    const long ticks_per_second = sysconf(_SC_CLK_TCK);
    if (ticks_per_second <= 0) return std::nullopt;
    uint64_t ticks = 0;
    for (const char* at = procs.c_str(); *at;) {
      char* end = nullptr;
      const unsigned long pid = std::strtoul(at, &end, 10);
      if (end == at) break;
      at = *end ? end + 1 : end;
      ticks += process_cpu_ticks(pid);
    }
    return ticks * 1'000'000 / static_cast<uint64_t>(ticks_per_second);
  }

  uint64_t oom_kills(const std::string& sandbox) const override {
    const Root* memory = find("memory");
    if (!memory) return 0;
    std::string control = read_file(memory->path + "/" + sandbox + "/memory.oom_control");
    auto pos = control.find("oom_kill ");
    return pos == std::string::npos ? 0 : std::strtoull(control.c_str() + pos + 9, nullptr, 10);
  }

 private:
  struct Root {
    std::string controller;
    std::string path;
  };

  // The freezer's hierarchy first: its kill is race-free and thaws what was left frozen
  // (a frozen process takes no SIGKILL, so the other hierarchies' signal loops, where
  // the same processes are, would spin on it until their bound).
  std::vector<const Root*> freezer_first() const {
    std::vector<const Root*> order;
    for (const auto& root : roots_)
      if (root.controller == "freezer") order.push_back(&root);
    for (const auto& root : roots_)
      if (root.controller != "freezer") order.push_back(&root);
    return order;
  }

  const Root* find(const std::string& controller) const {
    for (const auto& root : roots_)
      if (root.controller == controller) return &root;
    return nullptr;
  }

  std::vector<Root> roots_;
  bool total_cpu_ = false;  // a CPU cap on all sandboxes: each must join the cpu hierarchy
};

}  // namespace

std::unique_ptr<CgroupBackend> make_cgroup_v1(const CgroupOptions& options) {
  return std::make_unique<CgroupV1>(options);
}

}  // namespace sandboxd::runtime
