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
int run_userns_holder() {
  constexpr int kReportFd = 3;
  char byte = unshare(CLONE_NEWUSER) == 0 ? 'o' : 'e';
  if (write(kReportFd, &byte, 1) != 1 || byte != 'o') return 1;
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
