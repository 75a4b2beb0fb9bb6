#include "runtime/confinement.h"

#include <linux/capability.h>
#include <linux/prctl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/resource.h>

#include "runtime/child_syscalls.h"
#include "runtime/user.h"

namespace sandboxd::runtime {

long become_confined_agent(const CommandContext& ctx, const char** step) {
  long rc;
  if (ctx.max_open_files > 0) {
    rlimit limit{ctx.max_open_files, ctx.max_open_files};
    if ((rc = sys(SYS_prlimit64, 0, RLIMIT_NOFILE, reinterpret_cast<long>(&limit), 0)) < 0)
      return *step = "setrlimit(RLIMIT_NOFILE)", rc;
  }
  // The agent: the sandbox's user namespace, uid/gid 1000, no capabilities in any set.
  // Raw syscalls, no libc: this runs in a child that shares the parent's memory.
  if ((rc = sys(SYS_setns, ctx.userns_fd, CLONE_NEWUSER)) < 0) return *step = "setns(CLONE_NEWUSER)", rc;
  gid_t groups[1] = {kAgentGid};
  if ((rc = sys(SYS_setgroups, 1, reinterpret_cast<long>(groups))) < 0)
    return *step = "setgroups([1000])", rc;
  if ((rc = sys(SYS_setresgid, kAgentGid, kAgentGid, kAgentGid)) < 0) return *step = "setresgid(1000)", rc;
  if ((rc = sys(SYS_setresuid, kAgentUid, kAgentUid, kAgentUid)) < 0) return *step = "setresuid(1000)", rc;
  // The uid change set the (possibly shared) address space's dumpable flag to
  // fs.suid_dumpable: back to 0 at once, as PID 1 itself has it.
  if ((rc = sys(SYS_prctl, PR_SET_DUMPABLE, 0)) < 0) return *step = "prctl(PR_SET_DUMPABLE, 0)", rc;
  // Root of this namespace is unmapped, so setresuid did not clear capabilities the way
  // it would for a real root: drop every set explicitly (bounding first, it needs
  // CAP_SETPCAP).
  for (int cap = 0; cap <= ctx.last_cap; ++cap)
    if ((rc = sys(SYS_prctl, PR_CAPBSET_DROP, cap)) < 0 && rc != -EINVAL)
      return *step = "prctl(PR_CAPBSET_DROP)", rc;
  if ((rc = sys(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)) < 0 && rc != -EINVAL)
    return *step = "prctl(PR_CAP_AMBIENT_CLEAR_ALL)", rc;
  __user_cap_header_struct cap_header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct cap_data[2] = {};
  if ((rc = sys(SYS_capset, reinterpret_cast<long>(&cap_header), reinterpret_cast<long>(cap_data))) < 0)
    return *step = "capset(0)", rc;
  // no_new_privs and the seccomp filter (the same steps as apply_seccomp in seccomp.cc).
  if ((rc = sys(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) < 0)
    return *step = "prctl(PR_SET_NO_NEW_PRIVS)", rc;
  sock_fprog prog{static_cast<unsigned short>(ctx.seccomp->instructions.size()),
                  const_cast<sock_filter*>(ctx.seccomp->instructions.data())};
  if ((rc = sys(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, reinterpret_cast<long>(&prog))) < 0)
    return *step = "prctl(PR_SET_SECCOMP)", rc;
  return 0;
}

}  // namespace sandboxd::runtime
