// Escape and exhaustion attempts, made from inside a real sandbox the way an attacker
// would make them. Each must fail inside the sandbox and change nothing outside it.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <array>
#include <cstring>
#include <set>

#include "runtime/seccomp.h"
#include "sandbox_fixture.h"

using namespace sandboxd::testing;
using namespace std::chrono_literals;

namespace {

class SecurityTest : public SandboxSuite {
 protected:
  void start(rt::CgroupLimits limits = {}) {
    auto options = harness->options_for(*dirs);
    options.limits = limits;
    sandbox = harness->start(options);
  }
  rt::ExecResult run(const std::string& command, std::chrono::milliseconds timeout = 30s) {
    if (!sandbox) start();
    return harness->exec(*sandbox, command, timeout);
  }
};

TEST_F(SecurityTest, NoCapabilitiesNoNewPrivsAndASeccompFilter) {
  auto r =
      run("grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t' ' '");
  EXPECT_EQ(r.stdout_text,
            "CapInh: 0000000000000000\nCapPrm: 0000000000000000\nCapEff: 0000000000000000\n"
            "CapBnd: 0000000000000000\nCapAmb: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2\n");
}

TEST_F(SecurityTest, CannotSeeHostProcesses) {
  // A host process with a recognisable command line.
  pid_t marker = fork();
  if (marker == 0) {
    execl("/bin/sleep", "sleep", "4242.5", nullptr);
    _exit(1);
  }
  auto r = run("ps -eo pid=,args= ; ls /proc | grep -c '^[0-9]'");
  kill(marker, SIGKILL);
  waitpid(marker, nullptr, 0);
  EXPECT_EQ(r.stdout_text.find("4242.5"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("    1 "), std::string::npos) << "PID 1 is sandboxd-init";
  // PID 1, the command template, the child waiting for the next command, this shell,
  // ls and wc.
  auto count = run("ls -d /proc/[0-9]* | wc -l");
  EXPECT_LE(std::stoi(count.stdout_text), 6) << "only the sandbox's own processes";
}

TEST_F(SecurityTest, CannotReadHostFilesOutsideTheImage) {
  fs::path secret = dirs->root / "server-secret.yaml";
  write_text(secret, "token: hunter2\n");
  auto r = run("cat " + secret.string() +
               " 2>&1; cat /etc/shadow 2>&1; ls /root 2>&1; "
               "ls /var/lib 2>&1; cat /proc/1/environ 2>&1; ls /proc/1/fd 2>&1; grep -r hunter2 /etc /home "
               "/tmp /mnt 2>/dev/null; "
               "find / -xdev -name 'server-secret.yaml' 2>/dev/null");
  EXPECT_EQ(r.stdout_text.find("hunter2"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find(secret.string() + ": No such file or directory"), std::string::npos)
      << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("/etc/shadow: No such file or directory"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("/proc/1/environ: Permission denied"), std::string::npos) << r.stdout_text;
}

TEST_F(SecurityTest, CannotWriteTheImageUploadsOrSkills) {
  auto r = run(R"(
    for p in /usr/bin/evil /etc/evil /bin/evil /lib/evil /evil /mnt/user-data/uploads/evil /mnt/skills/evil /proc/sys/kernel/hostname /sys/kernel/evil; do
      (echo x > $p) 2>/dev/null && echo "wrote $p"
    done
    chmod 777 /usr/bin 2>/dev/null && echo chmod-ok
    echo done)");
  EXPECT_EQ(r.stdout_text, "done\n");
  EXPECT_FALSE(fs::exists(dirs->uploads / "evil"));
  EXPECT_FALSE(fs::exists("/usr/bin/evil"));
}

TEST_F(SecurityTest, MountUnshareChrootAndSetuidFail) {
  auto r = run(R"(
    mount -t tmpfs none /tmp 2>/dev/null && echo mount-ok
    mount --bind / /tmp 2>/dev/null && echo bind-ok
    unshare -U true 2>/dev/null && echo unshare-user-ok
    unshare -m true 2>/dev/null && echo unshare-mount-ok
    unshare -n true 2>/dev/null && echo unshare-net-ok
    chroot / true 2>/dev/null && echo chroot-ok
    su -c id root </dev/null 2>/dev/null && echo su-ok
    command -v su >/dev/null && ls -l $(command -v su) | cut -c4
    mknod /tmp/mem c 1 1 2>/dev/null && echo mknod-ok
    mknod /dev/shm/sda b 8 0 2>/dev/null && echo mknod-block-ok
    cat /proc/kcore >/dev/null 2>&1 && echo kcore-ok
    echo b > /proc/sysrq-trigger 2>/dev/null && echo sysrq-ok
    echo done)");
  EXPECT_EQ(r.stdout_text, "s\ndone\n")
      << "su is setuid on the host image but gains nothing: " << r.stdout_text;
}

TEST_F(SecurityTest, SeccompRefusesDangerousSyscalls) {
  // Raw syscalls through Python's ctypes: each must fail with EPERM (or ENOSYS for clone3).
  auto r = run(R"SH(python3 - <<'EOF'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
calls = {
  "unshare(NEWUSER)": (272, 0x10000000), "setns": (308, 0, 0), "mount": (165, 0, 0, 0, 0, 0),
  "umount2": (166, 0, 0), "pivot_root": (155, 0, 0), "chroot": (161, 0), "bpf": (321, 0, 0, 0),
  "perf_event_open": (298, 0, 0, 0, 0, 0), "keyctl": (250, 0, 0), "add_key": (248, 0, 0, 0, 0, 0),
  "request_key": (249, 0, 0, 0, 0), "userfaultfd": (323, 0), "open_by_handle_at": (304, 0, 0, 0),
  "kexec_load": (246, 0, 0, 0, 0), "init_module": (175, 0, 0, 0), "finit_module": (313, 0, 0, 0),
  "delete_module": (176, 0, 0), "reboot": (169, 0, 0, 0, 0), "swapon": (167, 0, 0),
  "swapoff": (168, 0), "iopl": (172, 3), "ioperm": (173, 0, 0, 1), "acct": (163, 0),
  "settimeofday": (164, 0, 0), "clock_settime": (227, 0, 0), "clock_adjtime": (305, 0, 0),
  "adjtimex": (159, 0), "io_uring_setup": (425, 1, 0), "clone(NEWNS)": (56, 0x00020000 | 17, 0, 0, 0, 0),
  "clone(NEWNET)": (56, 0x40000000 | 17, 0, 0, 0, 0), "clone3": (435, 0, 0),
}
for name, args in calls.items():
  rc = libc.syscall(*[ctypes.c_long(a) for a in args])
  err = ctypes.get_errno()
  print(name, "refused" if rc == -1 and err in (1, 38) else "ALLOWED rc=%d errno=%d" % (rc, err))
EOF
)SH");
  EXPECT_EQ(r.stdout_text.find("ALLOWED"), std::string::npos) << r.stdout_text << r.stderr_text;
  EXPECT_NE(r.stdout_text.find("clone3 refused"), std::string::npos) << r.stdout_text << r.stderr_text;
  // Ordinary process creation still works (glibc falls back from clone3 to clone).
  auto fork_ok = run(
      "python3 -c 'import os; pid = os.fork(); os._exit(0) if pid == 0 else print(os.waitpid(pid, 0)[1])'");
  EXPECT_EQ(fork_ok.stdout_text, "0\n");
}

TEST_F(SecurityTest, OnlyLoopbackAndNoRouteToTheHost) {
  // A host loopback listener the sandbox must not reach.
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 8), 0);
  socklen_t len = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  auto r =
      run("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; "
          "timeout 5 bash -c 'echo > /dev/tcp/127.0.0.1/" +
          std::to_string(port) +
          "' 2>/dev/null && echo reached-host; "
          // No route at all (checked from the tables: no packet is sent anywhere).
          "cat /proc/net/route | tail -n +2 | wc -l; "
          "grep -vc ' lo$' /proc/net/ipv6_route; "
          "start=$(date +%s%N); getent hosts example.com || echo no-name; "
          "echo $(( ($(date +%s%N) - start) / 1000000 < 1000 ))");
  close(listener);
  EXPECT_EQ(r.stdout_text, "lo\n0\n0\nno-name\n1\n") << r.stderr_text;
}

TEST_F(SecurityTest, ForkBombIsContainedAndTheSandboxStaysUsable) {
  rt::CgroupLimits limits;
  limits.pids = 64;
  start(limits);
  auto bomb = run("bomb() { bomb | bomb & }; bomb; sleep 30", 3s);
  EXPECT_EQ(bomb.return_code, 124);
  auto after = run("echo alive; ps -e --no-headers | wc -l");
  EXPECT_EQ(after.stdout_text.substr(0, 6), "alive\n") << after.stderr_text;
  // PID 1, the command template, the next command's child, this shell, ps and wc.
  EXPECT_LE(std::stoi(after.stdout_text.substr(6)), 6) << "the bomb's tree was killed with its call";
}

TEST_F(SecurityTest, MemoryBombIsKilledInsideOnly) {
  rt::CgroupLimits limits;
  limits.memory_bytes = 64ull << 20;
  start(limits);
  auto bomb = run("python3 -c 'x = bytearray(512 * 1024 * 1024); print(len(x))'");
  EXPECT_EQ(bomb.return_code, 128 + SIGKILL) << bomb.stdout_text << bomb.stderr_text;
  EXPECT_GE(harness->runtime->cgroups().oom_kills(sandbox->name()), 1u);
  auto after = run("echo alive");
  EXPECT_EQ(after.stdout_text, "alive\n") << "PID 1 survived the OOM kill";
}

TEST_F(SecurityTest, CpuQuotaIsApplied) {
  rt::CgroupLimits limits;
  limits.cpu_millis = 250;
  start(limits);
  // Busy loop for 2 s of wall time: with a quarter CPU it gets about 0.5 s of CPU time.
  auto r = run("timeout 2 bash -c 'while :; do :; done'; times > /tmp/times; tail -1 /tmp/times");
  EXPECT_EQ(r.return_code, 0) << r.stderr_text;
  // `times` prints the children's user and system time: "XmY.YYYs XmY.YYYs".
  double user = 0, sys = 0;
  int um = 0, sm = 0;
  ASSERT_EQ(std::sscanf(r.stdout_text.c_str(), "%dm%lfs %dm%lfs", &um, &user, &sm, &sys), 4) << r.stdout_text;
  double cpu = um * 60 + user + sm * 60 + sys;
  EXPECT_LT(cpu, 1.2) << "CPU time under a 0.25 CPU quota over 2 s";
  EXPECT_GT(cpu, 0.1);
}

TEST_F(SecurityTest, OtherSandboxesAreInvisible) {
  start();
  ContainerDirs other_dirs(harness->runtime->options().host_uid, harness->runtime->options().host_gid);
  auto other = harness->start(harness->options_for(other_dirs));
  harness->exec(*other, "echo private > secret.txt; sleep 300 >/dev/null 2>&1 &");
  auto r = run("ls -la / /home /mnt 2>&1; ps -e -o args=; find / -name secret.txt 2>/dev/null; echo end");
  harness->stop(*other);
  EXPECT_EQ(r.stdout_text.find("workspace/secret.txt"), std::string::npos);
  EXPECT_EQ(r.stdout_text.find("sleep 300"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("end"), std::string::npos);
}

}  // namespace

namespace {

// The seccomp filter itself, apart from the capabilities. Inside a sandbox most of the
// calls above fail with EPERM for want of a capability even with no filter, so
// SeccompRefusesDangerousSyscalls cannot tell a missing rule from a dropped capability.
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
