// Escape and exhaustion attempts, made from inside a real sandbox the way an attacker
// would make them. Each must fail inside the sandbox and change nothing outside it.
//
// One suite for both isolation tiers (runtime.isolation), instantiated once per tier by
// security_test.cc (native) and gvisor_security_test.cc (gvisor: its own executable,
// serial, because runsc's ptrace platform stops on every system call of the sandbox). A
// check that cannot hold on one tier says so in its name and skips there with the
// reason (docs/isolation-tiers.md).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "sandbox_fixture.h"

namespace sandboxd::testing {

using namespace std::chrono_literals;

class SecurityTest : public TieredSandboxSuite {
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

TEST_P(SecurityTest, NoCapabilitiesNoNewPrivsAndASeccompFilter) {
  // gVisor's /proc/self/status has no CapAmb and NoNewPrivs lines: no_new_privs is asked
  // of the kernel itself (prctl(PR_GET_NO_NEW_PRIVS) = 39), and an ambient set, where
  // shown, must be empty.
  auto r =
      run("grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|Seccomp):' /proc/self/status | tr -s '\\t' ' ' "
          "| grep -vx 'CapAmb: 0000000000000000'; "
          "python3 -c 'import ctypes; print(\"NoNewPrivs:\", ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))'");
  EXPECT_EQ(r.stdout_text,
            "CapInh: 0000000000000000\nCapPrm: 0000000000000000\nCapEff: 0000000000000000\n"
            "CapBnd: 0000000000000000\nSeccomp: 2\nNoNewPrivs: 1\n")
      << r.stderr_text;
}

TEST_P(SecurityTest, CannotSeeHostProcesses) {
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

TEST_P(SecurityTest, CannotReadHostFilesOutsideTheImage) {
  fs::path secret = dirs->root / "server-secret.yaml";
  write_text(secret, "token: hunter2\n");
  auto r = run("cat " + secret.string() +
               " 2>&1; echo shadow-lines: $(cat /etc/shadow 2>/dev/null | wc -l); ls /root 2>&1; "
               "ls /var/lib 2>&1; grep -r hunter2 /etc /home "
               "/tmp /mnt 2>/dev/null; "
               "find / -xdev -name 'server-secret.yaml' 2>/dev/null");
  EXPECT_EQ(r.stdout_text.find("hunter2"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find(secret.string() + ": No such file or directory"), std::string::npos)
      << r.stdout_text;
  // (Absent natively, an empty placeholder over the host's on the gvisor tier.)
  EXPECT_NE(r.stdout_text.find("shadow-lines: 0\n"), std::string::npos) << r.stdout_text;
}

// PID 1 is root and not dumpable on both tiers: a command can neither read nor write its
// memory. Natively its /proc entries are closed altogether; gVisor (20221219) gates only
// the memory on that, and shows anyone PID 1's environ and maps, which hold nothing of
// the server: the bundle's PATH, and runsc's HOME.
TEST_P(SecurityTest, Pid1sMemoryIsClosedToCommandsAndOnGvisorItsReadableEnvironIsTheBundles) {
  auto r =
      run("dd if=/proc/1/mem of=/dev/null bs=1 count=1 2>&1 | grep -c 'Permission denied'; "
          "cat /proc/1/environ 2>&1 | tr '\\0' '\\n'");
  if (on_gvisor())
    EXPECT_EQ(r.stdout_text, "1\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\nHOME=/root\n");
  else
    EXPECT_EQ(r.stdout_text, "1\ncat: /proc/1/environ: Permission denied\n");
}

TEST_P(SecurityTest, CannotWriteTheImageUploadsOrSkills) {
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

TEST_P(SecurityTest, MountUnshareChrootAndSetuidFail) {
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

TEST_P(SecurityTest, SeccompRefusesDangerousSyscalls) {
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

TEST_P(SecurityTest, OnlyLoopbackAndNoRouteToTheHost) {
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

// A timeout ends the command's whole tree, processes that left its session (setsid) or
// their parent (a double fork) included, while a background process an earlier command
// left keeps running: only a timeout or kill ends a tree, never a command's end.
TEST_P(SecurityTest, ATimeoutEndsProcessesThatLeftTheCommandsSessionAndSparesEarlierOnes) {
  auto earlier = run("nohup sleep 4243 >/dev/null 2>&1 &");
  ASSERT_EQ(earlier.return_code, 0) << earlier.stderr_text;
  // The command waits until both escapees run, so that the timeout meets them.
  auto timed_out =
      run("setsid sleep 4241 >/dev/null 2>&1 & (setsid sh -c 'sleep 4242 >/dev/null 2>&1 &' &); "
          "until [ \"$(ps -eo args= | grep -c '^sleep 424[12]$')\" = 2 ]; do sleep 0.1; done; "
          "echo both-running; sleep 4240",
          on_gvisor() ? 20s : 5s);
  EXPECT_EQ(timed_out.return_code, 124) << timed_out.stderr_text;
  EXPECT_EQ(timed_out.stdout_text, "both-running\n") << "the escapees ran before the timeout";
  auto left = run("ps -eo args= | grep '^sleep 42'");
  EXPECT_EQ(left.stdout_text, "sleep 4243\n")
      << "the timed-out tree is gone, the earlier background process is not";
}

TEST_P(SecurityTest, ForkBombIsContainedAndTheSandboxStaysUsable) {
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

// Natively the kernel's OOM killer takes the greedy process in the sandbox's cgroup and
// PID 1 lives on. gVisor has no OOM killer of its own: the host's kills the sentry, and
// the whole sandbox ends (docs/isolation-tiers.md; the service starts a fresh one over
// the same files for the next command).
TEST_P(SecurityTest, MemoryBombIsKilledInsideOnlyOnTheNativeTierGvisorHasNoOomKiller) {
  if (on_gvisor()) GTEST_SKIP() << "gVisor has no OOM killer of its own: the host's ends the whole sandbox";
  rt::CgroupLimits limits;
  limits.memory_bytes = 64ull << 20;
  start(limits);
  auto bomb = run("python3 -c 'x = bytearray(512 * 1024 * 1024); print(len(x))'");
  EXPECT_EQ(bomb.return_code, 128 + SIGKILL) << bomb.stdout_text << bomb.stderr_text;
  EXPECT_GE(harness->runtime->cgroups().oom_kills(sandbox->name()), 1u);
  auto after = run("echo alive");
  EXPECT_EQ(after.stdout_text, "alive\n") << "PID 1 survived the OOM kill";
}

TEST_P(SecurityTest, CpuQuotaIsApplied) {
  rt::CgroupLimits limits;
  limits.cpu_millis = 250;
  start(limits);
  // What the host charged the sandbox's cgroup for the command: on the gvisor tier the
  // sentry's work for it too (cgroup v1's cpuacct may not be there: then not checked).
  const auto host_before = harness->runtime->cgroups().cpu_usage_usec(sandbox->name());
  // Busy loop for 2 s of wall time: with a quarter CPU it gets about 0.5 s of CPU time.
  auto r = run("timeout 2 bash -c 'while :; do :; done'; times > /tmp/times; tail -1 /tmp/times");
  EXPECT_EQ(r.return_code, 0) << r.stderr_text;
  const auto host_after = harness->runtime->cgroups().cpu_usage_usec(sandbox->name());
  if (host_before && host_after) {
    const double host_cpu = static_cast<double>(*host_after - *host_before) / 1e6;
    EXPECT_LT(host_cpu, 1.2) << "the host's CPU time for the sandbox under a 0.25 CPU quota over 2 s";
    EXPECT_GT(host_cpu, 0.1);
  } else if (on_gvisor()) {
    GTEST_SKIP() << "no CPU accounting on the host's cgroups here: the quota is not measured";
  }
  // gVisor counts a task's time while the host holds the sentry throttled as the task's
  // own, so its `times` says more than the quota gave: only the host's figure above is
  // the sandbox's CPU time there.
  if (on_gvisor()) return;
  // `times` prints the children's user and system time: "XmY.YYYs XmY.YYYs".
  double user = 0, sys = 0;
  int um = 0, sm = 0;
  ASSERT_EQ(std::sscanf(r.stdout_text.c_str(), "%dm%lfs %dm%lfs", &um, &user, &sm, &sys), 4) << r.stdout_text;
  double cpu = um * 60 + user + sm * 60 + sys;
  EXPECT_LT(cpu, 1.2) << "CPU time under a 0.25 CPU quota over 2 s";
  EXPECT_GT(cpu, 0.1);
}

TEST_P(SecurityTest, OtherSandboxesAreInvisible) {
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

}  // namespace sandboxd::testing
