#include "runtime/process.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/prctl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "runtime/raw_syscall.h"
#include "runtime/syscall_error.h"
#include "runtime/user.h"

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
// safe because of these rules, which every line of the child below follows:
//  - Unlike vfork, PID 1 keeps running while the child waits for its command, so the
//    two run at the same time. The child therefore never writes memory PID 1 uses: it
//    makes raw system calls (runtime/raw_syscall.h), which set no errno (errno lives
//    in the thread's TLS, and the child has PID 1's thread pointer), takes no lock,
//    allocates nothing and calls no libc function but memcpy-like pure ones. Its own
//    writes go to its stack and to its CommandRegion, both owned by this child until
//    PID 1 sees it exec or die (release_region).
//  - The command reaches the child through the region: PID 1 lays it out there (argv,
//    envp, cwd; parsed and checked by PID 1) and only then writes a token on the
//    request pipe; the child reads the region only after reading the token (the pipe's
//    write and read order the memory accesses), and PID 1 does not touch the region
//    again until the child is done with it.
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
//
// The template. Installing the seccomp filter (the kernel checks, converts and JIT-
// compiles the program, and precomputes its per-syscall cache) and setting up the
// agent's credentials (setns, setgroups, setresgid/uid, a capability-bounding drop per
// capability, each a new cred) were most of PID 1's cost per command. So one process
// per sandbox, the template, does those steps once, by the same code
// (become_confined_agent), and every command's child is cloned from it: a filter, the
// credentials and no_new_privs are inherited through clone exactly as they were set,
// with nothing a child could skip. How it stays safe:
//  - It is a clone(CLONE_VM | CLONE_FILES) of PID 1 that follows the child's rules
//    above (raw system calls, its own stack in a region, every signal blocked, its own
//    clone in assembly because glibc's would write errno), and it shares PID 1's
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

struct CommandRequestLayout {
  const char* program = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* cwd = nullptr;
};

// One mapping: this header, then the data area (the request's bytes, then its argv and
// envp arrays), a guard page, and the child's stack at the top.
struct CommandRegion {
  // Fixed before the child starts.
  const CommandContext* ctx;
  int cgroup_dirfd, request_read, in_r, out_w, err_w, report_fd;
  size_t data_capacity;
  // Written by PID 1 before the token (shared memory child) or by the forked child
  // itself after reading the request from the pipe.
  CommandRequestLayout request;
  size_t data_used;
  // A child cloned by the template: the kernel writes its pid here during the clone
  // (CLONE_PARENT_SETTID), so PID 1 knows it even when the template dies before saying.
  pid_t template_child_pid;
  bool from_template;
  char* data() { return reinterpret_cast<char*>(this + 1); }
};

