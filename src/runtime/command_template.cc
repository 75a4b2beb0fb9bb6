// PID 1's command template: one process per sandbox that became the confined agent
// once, from which each command's child is cloned (process.h, CommandTemplate).

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "runtime/child_syscalls.h"
#include "runtime/command_child.h"
#include "runtime/command_region.h"
#include "runtime/confinement.h"
#include "runtime/process.h"
#include "runtime/syscall_error.h"

// The template. Installing the seccomp filter (the kernel checks, converts and JIT-
// compiles the program, and precomputes its per-syscall cache) and setting up the
// agent's credentials (setns, setgroups, setresgid/uid, a capability-bounding drop per
// capability, each a new cred) were most of PID 1's cost per command. So one process
// per sandbox, the template, does those steps once, by the same code
// (become_confined_agent), and every command's child is cloned from it: a filter, the
// credentials and no_new_privs are inherited through clone exactly as they were set,
// with nothing a child could skip. How it stays safe:
//  - It is a clone(CLONE_VM | CLONE_FILES) of PID 1 that follows the child's rules
//    (command_child.cc: raw system calls, its own stack in a region, every signal
//    blocked, its own clone in assembly because glibc's would write errno), and it shares PID 1's
//    descriptor table, so PID 1 hands it a child's pipes by number, not over a socket.
//    Its children get a copy of the table, as PID 1's own children do, and mark it all
//    close-on-exec the same way.
//  - It clones with CLONE_PARENT: each child is PID 1's child, reaped by PID 1 with its
//    status, as before; and as an unreaped child of PID 1 its pid cannot be reused, so
//    PID 1 (root, which the agent is not) moves it into its execution cgroup by pid
//    before sending the command. CLONE_PARENT_SETTID writes that pid into the child's
//    region during the clone, so PID 1 knows the child even if the template dies
//    before answering.
//  - It runs as the agent, so the agent can signal it (it cannot ptrace it or read its
//    memory or descriptors: the address space is PID 1's, not dumpable, and owned by
//    the host's user namespace). Killed, PID 1 reaps it and starts a new one for the
//    next command; stopped or starved, it does not answer within
//    kTemplateReplyTimeoutMs and PID 1 kills it, kills the child it may have cloned,
//    and makes that command's child directly. If its setup fails, every command is
//    prepared directly. Either way no command runs with less than the full set of
//    steps, and another sandbox is never affected (each has its own template).
//  - What the agent can do to the template (lower its limits or priority) it could do
//    to its own commands anyway; limits only go down without privileges.

