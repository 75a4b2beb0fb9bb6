#include "runtime/user.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "runtime/fd_passing.h"
#include "runtime/syscall_error.h"

namespace sandboxd::runtime {
int run_userns_holder(int argc, char** argv) {
  constexpr int kReportFd = 3;
  char byte = 'o';
  auto fail = [&] {
    byte = 'e';
    return write(kReportFd, &byte, 1) == 1 ? 1 : 2;
  };
  if (argc < 4) return fail();
  const uid_t uid = static_cast<uid_t>(std::strtoul(argv[2], nullptr, 10));
  const gid_t gid = static_cast<gid_t>(std::strtoul(argv[3], nullptr, 10));
  if (uid == 0 || gid == 0) return fail();
  // The namespace's process limit is this process's RLIMIT_NPROC (root's soft limit
  // otherwise); the sandboxes' cgroups bound processes instead.
  rlimit unlimited{RLIM_INFINITY, RLIM_INFINITY};
  setrlimit(RLIMIT_NPROC, &unlimited);
  // The namespace's owner is whoever creates it: the unprivileged uid. The capabilities
  // stay across the uid change (no fix-up), for hosts that allow only privileged
  // processes to create user namespaces.
  if (prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP, 0, 0, 0) != 0 || setgroups(0, nullptr) != 0 ||
      setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0)
    return fail();
  if (unshare(CLONE_NEWUSER) != 0) return fail();
  // Full capabilities in the new namespace: CAP_SYS_RESOURCE there lets this process set
  // the namespace's own /proc/sys/user limits.
  for (int i = 4; i < argc; ++i) {
    std::string_view entry = argv[i];
    auto eq = entry.find('=');
    if (eq == std::string_view::npos) return fail();
    std::string name(entry.substr(0, eq));
    for (char c : name)
      if (!((c >= 'a' && c <= 'z') || c == '_')) return fail();
    std::string value(entry.substr(eq + 1));
    int fd = open(("/proc/sys/user/" + name).c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) continue;  // an older kernel without that counter
      // A container engine mounts /proc/sys read-only (Docker does): the namespace
      // still belongs to the unprivileged uid, so its counters are charged to that uid
      // and never to root; only the per-sandbox share below it is not set.
      if (errno == EROFS) break;
      return fail();
    }
    bool written = write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
    close(fd);
    if (!written) return fail();
  }
  // The namespace goes to the server as a descriptor this process opens on itself: the
  // server opening /proc/<pid>/ns/user of a process of another uid would need
  // CAP_SYS_PTRACE, which the service's unit (and a container) does not grant.
  int ns = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
  if (ns < 0) return fail();
  if (send_byte_with_fd(kReportFd, byte, ns) != 0) return 1;
  close(ns);
  while (read(kReportFd, &byte, 1) > 0) {
  }
  return 0;
}

int read_last_cap() {
  int last = CAP_LAST_CAP;
  if (FILE* f = std::fopen("/proc/sys/kernel/cap_last_cap", "re")) {
    if (std::fscanf(f, "%d", &last) != 1) last = CAP_LAST_CAP;
    std::fclose(f);
  }
  return last;
}

}  // namespace sandboxd::runtime
