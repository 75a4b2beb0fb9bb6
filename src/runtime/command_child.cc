#include "runtime/command_child.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/ioctl.h>

#include "runtime/child_syscalls.h"
#include "runtime/confinement.h"
#include "runtime/protocol.h"

// How a command's process is made, and why it is safe to share PID 1's memory.
//
// PID 1 keeps one child ready ahead of each command (see PreparedCommand). That child
// used to be a fork of PID 1: the kernel copied PID 1's page tables, the child then
// faulted on every page it wrote (copy-on-write), and execve tore the copy down again.
// On a paravirtualized VM page-table work is expensive, and this cost PID 1 about as
// much CPU as the command itself. Like posix_spawn, nsjail and bubblewrap's helpers, the
// child is now made with clone(CLONE_VM): it runs in PID 1's address space, on a stack
// of its own, until its execve gives it a fresh address space; nothing is copied and
// nothing torn down.
//
// Sharing the address space with PID 1 (which is root outside the sandbox) is only
// safe because of these rules, which every line of the child follows (below, and in
// confinement.cc and child_syscalls.h, which it calls):
//  - Unlike vfork, PID 1 keeps running while the child waits for its command, so the
//    two run at the same time. The child therefore never writes memory PID 1 uses: it
//    makes raw system calls (runtime/raw_syscall.h), which set no errno (errno lives
//    in the thread's TLS, and the child has PID 1's thread pointer), takes no lock,
//    allocates nothing and calls no libc function but memcpy-like pure ones. Its own
//    writes go to its stack and to its CommandRegion, both owned by this child until
//    PID 1 sees it exec or die (release_region).
//  - The command reaches the child through the region: PID 1 lays it out there (argv,
//    envp, cwd; parsed and checked by PID 1) and only then writes a token on the
//    request pipe, or, for a child of the template, stores it in the region's start
//    word (a release store the child's acquire load pairs with) and wakes the futex;
//    the child reads the region only after the token (the pipe's write and read, or
//    that store and load, order the memory accesses), and PID 1 does not touch the
//    region again until the child is done with it.
//  - Everything that protects PID 1 from the child's future owner holds before the
//    child becomes the agent: all signals stay blocked from the start until the last
//    step before execve (a core-dumping signal to a task sharing an address space
//    would otherwise take PID 1 down with it); right after its uid change (which resets
//    the shared address space's dumpable flag to fs.suid_dumpable) the child sets it
//    back to 0, so no process of the agent can ptrace it or read its memory, PID 1's
//    memory; with fs.suid_dumpable = 1 even the moment between the two would be
//    ptrace-able, so there children are forked instead (use_shared_memory_child).
//  - The seccomp filter, no_new_privs, the namespace, credentials and capabilities are
//    set by the same code for both kinds of child; the filter program and the context
//    it reads from PID 1's memory are written once at start and never again.
// Neither PID 1 nor the child has other threads, so no thread can see a half-done step.

namespace sandboxd::runtime {

namespace {

// A step before execve failed: said on the report pipe, or, for a child of the template
// (which has none), in its region, which PID 1 reads once the child has exited.
[[noreturn]] void fail(CommandRegion& region, const char* step, long rc) {
  if (region.report_fd >= 0) child_fail(region.report_fd, step, rc);
  size_t n = length_of(step);
  if (n > sizeof region.failure.step - 1) n = sizeof region.failure.step - 1;
  for (size_t i = 0; i < n; ++i) region.failure.step[i] = step[i];
  region.failure.step[n] = '\0';
  __atomic_store_n(&region.failure.err, static_cast<int>(rc < 0 ? -rc : EIO), __ATOMIC_RELEASE);
  child_exit(127);
}

// Waits for PID 1's word in the region: true for the command, false when none will come.
bool wait_for_start(CommandRegion& region) {
  for (;;) {
    uint32_t word = __atomic_load_n(&region.start_word, __ATOMIC_ACQUIRE);
    if (word == kGoToken) return true;
    if (word != 0) return false;
    sys(SYS_futex, reinterpret_cast<long>(&region.start_word), FUTEX_WAIT_PRIVATE, 0, 0);
  }
}

}  // namespace

[[noreturn]] void run_child(CommandRegion& region, bool shares_memory) {
  const CommandContext& ctx = *region.ctx;
  long rc;
  // Every signal stays blocked until just before execve (see the top of this file).
  uint64_t all = ~uint64_t{0}, none = 0;
  sys(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&all), 0, sizeof all);
  if ((rc = sys(SYS_setsid)) < 0) fail(region, "setsid()", rc);
  // The cgroup.procs PID 1 opened (as root) for it; a child of the template is moved by
  // PID 1 instead (it is the agent already, which may not move itself).
  if (!region.from_template &&
      (rc = sys(SYS_write, region.cgroup_procs, reinterpret_cast<long>("0"), 1)) != 1)
    fail(region, "write(exec cgroup.procs, 0)", rc < 0 ? rc : -EIO);
  // Everything that does not depend on the command is done before waiting for it, so
  // that a command only pays for execve.
  if (!region.from_template) {
    const char* step = "";
    if ((rc = become_confined_agent(ctx, &step)) < 0) fail(region, step, rc);
  }
  // Every inherited descriptor but stdio closes at exec (the report pipe must survive
  // until then to tell the parent about a failed execve; the request pipe is read first).
  if ((rc = sys(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC)) < 0) fail(region, "close_range(3, ~0)", rc);

