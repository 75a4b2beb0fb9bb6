// Test and benchmark support: what a server's containers hold on the host, read from the
// host's own tables and scoped to one data directory (other servers on the host do not
// count): loop devices backed by its files, mounts below it, and the cgroup folders of
// its runtime instance (named "s" + the first 16 hex digits of the data directory's
// SHA-256, see app/serve.cc).
#pragma once

#include <fcntl.h>
#include <glob.h>
#include <linux/loop.h>
#include <signal.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace sandboxd::testing::host {

namespace fs = std::filesystem;

inline std::vector<std::string> glob_paths(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t found{};
  if (glob(pattern.c_str(), 0, nullptr, &found) == 0)
    for (size_t i = 0; i < found.gl_pathc; ++i) out.push_back(found.gl_pathv[i]);
  globfree(&found);
  return out;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Loop devices whose backing file is in the data directory.
inline int loop_devices(const fs::path& data_dir) {
  int n = 0;
  for (const auto& file : glob_paths("/sys/block/loop*/loop/backing_file"))
    if (slurp(file).rfind(data_dir.string() + "/", 0) == 0) ++n;
  return n;
}

// Host mounts at or below `data_dir` (mount point, 5th field of mountinfo); every
// mount of the host when `data_dir` is empty.
inline int mounts(const fs::path& data_dir = {}) {
  std::istringstream info(slurp("/proc/self/mountinfo"));
  int n = 0;
  for (std::string line; std::getline(info, line);) {
    std::istringstream fields(line);
    std::string field;
    for (int i = 0; i < 5; ++i) fields >> field;
    if (data_dir.empty() || field.rfind(data_dir.string() + "/", 0) == 0 || field == data_dir.string()) ++n;
  }
  return n;
}

// The server's cgroup instance folders (one per v1 hierarchy, or the v2 one).
inline std::vector<std::string> instance_dirs(const fs::path& data_dir) {
  std::string digest;
  if (FILE* p = popen(("printf %s '" + data_dir.string() + "' | sha256sum").c_str(), "r")) {
    char buf[17] = {};
    if (fread(buf, 1, 16, p) == 16) digest = buf;
    pclose(p);
  }
  if (digest.size() != 16) return {};
  std::vector<std::string> out = glob_paths("/sys/fs/cgroup/*/sandboxd/s" + digest);
  for (const auto& v2 : glob_paths("/sys/fs/cgroup/sandboxd/s" + digest)) out.push_back(v2);
  return out;
}

// Cgroup folders below the instance, at any depth (sandboxes and their executions).
inline int cgroups(const fs::path& data_dir) {
  int n = 0;
  for (const auto& dir : instance_dirs(data_dir)) {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      if (it->is_directory(ec)) ++n;
  }
  return n;
}

// Removes what a server killed with SIGKILL left of `data_dir` on the host, as the
// next start of the same data directory would (a test that kills a server and does not
// start it again cleans up after it): the processes in its cgroup instance (thawed
// first: a PID 1 killed mid-freeze leaves its command's cgroup frozen), the cgroup
// folders, deepest first, then the mounts at and below the data directory, deepest first, and
// the loop devices backed by its files. Returns what it could not remove, one line each.
inline std::string clean(const fs::path& data_dir) {
  std::string failed;
  std::vector<std::string> dirs;  // every cgroup folder, parents before children
  for (const auto& instance : instance_dirs(data_dir)) {
    dirs.push_back(instance);
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(instance, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_directory(ec)) dirs.push_back(it->path().string());
  }
  for (const auto& dir : dirs)
    if (fs::exists(dir + "/freezer.state")) std::ofstream(dir + "/freezer.state") << "THAWED";
  for (int round = 0; round < 500; ++round) {
    bool any = false;
    for (const auto& dir : dirs) {
      std::ifstream procs(dir + "/cgroup.procs");
      for (pid_t pid; procs >> pid;) {
        any = true;
        ::kill(pid, SIGKILL);
      }
    }
    if (!any) break;
    usleep(10'000);
  }
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    bool removed = false;
    for (int attempt = 0; attempt < 200 && !removed; ++attempt) {
      removed = ::rmdir(it->c_str()) == 0 || errno == ENOENT;
      if (!removed) usleep(5'000);
    }
    if (!removed) failed += "rmdir(" + *it + "): " + std::strerror(errno) + "\n";
  }
  std::vector<std::string> points;
  std::istringstream info(slurp("/proc/self/mountinfo"));
  for (std::string line; std::getline(info, line);) {
    std::istringstream fields(line);
    std::string field;
    for (int i = 0; i < 5; ++i) fields >> field;
    if (field == data_dir.string() || field.rfind(data_dir.string() + "/", 0) == 0) points.push_back(field);
  }
  std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  for (const auto& point : points)
    if (::umount2(point.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
      failed += "umount2(" + point + ", MNT_DETACH): " + std::strerror(errno) + "\n";
  for (const auto& file : glob_paths("/sys/block/loop*/loop/backing_file")) {
    if (slurp(file).rfind(data_dir.string() + "/", 0) != 0) continue;
    const std::string name = file.substr(11, file.find('/', 11) - 11);  // /sys/block/<name>/loop/...
    const std::string device = "/dev/" + name;
    const int fd = ::open(device.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::ioctl(fd, LOOP_CLR_FD, 0) != 0) {
      // A device still held (a lazily detached mount): cleared by the kernel once released.
      if (errno != ENXIO && errno != EBUSY)
        failed += "LOOP_CLR_FD(" + device + "): " + std::strerror(errno) + "\n";
    }
    if (fd >= 0) ::close(fd);
  }
  return failed;
}

}  // namespace sandboxd::testing::host
