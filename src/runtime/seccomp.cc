#include "runtime/seccomp.h"

#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "runtime/syscall_error.h"

namespace sandboxd::runtime {
namespace {

// Always refused, whatever the arguments.
constexpr const char* kDenied[] = {"mount",
                                   "umount",
                                   "umount2",
                                   "pivot_root",
                                   "chroot",
                                   "unshare",
                                   "setns",
                                   "move_mount",
                                   "open_tree",
                                   "fsopen",
                                   "fsconfig",
                                   "fsmount",
                                   "fspick",
                                   "mount_setattr",
                                   "kexec_load",
                                   "kexec_file_load",
                                   "init_module",
                                   "finit_module",
                                   "delete_module",
                                   "create_module",
                                   "get_kernel_syms",
                                   "query_module",
                                   "bpf",
                                   "perf_event_open",
                                   "keyctl",
                                   "add_key",
                                   "request_key",
                                   "userfaultfd",
                                   "open_by_handle_at",
                                   "name_to_handle_at",
                                   "reboot",
                                   "swapon",
                                   "swapoff",
                                   "iopl",
                                   "ioperm",
                                   "acct",
                                   "settimeofday",
                                   "clock_settime",
                                   "clock_adjtime",
                                   "adjtimex",
                                   "stime",
                                   "lookup_dcookie",
                                   "quotactl",
                                   "quotactl_fd",
                                   "nfsservctl",
                                   "vhangup",
                                   "syslog",
                                   "uselib",
                                   "_sysctl",
                                   "sysfs",
                                   "ustat",
                                   "fanotify_init",
                                   "pciconfig_read",
                                   "pciconfig_write",
                                   "pciconfig_iobase",
                                   "vm86",
                                   "vm86old",
                                   "io_uring_setup",
                                   "io_uring_enter",
                                   "io_uring_register"};

constexpr scmp_datum_t kNamespaceFlags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                         CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP | CLONE_NEWTIME;

struct CtxDeleter {
  void operator()(scmp_filter_ctx ctx) const { seccomp_release(ctx); }
};

void add(scmp_filter_ctx ctx, int action, int nr, unsigned count, const scmp_arg_cmp* args,
         const std::string& what) {
  int rc = seccomp_rule_add_array(ctx, action, nr, count, args);
  if (rc < 0) throw SyscallError("seccomp_rule_add(" + what + ")", -rc);
}

}  // namespace

SeccompProgram build_seccomp_program() {
  std::unique_ptr<void, CtxDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) throw SyscallError("seccomp_init(SCMP_ACT_ALLOW)", ENOMEM);
  // Only the native architecture is added: a 32-bit syscall (int 0x80) is killed,
  // which closes the classic ABI-confusion bypasses.
  const int eperm = SCMP_ACT_ERRNO(EPERM);
  for (const char* name : kDenied) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    add(ctx.get(), eperm, nr, 0, nullptr, name);
  }
  // clone: refused when it asks for a new namespace. clone3 passes flags in memory
  // that seccomp cannot read, so it answers ENOSYS and libc falls back to clone.
  for (scmp_datum_t bit = 1; bit != 0; bit <<= 1) {
    if (!(kNamespaceFlags & bit)) continue;
    scmp_arg_cmp has_bit = SCMP_A0(SCMP_CMP_MASKED_EQ, bit, bit);
    add(ctx.get(), eperm, SCMP_SYS(clone), 1, &has_bit, "clone(CLONE_NEW*)");
  }
  add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0, nullptr, "clone3");
  // TIOCSTI and TIOCLINUX push input into a terminal: refused.
  scmp_arg_cmp tiocsti = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI);
  add(ctx.get(), eperm, SCMP_SYS(ioctl), 1, &tiocsti, "ioctl(TIOCSTI)");
  scmp_arg_cmp tioclinux = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX);
  add(ctx.get(), eperm, SCMP_SYS(ioctl), 1, &tioclinux, "ioctl(TIOCLINUX)");

  // A device node (character or block): refused, whatever the device. Natively the
  // kernel refuses it already (no CAP_MKNOD in the sandbox's user namespace); gVisor
  // lets an unprivileged process make one in its tmpfs, where it opens the sentry's
  // device of that number. FIFOs and sockets (mkfifo, mknod p) stay allowed.
  for (scmp_datum_t type : {scmp_datum_t{S_IFCHR}, scmp_datum_t{S_IFBLK}}) {
    scmp_arg_cmp mknod_type = SCMP_A1(SCMP_CMP_MASKED_EQ, S_IFMT, type);
    add(ctx.get(), eperm, SCMP_SYS(mknod), 1, &mknod_type, "mknod(device)");
    scmp_arg_cmp mknodat_type = SCMP_A2(SCMP_CMP_MASKED_EQ, S_IFMT, type);
    add(ctx.get(), eperm, SCMP_SYS(mknodat), 1, &mknodat_type, "mknodat(device)");
  }

  // The filter is exported to BPF once, so each command only pays for one prctl.
  int fd = memfd_create("seccomp-bpf", MFD_CLOEXEC);
  if (fd < 0) throw SyscallError("memfd_create(seccomp-bpf)", errno);
  int rc = seccomp_export_bpf(ctx.get(), fd);
  if (rc < 0) {
    close(fd);
    throw SyscallError("seccomp_export_bpf", -rc);
  }
  off_t size = lseek(fd, 0, SEEK_END);
  SeccompProgram program;
  program.instructions.resize(static_cast<size_t>(size) / sizeof(sock_filter));
  ssize_t n = pread(fd, program.instructions.data(), static_cast<size_t>(size), 0);
  close(fd);
  if (n != size) throw SyscallError("pread(seccomp-bpf)", n < 0 ? errno : EIO);
  return program;
}

int apply_seccomp(const SeccompProgram& program, const char** failed_step) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    *failed_step = "prctl(PR_SET_NO_NEW_PRIVS)";
    return -errno;
  }
  sock_fprog prog{static_cast<unsigned short>(program.instructions.size()),
                  const_cast<sock_filter*>(program.instructions.data())};
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) {
    *failed_step = "prctl(PR_SET_SECCOMP)";
    return -errno;
  }
  return 0;
}

}  // namespace sandboxd::runtime