namespace {

constexpr size_t kRegionSize = 4 << 20;  // virtual; only touched pages cost memory
constexpr size_t kStackSize = 64 << 10;
constexpr size_t kPage = 4096;
// A request whose bytes went past this is not kept for reuse (its pages are resident).
constexpr size_t kReusableDataSize = 64 << 10;
constexpr uint32_t kGoToken = 0xffffffffu;

// Regions ready for reuse: PID 1 normally has one or two children in flight.
CommandRegion* free_regions[2] = {nullptr, nullptr};

CommandRegion* acquire_region() {
  for (auto& slot : free_regions)
    if (slot) return std::exchange(slot, nullptr);
  void* base = mmap(nullptr, kRegionSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  // The guard page under the stack stops an overflow from running into the request.
  char* guard = static_cast<char*>(base) + kRegionSize - kStackSize - kPage;
  if (mprotect(guard, kPage, PROT_NONE) != 0) {
    munmap(base, kRegionSize);
    return nullptr;
  }
  auto* region = static_cast<CommandRegion*>(base);
  region->data_capacity = static_cast<size_t>(guard - region->data());
  return region;
}

// A command child's region: its context and the ends of the pipes it keeps, nothing of
// an earlier request left.
void prepare_child_region(CommandRegion* region, const CommandContext& ctx, int cgroup_dirfd,
                          int request_read, int in_r, int out_w, int err_w, int report_fd,
                          bool from_template) {
  region->ctx = &ctx;
  region->cgroup_dirfd = cgroup_dirfd;
  region->request_read = request_read;
  region->in_r = in_r;
  region->out_w = out_w;
  region->err_w = err_w;
  region->report_fd = report_fd;
  region->data_used = 0;
  region->request = {};
  region->from_template = from_template;
  region->template_child_pid = 0;
}

void* stack_top(CommandRegion* region) {
  return reinterpret_cast<char*>(region) + kRegionSize - 64;  // 16-byte aligned
}

// --- the child: raw system calls only (see the top of this file) --------------------

long sys(long nr, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0) {
  return raw::syscall6(nr, a1, a2, a3, a4, a5);
}

size_t length_of(const char* s) {
  size_t n = 0;
  while (s[n]) ++n;
  return n;
}

[[noreturn]] void child_exit(int code) {
  for (;;) sys(SYS_exit_group, code);
}

[[noreturn]] void child_fail(int report_fd, const char* step, long rc) {
  SpawnFailure failure{};
  failure.err = static_cast<int>(-rc);
  size_t n = length_of(step);
  if (n > sizeof failure.step - 1) n = sizeof failure.step - 1;
  for (size_t i = 0; i < n; ++i) failure.step[i] = step[i];
  sys(SYS_write, report_fd, reinterpret_cast<long>(&failure), sizeof failure);
  child_exit(127);
}

bool read_exactly(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    long n = sys(SYS_read, fd, reinterpret_cast<long>(p), static_cast<long>(size));
    if (n == -EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Parses an encoded SpawnRequest (protocol.cc: cwd, then argv and env as a count and
// that many NUL-terminated items) that sits in the region's data area, in place: the
// strings stay where they are and the argv and envp arrays go after them. Used by PID 1
// for a shared-memory child, and by a forked child on its own copy; allocates nothing.
bool lay_out(CommandRegion& region, size_t length, const char* static_bash) {
  char* data = region.data();
  size_t pos = 0;
  auto take = [&](const char*& item) {
    item = data + pos;
    while (pos < length && data[pos] != '\0') ++pos;
    if (pos == length) return false;
    ++pos;  // past the NUL
    return true;
  };
  auto take_count = [&](size_t& count) {
    const char* text;
    if (!take(text)) return false;
    size_t digits = length_of(text);
    if (digits == 0 || digits > 6) return false;
    count = 0;
    for (size_t i = 0; i < digits; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      count = count * 10 + static_cast<size_t>(text[i] - '0');
    }
    return true;
  };
  size_t pointers_at = (length + alignof(char*) - 1) & ~(alignof(char*) - 1);
  if (pointers_at >= region.data_capacity) return false;
  auto** pointers = reinterpret_cast<char**>(data + pointers_at);
  size_t room = (region.data_capacity - pointers_at) / sizeof(char*), used = 0;
  auto take_list = [&](char* const*& list) {
    size_t count;
    if (!take_count(count) || count + 1 > room - used) return false;
    list = pointers + used;
    for (size_t i = 0; i < count; ++i) {
      const char* item;
      if (!take(item)) return false;
      pointers[used++] = const_cast<char*>(item);
    }
    pointers[used++] = nullptr;
    return true;
  };
  CommandRequestLayout& out = region.request;
  if (!take(out.cwd) || !take_list(out.argv) || !take_list(out.envp) || pos != length || !out.argv[0]) return false;
  out.program = out.argv[0];
  if (static_bash && std::strcmp(out.argv[0], "/bin/bash") == 0) out.program = static_bash;
  region.data_used = pointers_at + used * sizeof(char*);
  return true;
}

// The command's limits, the agent's credentials and the seccomp filter: done by each
// directly made child, and once by the template for all the children it clones.
// Returns 0, or the negative errno with *step naming the failed call.
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
  if ((rc = sys(SYS_setgroups, 1, reinterpret_cast<long>(groups))) < 0) return *step = "setgroups([1000])", rc;
  if ((rc = sys(SYS_setresgid, kAgentGid, kAgentGid, kAgentGid)) < 0) return *step = "setresgid(1000)", rc;
  if ((rc = sys(SYS_setresuid, kAgentUid, kAgentUid, kAgentUid)) < 0) return *step = "setresuid(1000)", rc;
  // The uid change set the (possibly shared) address space's dumpable flag to
  // fs.suid_dumpable: back to 0 at once, as PID 1 itself has it.
  if ((rc = sys(SYS_prctl, PR_SET_DUMPABLE, 0)) < 0) return *step = "prctl(PR_SET_DUMPABLE, 0)", rc;
  // Root of this namespace is unmapped, so setresuid did not clear capabilities the way
  // it would for a real root: drop every set explicitly (bounding first, it needs
  // CAP_SETPCAP).
  for (int cap = 0; cap <= ctx.last_cap; ++cap)
    if ((rc = sys(SYS_prctl, PR_CAPBSET_DROP, cap)) < 0 && rc != -EINVAL) return *step = "prctl(PR_CAPBSET_DROP)", rc;
  if ((rc = sys(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)) < 0 && rc != -EINVAL)
    return *step = "prctl(PR_CAP_AMBIENT_CLEAR_ALL)", rc;
  __user_cap_header_struct cap_header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct cap_data[2] = {};
  if ((rc = sys(SYS_capset, reinterpret_cast<long>(&cap_header), reinterpret_cast<long>(cap_data))) < 0)
    return *step = "capset(0)", rc;
  // no_new_privs and the seccomp filter (the same steps as apply_seccomp in seccomp.cc).
  if ((rc = sys(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) < 0) return *step = "prctl(PR_SET_NO_NEW_PRIVS)", rc;
  sock_fprog prog{static_cast<unsigned short>(ctx.seccomp->instructions.size()),
                  const_cast<sock_filter*>(ctx.seccomp->instructions.data())};
  if ((rc = sys(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, reinterpret_cast<long>(&prog))) < 0)
    return *step = "prctl(PR_SET_SECCOMP)", rc;
  return 0;
}

// Every step from the new process to execve; the same for both kinds of child. A child
// of the template is already the confined agent, and PID 1 moves it into its cgroup.
[[noreturn]] void run_child(CommandRegion& region, bool shares_memory) {
  const CommandContext& ctx = *region.ctx;
  const int report = region.report_fd;
  long rc;
  // Every signal stays blocked until just before execve (see the top of this file).
  uint64_t all = ~uint64_t{0}, none = 0;
  sys(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&all), 0, sizeof all);
  if ((rc = sys(SYS_setsid)) < 0) child_fail(report, "setsid()", rc);
  if (!region.from_template) {
    int procs = static_cast<int>(sys(SYS_openat, region.cgroup_dirfd, reinterpret_cast<long>("cgroup.procs"),
                                     O_WRONLY | O_CLOEXEC));
    if (procs < 0) child_fail(report, "openat(exec cgroup, cgroup.procs)", procs);
    if ((rc = sys(SYS_write, procs, reinterpret_cast<long>("0"), 1)) != 1)
      child_fail(report, "write(exec cgroup.procs, 0)", rc < 0 ? rc : -EIO);
    sys(SYS_close, procs);
  }
  // Everything that does not depend on the command is done before waiting for it, so
  // that a command only pays for execve.
  if (!region.from_template) {
    const char* step = "";
    if ((rc = become_confined_agent(ctx, &step)) < 0) child_fail(report, step, rc);
  }
  // Every inherited descriptor but stdio closes at exec (the report pipe must survive
  // until then to tell the parent about a failed execve; the request pipe is read first).
  if ((rc = sys(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC)) < 0) child_fail(report, "close_range(3, ~0)", rc);

  // Ready: wait for the command. Later siblings may hold copies of the request pipe's
  // write end, so a token or length, not EOF, says it has come.
  uint32_t word = 0;
  if (!read_exactly(region.request_read, &word, sizeof word)) child_exit(0);  // never used
  if (shares_memory) {
    // PID 1 has laid the request out in the region.
    if (word != kGoToken) child_fail(report, "read(spawn token)", -EPROTO);
  } else {
    // A forked child has its own copy of the region: the request comes on the pipe.
    if (word > protocol::kMaxMessage || word > region.data_capacity)
      child_fail(report, "read(spawn request): too long", -E2BIG);
    if (!read_exactly(region.request_read, region.data(), word)) child_fail(report, "read(spawn request)", -EPIPE);
    if (!lay_out(region, word, ctx.static_bash)) child_fail(report, "decode(spawn request)", -EINVAL);
  }
  sys(SYS_close, region.request_read);
  const CommandRequestLayout& req = region.request;

  auto move_to = [&](int from, int to) {
    if (from == to) return sys(SYS_fcntl, to, F_SETFD, 0);
    return sys(SYS_dup3, from, to, 0);
  };
  if (move_to(region.in_r, 0) < 0 || move_to(region.out_w, 1) < 0 || (rc = move_to(region.err_w, 2)) < 0)
    child_fail(report, "dup2(stdio)", rc < 0 ? rc : -EBADF);
  if ((rc = sys(SYS_chdir, reinterpret_cast<long>(req.cwd))) < 0) child_fail(report, "chdir(cwd)", rc);
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
  child_fail(report, "execve", rc);
}

int shared_memory_child_main(void* arg) { run_child(*static_cast<CommandRegion*>(arg), true); }

// --- the template: raw system calls only, like the child ------------------------------

#if defined(__x86_64__)
#define SANDBOXD_HAVE_TEMPLATE 1
// clone(CLONE_VM) onto `stack`, running fn(arg) there, without libc: glibc's clone()
// stores errno on failure, and the template must not write PID 1's memory.
// long raw_clone_on_stack(unsigned long flags, void* stack, pid_t* parent_tid, int (*fn)(void*), void* arg)
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
  xor %r10d, %r10d
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

// What the template answers for each region PID 1 hands it, and once if its setup failed.
struct TemplateReply {
  int pid;  // > 0: the child; <= 0: nothing was cloned
  int setup_failed;
  SpawnFailure failure;
};

void template_reply(int fd, int pid, bool setup_failed, const char* step, long rc) {
  TemplateReply reply{};
  reply.pid = pid;
  reply.setup_failed = setup_failed;
  reply.failure.err = static_cast<int>(-rc);
  size_t n = length_of(step);
  if (n > sizeof reply.failure.step - 1) n = sizeof reply.failure.step - 1;
  for (size_t i = 0; i < n; ++i) reply.failure.step[i] = step[i];
  sys(SYS_write, fd, reinterpret_cast<long>(&reply), sizeof reply);  // < PIPE_BUF: atomic
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
    template_reply(self.report_fd, 0, true, step, rc);
    child_exit(127);
  }
#if SANDBOXD_HAVE_TEMPLATE
  auto template_child_main = [](void* arg) -> int { run_child(*static_cast<CommandRegion*>(arg), true); };
  for (;;) {
    CommandRegion* child = nullptr;
    if (!read_exactly(self.request_read, &child, sizeof child)) child_exit(0);
    long pid = sandboxd_raw_clone_on_stack(CLONE_VM | CLONE_PARENT | CLONE_PARENT_SETTID, stack_top(child),
                                           &child->template_child_pid, template_child_main, child);
    if (pid > 0)
      template_reply(self.report_fd, static_cast<int>(pid), false, "", 0);
    else
      template_reply(self.report_fd, 0, false, "clone(CLONE_VM|CLONE_PARENT) in the template", pid);
  }
#else
  child_exit(127);
#endif
}

// --- PID 1's side ----------------------------------------------------------------------

void close_all(std::initializer_list<int> fds) {
  for (int fd : fds)
    if (fd >= 0) close(fd);
}

}  // namespace

bool use_shared_memory_child() {
#if SANDBOXD_HAVE_RAW_SYSCALL
  int fd = open("/proc/sys/fs/suid_dumpable", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char value = '1';
  bool read_one = read(fd, &value, 1) == 1;
  close(fd);
  return read_one && (value == '0' || value == '2');
#else
  return false;
#endif
}

void release_region(CommandRegion* region) {
  if (!region) return;
  if (region->data_used <= kReusableDataSize) {
    for (auto& slot : free_regions)
      if (!slot) {
        slot = region;
        return;
      }
  }
  munmap(region, kRegionSize);
}

int prepare_command(const CommandContext& ctx, int cgroup_dirfd, PreparedCommand& out, std::string& error) {
  int request[2] = {-1, -1}, in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1},
      report[2] = {-1, -1};
  for (auto [pipe_fds, name] : {std::pair{request, "pipe2(request)"}, std::pair{in_pipe, "pipe2(stdin)"},
                                std::pair{out_pipe, "pipe2(stdout)"}, std::pair{err_pipe, "pipe2(stderr)"},
                                std::pair{report, "pipe2(report)"}}) {
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
      int err = errno;
      close_all({request[0], request[1], in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0],
                 err_pipe[1], report[0], report[1]});
      error = describe_errno(name, err);
      return -err;
    }
  }
  CommandRegion* region = acquire_region();
  if (!region) {
    int err = errno;
    close_all({request[0], request[1], in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0],
               err_pipe[1], report[0], report[1]});
    error = describe_errno("mmap(command region)", err);
    return -err;
  }
  prepare_child_region(region, ctx, cgroup_dirfd, request[0], in_pipe[0], out_pipe[1], err_pipe[1], report[1],
                       false);
  // The child gets its own copy of the descriptor table (no CLONE_FILES), so the ends
  // it keeps are closed here, and the ones PID 1 keeps are closed there by close_range.
  pid_t pid;
  const char* call;
  if (ctx.share_memory) {
    call = "clone(CLONE_VM)";
    pid = clone(shared_memory_child_main, stack_top(region), CLONE_VM | SIGCHLD, region);
  } else {
    call = "fork()";
    pid = fork();
    if (pid == 0) {
      close_all({request[1], in_pipe[1], out_pipe[0], err_pipe[0], report[0]});
      run_child(*region, false);
    }
  }
  int start_errno = errno;
  close_all({request[0], in_pipe[0], out_pipe[1], err_pipe[1], report[1]});
  if (pid < 0) {
    release_region(region);
    close_all({request[1], in_pipe[1], out_pipe[0], err_pipe[0], report[0]});
    error = describe_errno(call, start_errno);
    return -start_errno;
  }
  if (!ctx.share_memory) {
    release_region(region);  // the forked child has its own copy
    region = nullptr;
  }
  out.pid = pid;
  out.request_write = request[1];
  out.stdin_write = in_pipe[1];
  out.stdout_read = out_pipe[0];
  out.stderr_read = err_pipe[0];
  out.report_read = report[0];
  out.region = region;
  return 0;
}