  // Ready: wait for the command. A child of the template waits on its region's word
  // (no pipe to make, write and close per command). Otherwise later siblings may hold
  // copies of the request pipe's write end, so a token or length, not EOF, says it has
  // come.
  if (region.request_read < 0) {
    if (!wait_for_start(region)) child_exit(0);  // never used
  } else {
    uint32_t word = 0;
    if (!read_exactly(region.request_read, &word, sizeof word)) child_exit(0);  // never used
    if (shares_memory) {
      // PID 1 has laid the request out in the region.
      if (word != kGoToken) fail(region, "read(spawn token)", -EPROTO);
    } else {
      // A forked child has its own copy of the region: the request comes on the pipe.
      if (word > protocol::kMaxMessage || word > region.data_capacity)
        fail(region, "read(spawn request): too long", -E2BIG);
      if (!read_exactly(region.request_read, region.data(), word))
        fail(region, "read(spawn request)", -EPIPE);
      if (!lay_out(region, word, ctx.static_bash)) fail(region, "decode(spawn request)", -EINVAL);
    }
    sys(SYS_close, region.request_read);
  }
  const CommandRequestLayout& req = region.request;

  auto move_to = [&](int from, int to) {
    if (from == to) return sys(SYS_fcntl, to, F_SETFD, 0);
    return sys(SYS_dup3, from, to, 0);
  };
  if (req.terminal) {
    // A terminal: the slave PID 1 opened in the sandbox's own devpts (and gave to the
    // agent), opened by path as the agent (no descriptor can reach a child prepared
    // before it). This child leads a session of its own (setsid above) and has no
    // controlling terminal, so TIOCSCTTY makes this one it, with no steal (arg 0): bash's
    // job control, isatty and SIGWINCH then work as on a login. It is the only terminal
    // the process can reach: the server never passes it one of the host's.
    const long tty =
        sys(SYS_openat, AT_FDCWD, reinterpret_cast<long>(req.terminal), O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (tty < 0) fail(region, "open(terminal slave)", tty);
    if ((rc = sys(SYS_ioctl, tty, TIOCSCTTY, 0)) < 0) fail(region, "ioctl(terminal slave, TIOCSCTTY)", rc);
    for (int target = 0; target <= 2; ++target)
      if ((rc = sys(SYS_dup3, tty, target, 0)) < 0) fail(region, "dup2(terminal slave, stdio)", rc);
  } else if (move_to(region.in_r, 0) < 0 || move_to(region.out_w, 1) < 0 ||
             (rc = move_to(region.err_w, 2)) < 0) {
    fail(region, "dup2(stdio)", rc < 0 ? rc : -EBADF);
  }
  if ((rc = sys(SYS_chdir, reinterpret_cast<long>(req.cwd))) < 0) fail(region, "chdir(cwd)", rc);
  // The command starts with default signal handling (PID 1 ignores SIGPIPE) and
  // nothing blocked. A signal that came while blocked is delivered now, with the
  // address space still not dumpable (so it cannot dump core through PID 1's memory).
  struct {
    unsigned long handler, flags, restorer;
    uint64_t mask;
  } default_action{reinterpret_cast<unsigned long>(SIG_DFL), 0, 0, 0};
  sys(SYS_rt_sigaction, SIGPIPE, reinterpret_cast<long>(&default_action), 0, sizeof(uint64_t));
  sys(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&none), 0, sizeof none);
  rc = sys(SYS_execve, reinterpret_cast<long>(req.program), reinterpret_cast<long>(req.argv),
           reinterpret_cast<long>(req.envp));
  fail(region, "execve", rc);
}

int shared_memory_child_main(void* arg) { run_child(*static_cast<CommandRegion*>(arg), true); }

}  // namespace sandboxd::runtime
