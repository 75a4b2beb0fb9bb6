#include "runtime/user.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "runtime/syscall_error.h"

namespace sandboxd::runtime {
namespace {

void write_file(const std::string& path, const std::string& content) {
  int fd = static_cast<int>(check(open(path.c_str(), O_WRONLY | O_CLOEXEC), "open(" + path + ")"));
  ssize_t n = write(fd, content.data(), content.size());
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(content.size()))
    throw SyscallError("write(" + path + ", \"" + content.substr(0, content.size() - 1) + "\")",
                       n < 0 ? err : EIO);
}

}  // namespace

int create_agent_userns(uint32_t host_uid, uint32_t host_gid) {
  // A short-lived child makes the namespace; the parent (privileged in the parent
  // namespace) writes its maps and keeps a reference through /proc/PID/ns/user.
  int ready[2], release[2];
  check(pipe2(ready, O_CLOEXEC), "pipe2(ready)");
  check(pipe2(release, O_CLOEXEC), "pipe2(release)");
  pid_t child = fork();
  if (child < 0) throw SyscallError("fork(userns holder)", errno);
  if (child == 0) {
    close(ready[0]);
    close(release[1]);
    char byte = unshare(CLONE_NEWUSER) == 0 ? 'o' : 'e';
    (void)!write(ready[1], &byte, 1);
    (void)!read(release[0], &byte, 1);
    _exit(0);
  }
  close(ready[1]);
  close(release[0]);
  auto finish = [&]() {
    close(release[1]);
    close(ready[0]);
    int status;
    retry_eintr([&] { return waitpid(child, &status, 0); });
  };
  char byte = 0;
  if (retry_eintr([&] { return read(ready[0], &byte, 1); }) != 1 || byte != 'o') {
    finish();
    throw SyscallError("unshare(CLONE_NEWUSER)", EPERM);
  }
  int fd = -1;
  try {
    std::string proc = "/proc/" + std::to_string(child);
    write_file(proc + "/uid_map", std::to_string(kAgentUid) + " " + std::to_string(host_uid) + " 1\n");
    write_file(proc + "/gid_map", std::to_string(kAgentGid) + " " + std::to_string(host_gid) + " 1\n");
    fd = static_cast<int>(check(open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC),
                                "open(" + proc + "/ns/user)"));
  } catch (...) {
    finish();
    throw;
  }
  finish();
  return fd;
}

int read_last_cap() {
  int last = CAP_LAST_CAP;
  if (FILE* f = std::fopen("/proc/sys/kernel/cap_last_cap", "re")) {
    if (std::fscanf(f, "%d", &last) != 1) last = CAP_LAST_CAP;
    std::fclose(f);
  }
  return last;
}

int become_agent(int userns_fd, int last_cap, const char** failed_step) {
  auto fail = [&](const char* step) {
    *failed_step = step;
    return -errno;
  };
  if (setns(userns_fd, CLONE_NEWUSER) != 0) return fail("setns(CLONE_NEWUSER)");
  gid_t groups[1] = {kAgentGid};
  if (setgroups(1, groups) != 0) return fail("setgroups([1000])");
  if (setresgid(kAgentGid, kAgentGid, kAgentGid) != 0) return fail("setresgid(1000)");
  if (setresuid(kAgentUid, kAgentUid, kAgentUid) != 0) return fail("setresuid(1000)");
  // Root of this namespace is unmapped, so setresuid did not clear capabilities the way
  // it would for a real root: drop every set explicitly (bounding first, it needs
  // CAP_SETPCAP).
  for (int cap = 0; cap <= last_cap; ++cap)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
      return fail("prctl(PR_CAPBSET_DROP)");
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
    return fail("prctl(PR_CAP_AMBIENT_CLEAR_ALL)");
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &header, data) != 0) return fail("capset(0)");
  return 0;
}

}  // namespace sandboxd::runtime