int launch_command(PreparedCommand& prepared, const std::string& encoded_request) {
  std::string message(sizeof(uint32_t), '\0');
  if (prepared.region) {
    // The child reads the region only after the token (see the top of this file).
    CommandRegion& region = *prepared.region;
    if (encoded_request.size() > region.data_capacity) return -E2BIG;
    std::memcpy(region.data(), encoded_request.data(), encoded_request.size());
    if (!lay_out(region, encoded_request.size(), prepared.region->ctx->static_bash)) return -EINVAL;
    uint32_t token = kGoToken;
    std::memcpy(message.data(), &token, sizeof token);
  } else {
    uint32_t length = static_cast<uint32_t>(encoded_request.size());
    std::memcpy(message.data(), &length, sizeof length);
    message += encoded_request;
  }
  size_t sent = 0;
  int rc = 0;
  while (sent < message.size()) {
    ssize_t n = write(prepared.request_write, message.data() + sent, message.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      rc = -(n < 0 ? errno : EPIPE);
      break;
    }
    sent += static_cast<size_t>(n);
  }
  close(prepared.request_write);
  prepared.request_write = -1;
  return rc;
}

void discard_prepared(PreparedCommand& prepared) {
  close_all({prepared.request_write, prepared.stdin_write, prepared.stdout_read, prepared.stderr_read,
             prepared.report_read});
  CommandRegion* region = prepared.region;
  prepared = PreparedCommand{};
  prepared.region = region;
}