namespace sandboxd::runtime {
namespace {

// --- the template: raw system calls only, like the child (command_child.cc) -----------

#if defined(__x86_64__)
#define SANDBOXD_HAVE_TEMPLATE 1
// clone(CLONE_VM) onto `stack`, running fn(arg) there, without libc: glibc's clone()
// stores errno on failure, and the template must not write PID 1's memory. `tid` is
// both the parent's and the child's tid address (CLONE_PARENT_SETTID sets it to the
// child's pid, CLONE_CHILD_CLEARTID clears it when the child execs or exits).
// long raw_clone_on_stack(unsigned long flags, void* stack, pid_t* tid, int (*fn)(void*), void* arg)
extern "C" long sandboxd_raw_clone_on_stack(unsigned long, void*, pid_t*, int (*)(void*), void*);
__asm__(R"(
  .text
  .p2align 4
  .globl sandboxd_raw_clone_on_stack
  .hidden sandboxd_raw_clone_on_stack
  .type sandboxd_raw_clone_on_stack,@function
sandboxd_raw_clone_on_stack:
  and $-16, %rsi
  sub $16, %rsi
  mov %rcx, 0(%rsi)
  mov %r8, 8(%rsi)
  mov %rdx, %r10
  xor %r8d, %r8d
  mov $56, %eax
  syscall
  test %rax, %rax
  jnz 1f
  xor %ebp, %ebp
  pop %rax
  pop %rdi
  call *%rax
  mov %eax, %edi
  mov $60, %eax
  syscall
  hlt
1:
  ret
  .size sandboxd_raw_clone_on_stack, .-sandboxd_raw_clone_on_stack
  .previous
)");
#else
#define SANDBOXD_HAVE_TEMPLATE 0
#endif

// The handshake in the template's region (CommandRegion::TemplateHandshake::state):
// PID 1 moves it from idle to asked, and wakes the template on its start_word with the
// child's region in `request`; the template clones, writes pid (or a failure) and moves
// it to answered; PID 1 reads the answer and moves it back to idle. The kernel sets it
// to 0 when the template exits, whatever it was, and wakes PID 1 if it is waiting. PID 1
// waits on it as a shared futex, because that is how the kernel wakes it at the exit.
constexpr uint32_t kTemplateIdle = 1, kTemplateAsked = 2, kTemplateAnswered = 3;

void template_answer(CommandRegion& self, int pid, const char* step, long rc) {
  CommandRegion::TemplateHandshake& h = self.handshake;
  h.pid = pid;
  self.failure.err = static_cast<int>(-rc);
  size_t n = length_of(step);
  if (n > sizeof self.failure.step - 1) n = sizeof self.failure.step - 1;
  for (size_t i = 0; i < n; ++i) self.failure.step[i] = step[i];
  self.failure.step[n] = '\0';
  uint32_t asked = kTemplateAsked;
  if (__atomic_compare_exchange_n(&h.state, &asked, kTemplateAnswered, false, __ATOMIC_RELEASE,
                                  __ATOMIC_RELAXED))
    sys(SYS_futex, reinterpret_cast<long>(&h.state), FUTEX_WAKE, 1);
}

// The template: becomes the confined agent once, then clones a child per region PID 1
// sends, as a child of PID 1 (CLONE_PARENT: PID 1 reaps it and sees its status, as for
// the children it makes itself), and answers with its pid.
int template_main(void* arg) {
  CommandRegion& self = *static_cast<CommandRegion*>(arg);
  uint64_t all = ~uint64_t{0};
  sys(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&all), 0, sizeof all);
  const char* step = "";
  if (long rc = become_confined_agent(*self.ctx, &step); rc < 0) {
    // Said before it exits; PID 1 reads it when it sees the template gone.
    self.handshake.setup_failed = 1;
    template_answer(self, 0, step, rc);
    child_exit(127);
  }
#if SANDBOXD_HAVE_TEMPLATE
  auto template_child_main = [](void* arg) -> int { run_child(*static_cast<CommandRegion*>(arg), true); };
  for (;;) {
    while (__atomic_load_n(&self.start_word, __ATOMIC_ACQUIRE) != kGoToken)
      sys(SYS_futex, reinterpret_cast<long>(&self.start_word), FUTEX_WAIT_PRIVATE, 0, 0);
    __atomic_store_n(&self.start_word, 0, __ATOMIC_RELAXED);
    CommandRegion* child = self.handshake.request;
    long pid =
        sandboxd_raw_clone_on_stack(CLONE_VM | CLONE_PARENT | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID,
                                    stack_top(child), &child->template_child_pid, template_child_main, child);
    if (pid > 0)
      template_answer(self, static_cast<int>(pid), "", 0);
    else
      template_answer(self, 0, "clone(CLONE_VM|CLONE_PARENT) in the template", pid);
  }
#else
  child_exit(127);
#endif
}

// --- PID 1's side of the template --------------------------------------------------

// How long PID 1 waits for the template to clone a child. It answers in microseconds
// unless it is stopped (an agent can SIGSTOP it: it runs as the agent) or starved; then
// it is killed and replaced, and this command's child is made directly. A generous
// bound: a healthy template that is slow under load costs a restart, never a failure.
constexpr int kTemplateReplyTimeoutMs = 1000;

void forget_template(CommandTemplate& tpl) {
  release_region(tpl.region);
  bool unusable = tpl.unusable;
  auto orphans = std::move(tpl.orphans);
  tpl = CommandTemplate{};
  tpl.unusable = unusable;
  tpl.orphans = std::move(orphans);
}

// Kills the template (it is PID 1's child, so the pid is still its own) and reaps it.
void kill_template(CommandTemplate& tpl) {
  if (tpl.pid < 0) return;
  kill(tpl.pid, SIGKILL);
  while (waitpid(tpl.pid, nullptr, __WALL) < 0 && errno == EINTR) {
  }
  forget_template(tpl);
}

int start_template(CommandTemplate& tpl, const CommandContext& ctx, std::string& error) {
  CommandRegion* region = acquire_region();
  if (!region) {
    int err = errno;
    error = describe_errno("mmap(template region)", err);
    return -err;
  }
  region->ctx = &ctx;
  region->data_used = 0;
  region->start_word = 0;
  region->failure = {};
  region->handshake = {};
  // Idle before the clone, so that only the template's exit can make it 0.
  region->handshake.state = kTemplateIdle;
  // CLONE_FILES: the children it clones get PID 1's descriptors (their pipes) as a child
  // of PID 1 would; they mark everything close-on-exec as such a child does.
  pid_t pid = clone(template_main, stack_top(region), CLONE_VM | CLONE_FILES | CLONE_CHILD_CLEARTID | SIGCHLD,
                    region, nullptr, nullptr, &region->handshake.state);
  if (pid < 0) {
    int err = errno;
    release_region(region);
    error = describe_errno("clone(template)", err);
    return -err;
  }
  tpl.pid = pid;
  tpl.region = region;
  return 0;
}

// Asks the template for a child on `region`. True when it answered (its answer is in
// its region); false when it exited or did not answer within the timeout.
bool ask_template(CommandTemplate& tpl, CommandRegion* region) {
  CommandRegion& self = *tpl.region;
  CommandRegion::TemplateHandshake& h = self.handshake;
  h.request = region;
  h.pid = 0;
  uint32_t idle = kTemplateIdle;
  if (!__atomic_compare_exchange_n(&h.state, &idle, kTemplateAsked, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    return false;  // it has exited
  wake_template_child(self, kGoToken);
  timespec deadline{};
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += kTemplateReplyTimeoutMs / 1000;
  deadline.tv_nsec += (kTemplateReplyTimeoutMs % 1000) * 1'000'000L;
  if (deadline.tv_nsec >= 1'000'000'000L) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1'000'000'000L;
  }
  uint32_t state;
  while ((state = __atomic_load_n(&h.state, __ATOMIC_ACQUIRE)) == kTemplateAsked) {
    // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline.
    long rc = syscall(SYS_futex, &h.state, FUTEX_WAIT_BITSET, kTemplateAsked, &deadline, nullptr,
                      FUTEX_BITSET_MATCH_ANY);
    if (rc < 0 && errno == ETIMEDOUT) break;
  }
  if (state != kTemplateAnswered) return false;
  // Back to idle for the next request (unless it has exited meanwhile: then 0 stays).
  uint32_t answered = kTemplateAnswered;
  __atomic_compare_exchange_n(&h.state, &answered, kTemplateIdle, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
  return true;
}

// Moves a template's child into its execution cgroup (the child, as the agent, may not)
// through the cgroup's cgroup.procs, which PID 1 keeps open.
int join_exec_cgroup(int cgroup_procs, pid_t pid, std::string& error) {
  std::string text = std::to_string(pid);
  ssize_t n = write(cgroup_procs, text.data(), text.size());
  int err = n < 0 ? errno : EIO;
  if (n != static_cast<ssize_t>(text.size())) {
    error = describe_errno("write(exec cgroup.procs, " + text + ")", err);
    return -err;
  }
  return 0;
}

}  // namespace

int prepare_command_from_template(CommandTemplate& tpl, const CommandContext& ctx, int cgroup_procs,
                                  PreparedCommand& out, std::string& error) {
  if (!SANDBOXD_HAVE_TEMPLATE || !ctx.share_memory || tpl.unusable) {
    error = "no command template here";
    return -ENOTSUP;
  }
  if (tpl.pid < 0)
    if (int rc = start_template(tpl, ctx, error); rc < 0) return rc;
  // The command's stdio only: the child is told its command and tells its failure
  // through its region (start_word, failure), and its exec or exit shows there too
  // (CLONE_CHILD_CLEARTID), so it needs no request or report pipe.
  int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  auto close_pipes = [&] {
    close_all({in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]});
  };
  for (auto [pipe_fds, name] : {std::pair{in_pipe, "pipe2(stdin)"}, std::pair{out_pipe, "pipe2(stdout)"},
                                std::pair{err_pipe, "pipe2(stderr)"}}) {
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
      int err = errno;
      close_pipes();
      error = describe_errno(name, err);
      return -err;
    }
  }
  CommandRegion* region = acquire_region();
  if (!region) {
    int err = errno;
    close_pipes();
    error = describe_errno("mmap(command region)", err);
    return -err;
  }
  prepare_child_region(region, ctx, cgroup_procs, -1, in_pipe[0], out_pipe[1], err_pipe[1], -1, true);
  // The region is the template's to read once asked, and its child's after the clone;
  // PID 1 touches it again only to lay out the command (launch_command).
  const bool answered = ask_template(tpl, region);
  const CommandRegion& self = *tpl.region;
  const bool setup_failed = self.handshake.setup_failed != 0;
  if (!answered || setup_failed || self.handshake.pid <= 0) {
    if (setup_failed) tpl.unusable = true;  // the same steps would fail again
    SpawnFailure failure = self.failure;
    if (!answered || setup_failed) {
      kill_template(tpl);
      // A clone may have happened before it died: that child is PID 1's, and waits
      // for a command that will not come.
      if (pid_t child = region->template_child_pid; child > 0) {
        kill(child, SIGKILL);
        tpl.orphans.push_back({child, region});
        region = nullptr;
      }
    }
    release_region(region);
    close_pipes();
    failure.step[sizeof failure.step - 1] = '\0';
    const bool said = answered || setup_failed;
    error = said ? describe_errno(failure.step, failure.err) : "the command template did not answer";
    return said ? -failure.err : -ETIMEDOUT;
  }
  const pid_t pid = self.handshake.pid;
  if (int rc = join_exec_cgroup(cgroup_procs, pid, error); rc < 0) {
    kill(pid, SIGKILL);
    tpl.orphans.push_back({pid, region});
    close_pipes();
    return rc;
  }
  // The child has its copies; PID 1 keeps its own ends.
  close_all({in_pipe[0], out_pipe[1], err_pipe[1]});
  out.pid = pid;
  out.stdin_write = in_pipe[1];
  out.stdout_read = out_pipe[0];
  out.stderr_read = err_pipe[0];
  out.region = region;
  return 0;
}

bool template_reaped(CommandTemplate& tpl, pid_t pid) {
  if (pid == tpl.pid) {
    forget_template(tpl);
    return true;
  }
  for (auto it = tpl.orphans.begin(); it != tpl.orphans.end(); ++it) {
    if (it->pid != pid) continue;
    release_region(it->region);
    tpl.orphans.erase(it);
    return true;
  }
  return false;
}

}  // namespace sandboxd::runtime
