// Escape and exhaustion attempts from inside a real sandbox on the native tier (the suite:
// security_suite.h), and the seccomp filter itself, apart from the sandbox.

#include <fcntl.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <array>
#include <cstring>
#include <set>

#include "runtime/seccomp.h"
#include "security_suite.h"

using namespace sandboxd::testing;

INSTANTIATE_TEST_SUITE_P(Native, SecurityTest, ::testing::Values(SandboxTier::kNative), sandbox_tier_name);

namespace {

// The seccomp filter itself, apart from the capabilities. Inside a sandbox most of the
// calls of the suite's SeccompRefusesDangerousSyscalls (security_suite.h) fail with EPERM for want of a
// capability even with no filter, so that test cannot tell a missing rule from a dropped capability.
//
// Here a forked child of this test (root, every capability kept) first installs a
// witness filter that answers each probed syscall with ENOTUNIQ, an errno no kernel
// path gives these calls, and then the project's filter. Between two filters that both
// answer with an errno the kernel keeps the newest one's, and an errno beats an allow:
// so a call the project's filter refuses fails with its errno (EPERM; ENOSYS for
// clone3), and a call it lets through reaches the witness and fails with ENOTUNIQ. No
// probed call ever runs in the kernel, whatever the child's privileges.
constexpr int kWitnessErrno = ENOTUNIQ;
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

struct Probe {
  std::string name;
  long nr;
  std::array<long, 6> args{};
  int refused_with;  // the errno of the project's filter; kWitnessErrno: it must allow
};

std::vector<Probe> seccomp_probes() {
  // Refused whatever the arguments: mounts and namespaces, kernel code and state,
  // keys, tracing and handles, devices and I/O ports, time, and io_uring.
  const std::vector<std::string> always_refused = {"mount",
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
                                                   "reboot",
                                                   "swapon",
                                                   "swapoff",
                                                   "acct",
                                                   "syslog",
                                                   "_sysctl",
                                                   "sysfs",
                                                   "ustat",
                                                   "vhangup",
                                                   "uselib",
                                                   "nfsservctl",
                                                   "lookup_dcookie",
                                                   "quotactl",
                                                   "quotactl_fd",
                                                   "bpf",
                                                   "perf_event_open",
                                                   "keyctl",
                                                   "add_key",
                                                   "request_key",
                                                   "userfaultfd",
                                                   "open_by_handle_at",
                                                   "name_to_handle_at",
                                                   "fanotify_init",
                                                   "iopl",
                                                   "ioperm",
                                                   "settimeofday",
                                                   "stime",
                                                   "clock_settime",
                                                   "clock_adjtime",
                                                   "adjtimex",
                                                   "io_uring_setup",
                                                   "io_uring_enter",
                                                   "io_uring_register"};
  std::vector<Probe> probes;
  for (const auto& name : always_refused) {
    int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr < 0) continue;  // not a syscall of this architecture
    probes.push_back({name, nr, {}, EPERM});
  }
  const std::pair<const char*, long> namespaces[] = {
      {"NEWNS", CLONE_NEWNS},         {"NEWUTS", CLONE_NEWUTS},  {"NEWIPC", CLONE_NEWIPC},
      {"NEWUSER", CLONE_NEWUSER},     {"NEWPID", CLONE_NEWPID},  {"NEWNET", CLONE_NEWNET},
      {"NEWCGROUP", CLONE_NEWCGROUP}, {"NEWTIME", CLONE_NEWTIME}};
  for (const auto& [flag, bit] : namespaces)
    probes.push_back({std::string("clone(") + flag + ")", SYS_clone, {bit | SIGCHLD}, EPERM});
  probes.push_back({"clone(SIGCHLD), a plain fork", SYS_clone, {SIGCHLD}, kWitnessErrno});
  probes.push_back({"clone3", SYS_clone3, {}, ENOSYS});
  probes.push_back({"ioctl(TIOCSTI)", SYS_ioctl, {0, TIOCSTI}, EPERM});
  probes.push_back({"ioctl(TIOCLINUX)", SYS_ioctl, {0, TIOCLINUX}, EPERM});
  // The kernel reads an ioctl's request as 32 bits: high bits must not slip past.
  probes.push_back({"ioctl(TIOCSTI with high bits)", SYS_ioctl, {0, (1L << 32) | TIOCSTI}, EPERM});
  probes.push_back({"ioctl(TCGETS)", SYS_ioctl, {0, TCGETS}, kWitnessErrno});
  // A device node is refused, a FIFO is not (the path is NULL: nothing is ever made).
  probes.push_back({"mknod(S_IFCHR)", SYS_mknod, {0, S_IFCHR | 0600, 0x0101}, EPERM});
  probes.push_back({"mknodat(S_IFBLK)", SYS_mknodat, {AT_FDCWD, 0, S_IFBLK | 0600, 0x0800}, EPERM});
  probes.push_back({"mknodat(S_IFIFO)", SYS_mknodat, {AT_FDCWD, 0, S_IFIFO | 0600, 0}, kWitnessErrno});
  return probes;
}