// --- PID 1's side of the template --------------------------------------------------

namespace {

// How long PID 1 waits for the template to clone a child. It answers in microseconds
// unless it is stopped (an agent can SIGSTOP it: it runs as the agent) or starved; then
// it is killed and replaced, and this command's child is made directly. A generous
// bound: a healthy template that is slow under load costs a restart, never a failure.
constexpr int kTemplateReplyTimeoutMs = 1000;

void forget_template(CommandTemplate& tpl) {
  // Its descriptors are in PID 1's table (the template shares it, CLONE_FILES).
  close_all({tpl.pidfd, tpl.request_write, tpl.request_read, tpl.reply_write, tpl.reply_read});
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
  int request[2] = {-1, -1}, reply[2] = {-1, -1};
  if (pipe2(request, O_CLOEXEC) != 0 || pipe2(reply, O_CLOEXEC) != 0) {
    int err = errno;
    close_all({request[0], request[1], reply[0], reply[1]});
    error = describe_errno("pipe2(template)", err);
    return -err;
  }
  CommandRegion* region = acquire_region();
  if (!region) {
    int err = errno;
    close_all({request[0], request[1], reply[0], reply[1]});
    error = describe_errno("mmap(template region)", err);
    return -err;
  }
  region->ctx = &ctx;
  region->request_read = request[0];
  region->report_fd = reply[1];
  region->data_used = 0;
  int pidfd = -1;
  // CLONE_FILES: the children it clones get PID 1's descriptors (their pipes) as a child
  // of PID 1 would; they mark everything close-on-exec as such a child does.
  pid_t pid = clone(template_main, stack_top(region), CLONE_VM | CLONE_FILES | CLONE_PIDFD | SIGCHLD, region, &pidfd);
  if (pid < 0) {
    int err = errno;
    release_region(region);
    close_all({request[0], request[1], reply[0], reply[1]});
    error = describe_errno("clone(template)", err);
    return -err;
  }
  tpl.pid = pid;
  tpl.pidfd = pidfd;
  tpl.request_read = request[0];
  tpl.request_write = request[1];
  tpl.reply_read = reply[0];
  tpl.reply_write = reply[1];
  tpl.region = region;
  return 0;
}

// Moves a template's child into its execution cgroup (the child, as the agent, may not).
int join_exec_cgroup(int cgroup_dirfd, pid_t pid, std::string& error) {
  int fd = openat(cgroup_dirfd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    error = describe_errno("openat(exec cgroup, cgroup.procs)", err);
    return -err;
  }
  std::string text = std::to_string(pid);
  ssize_t n = write(fd, text.data(), text.size());
  int err = n < 0 ? errno : EIO;
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    error = describe_errno("write(exec cgroup.procs, " + text + ")", err);
    return -err;
  }
  return 0;
}

}  // namespace

