#include "runtime/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <linux/magic.h>

#include <cerrno>
#include <cstdio>

#include "runtime/cgroup_kill.h"
#include "runtime/syscall_error.h"

namespace sandboxd::runtime {
namespace cgroupfs {

void write_file(const std::string& path, const std::string& value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw SyscallError("open(" + path + ")", errno);
  ssize_t n = write(fd, value.data(), value.size());
  int err = errno;
  close(fd);
  if (n < 0) throw SyscallError("write(" + path + ", \"" + value + "\")", err);
}

bool try_write_file(const std::string& path, const std::string& value) {
  try {
    write_file(path, value);
    return true;
  } catch (const SyscallError&) {
    return false;
  }
}

std::string read_file(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

void make_dir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) throw SyscallError("mkdir(" + path + ")", errno);
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::vector<std::string> list_children(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* entry = readdir(d))
      if (entry->d_type == DT_DIR && entry->d_name[0] != '.') names.emplace_back(entry->d_name);
    closedir(d);
  }
  return names;
}

void remove_tree(const std::string& dir, KillMethod method) {
  if (!exists(dir)) return;
  for (const auto& child : list_children(dir)) remove_tree(dir + "/" + child, method);
  int fd = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    if (!cgroup_is_empty(fd)) kill_cgroup_tree(fd, method);
    close(fd);
  }
  // A memory cgroup can refuse rmdir for a moment after its last task exits.
  for (int attempt = 0; attempt < 200; ++attempt) {
    if (rmdir(dir.c_str()) == 0 || errno == ENOENT) return;
    if (errno != EBUSY) break;
    usleep(1000);
  }
  throw SyscallError("rmdir(" + dir + ")", errno);
}

size_t thaw_tree(const std::string& dir) {
  size_t thawed = 0;
  const std::string state = read_file(dir + "/freezer.state");
  if (!state.empty() && state.rfind("THAWED", 0) != 0) {
    try {
      write_file(dir + "/freezer.state", "THAWED");
    } catch (const SyscallError& e) {
      if (e.code() == ENOENT) return thawed;  // removed meanwhile: nothing left to thaw
      std::fprintf(stderr, "sandboxd: %s\n", e.what());
    }
    ++thawed;
  }
  for (const auto& child : list_children(dir)) thawed += thaw_tree(dir + "/" + child);
  return thawed;
}

}  // namespace cgroupfs

std::unique_ptr<CgroupBackend> detect_cgroups(const CgroupOptions& options) {
  if (options.mode == "v1") return make_cgroup_v1(options);
  if (options.mode == "v2") return make_cgroup_v2(options);
  struct statfs fs;
  if (statfs(options.v2_root.c_str(), &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC &&
      !cgroupfs::read_file(options.v2_root + "/cgroup.controllers").empty())
    return make_cgroup_v2(options);
  return make_cgroup_v1(options);
}

}  // namespace sandboxd::runtime