// In a forked child: the witness, then (with_filter) the project's filter, then every
// probe. Returns each probe's errno (0 when a call succeeded).
std::vector<int> run_probes(const std::vector<Probe>& probes, const rt::SeccompProgram* filter) {
  int report[2];
  if (pipe(report) != 0) throw std::runtime_error("pipe failed");
  std::set<long> numbers;
  for (const auto& probe : probes) numbers.insert(probe.nr);
  pid_t child = fork();
  if (child == 0) {
    close(report[0]);
    const pid_t me = getpid();
    scmp_filter_ctx witness = seccomp_init(SCMP_ACT_ALLOW);
    if (!witness) _exit(2);
    for (long nr : numbers)
      if (seccomp_rule_add(witness, SCMP_ACT_ERRNO(kWitnessErrno), static_cast<int>(nr), 0) != 0) _exit(3);
    if (seccomp_load(witness) != 0) _exit(4);
    const char* failed_step = nullptr;
    if (filter && rt::apply_seccomp(*filter, &failed_step) != 0) _exit(5);
    for (const auto& probe : probes) {
      const auto& a = probe.args;
      long rc = syscall(probe.nr, a[0], a[1], a[2], a[3], a[4], a[5]);
      int err = rc < 0 ? errno : 0;
      if (getpid() != me) _exit(0);  // a clone got through: its child leaves at once
      if (write(report[1], &err, sizeof err) != static_cast<ssize_t>(sizeof err)) _exit(6);
    }
    _exit(0);
  }
  close(report[1]);
  std::vector<int> errnos;
  int err = 0;
  while (read(report[0], &err, sizeof err) == static_cast<ssize_t>(sizeof err)) errnos.push_back(err);
  close(report[0]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "probe child status " << status;
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  return errnos;
}

TEST(SeccompFilter, RefusesEachDangerousSyscallItselfWithItsOwnErrno) {
  ASSERT_EQ(geteuid(), 0u) << "the probes run with every capability";
  const auto probes = seccomp_probes();
  ASSERT_GT(probes.size(), 40u);

  // Control: with the witness alone every probe gets the witness's errno, so an EPERM
  // below can only come from the project's filter.
  auto without_filter = run_probes(probes, nullptr);
  ASSERT_EQ(without_filter.size(), probes.size());
  for (size_t i = 0; i < probes.size(); ++i)
    EXPECT_EQ(without_filter[i], kWitnessErrno)
        << probes[i].name << " without the filter: " << strerror(without_filter[i]);

  const rt::SeccompProgram filter = rt::build_seccomp_program();
  auto with_filter = run_probes(probes, &filter);
  ASSERT_EQ(with_filter.size(), probes.size());
  size_t refused = 0;
  for (size_t i = 0; i < probes.size(); ++i) {
    EXPECT_EQ(with_filter[i], probes[i].refused_with)
        << probes[i].name << ": got " << strerror(with_filter[i]) << ", expected "
        << (probes[i].refused_with == kWitnessErrno ? "to be let through" : strerror(probes[i].refused_with));
    refused += with_filter[i] != kWitnessErrno;
  }
  EXPECT_GT(refused, 40u);
}

}  // namespace