int prepare_command_from_template(CommandTemplate& tpl, const CommandContext& ctx, int cgroup_dirfd,
                                  PreparedCommand& out, std::string& error) {
  if (!SANDBOXD_HAVE_TEMPLATE || !ctx.share_memory || tpl.unusable) {
    error = "no command template here";
    return -ENOTSUP;
  }
  if (tpl.pid < 0)
    if (int rc = start_template(tpl, ctx, error); rc < 0) return rc;
  int request[2] = {-1, -1}, in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1},
      report[2] = {-1, -1};
  auto close_pipes = [&] {
    close_all({request[0], request[1], in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0],
               err_pipe[1], report[0], report[1]});
  };
  for (auto [pipe_fds, name] : {std::pair{request, "pipe2(request)"}, std::pair{in_pipe, "pipe2(stdin)"},
                                std::pair{out_pipe, "pipe2(stdout)"}, std::pair{err_pipe, "pipe2(stderr)"},
                                std::pair{report, "pipe2(report)"}}) {
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
  prepare_child_region(region, ctx, cgroup_dirfd, request[0], in_pipe[0], out_pipe[1], err_pipe[1], report[1],
                       true);
  // The region is the template's to read after this write, and its child's after the
  // clone; PID 1 touches it again only to lay out the command (launch_command).
  ssize_t sent = write(tpl.request_write, &region, sizeof region);
  TemplateReply reply{};
  bool answered = false;
  if (sent == static_cast<ssize_t>(sizeof region)) {
    pollfd fds[2] = {{tpl.reply_read, POLLIN, 0}, {tpl.pidfd, POLLIN, 0}};
    for (;;) {
      int n = poll(fds, 2, kTemplateReplyTimeoutMs);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0 && (fds[0].revents & POLLIN))
        answered = read(tpl.reply_read, &reply, sizeof reply) == static_cast<ssize_t>(sizeof reply);
      break;  // answered, died (pidfd readable) or timed out
    }
  }
  if (!answered || reply.setup_failed || reply.pid <= 0) {
    if (answered && reply.setup_failed) tpl.unusable = true;  // the same steps would fail again
    if (!answered || reply.setup_failed) {
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
    reply.failure.step[sizeof reply.failure.step - 1] = '\0';
    error = answered ? describe_errno(reply.failure.step, reply.failure.err) : "the command template did not answer";
    return answered ? -reply.failure.err : -ETIMEDOUT;
  }
  const pid_t pid = reply.pid;
  if (int rc = join_exec_cgroup(cgroup_dirfd, pid, error); rc < 0) {
    kill(pid, SIGKILL);
    tpl.orphans.push_back({pid, region});
    close_pipes();
    return rc;
  }
  // The child has its copies; PID 1 keeps its own ends.
  close_all({request[0], in_pipe[0], out_pipe[1], err_pipe[1], report[1]});
  out.pid = pid;
  out.request_write = request[1];
  out.stdin_write = in_pipe[1];
  out.stdout_read = out_pipe[0];
  out.stderr_read = err_pipe[0];
  out.report_read = report[0];
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
