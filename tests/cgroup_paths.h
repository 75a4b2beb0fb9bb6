// Test support: where a sandbox's cgroups are in the hierarchy this host actually uses,
// so that "its cgroups are gone" is checked on the real paths (a v1 path checked on a
// v2 host never exists and proves nothing). The version is detected the way
// runtime/cgroup.cc's detect_cgroups() picks it; the paths follow cgroup_v1.cc and
// cgroup_v2.cc: <root>/sandboxd/<instance>/<sandbox>.
#pragma once

#include <sys/statfs.h>

#include <linux/magic.h>

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/cgroup.h"
#include "runtime/runtime.h"

namespace sandboxd::testing {

// "v2" when the v2 root is a cgroup2 mount with controllers, "v1" otherwise (the
// "auto" mode of detect_cgroups(); a forced mode is returned as it is).
inline std::string cgroup_version_in_use(const runtime::CgroupOptions& options = {}) {
  if (options.mode == "v1" || options.mode == "v2") return options.mode;
  struct statfs fs;
  if (statfs(options.v2_root.c_str(), &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC &&
      !runtime::cgroupfs::read_file(options.v2_root + "/cgroup.controllers").empty())
    return "v2";
  return "v1";
}

struct SandboxCgroupPaths {
  // Every folder the sandbox has while it runs: on v1 one per hierarchy sandboxd uses
  // (memory, pids, freezer; cpu only under a CPU quota, see `cpu`), on v2 the one
  // unified folder.
  std::vector<std::filesystem::path> always;
  std::filesystem::path cpu;  // v1 with a cpu hierarchy: the folder a CPU quota adds
  // Where each execution gets its own child cgroup (v1: freezer, else pids; v2: the
  // sandbox's folder).
  std::filesystem::path exec_parent;
};

inline SandboxCgroupPaths sandbox_cgroup_paths(const std::string& version,
                                               const runtime::CgroupOptions& options,
                                               const std::string& instance, const std::string& sandbox) {
  namespace fs = std::filesystem;
  SandboxCgroupPaths paths;
  if (version == "v2") {
    paths.exec_parent = fs::path(options.v2_root) / "sandboxd" / instance / sandbox;
    paths.always.push_back(paths.exec_parent);
    return paths;
  }
  for (const char* controller : {"memory", "pids", "cpu", "freezer"}) {
    fs::path mount = fs::path(options.v1_root) / controller;
    if (!fs::exists(mount / "cgroup.procs")) continue;  // the backend skips it too
    fs::path dir = mount / "sandboxd" / instance / sandbox;
    if (std::string(controller) == "cpu")
      paths.cpu = dir;
    else
      paths.always.push_back(dir);
    if (std::string(controller) == "freezer" ||
        (std::string(controller) == "pids" && paths.exec_parent.empty()))
      paths.exec_parent = dir;
  }
  if (paths.exec_parent.empty()) paths.exec_parent = paths.always.empty() ? paths.cpu : paths.always.front();
  return paths;
}

// The paths of a sandbox of `runtime` (the version its backend reports).
inline SandboxCgroupPaths sandbox_cgroup_paths(runtime::Runtime& runtime, const std::string& sandbox) {
  return sandbox_cgroup_paths(runtime.cgroups().version(), runtime.options().cgroups,
                              runtime.options().instance, sandbox);
}

}  // namespace sandboxd::testing
