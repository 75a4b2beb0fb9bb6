// sandboxd-init: PID 1 of every sandbox.
//
// The server (multithreaded) never forks except to exec this helper. Started with the
// control socket on fd 3, it reads the sandbox spec, joins the sandbox's cgroups,
// prepares the user namespace for commands, unshares the other namespaces and forks
// PID 1, which builds the filesystem and then serves spawn and kill requests. The
// launching process reports PID 1's host pid (and a pidfd) and exits, so PID 1 is
// re-parented to the server (a child subreaper).
//
// PID 1 reaps every zombie in the sandbox and exits when the control socket closes,
// which ends every process of the sandbox with it.

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cgroup_kill.h"
#include "runtime/command_region.h"
#include "runtime/gvisor_init.h"
#include "runtime/mount.h"
#include "runtime/net.h"
#include "runtime/process.h"
#include "runtime/protocol.h"
#include "runtime/seccomp.h"
#include "runtime/spec.h"
#include "runtime/syscall_error.h"
#include "runtime/terminal.h"
#include "runtime/user.h"

namespace rt = sandboxd::runtime;
namespace proto = sandboxd::runtime::protocol;

namespace {

constexpr int kControlFd = 3;
// Every listener's fd travels in the one ready message.
static_assert(rt::kMaxListeners <= proto::kMaxFds);

// An execution's cgroup, with the control files PID 1 uses for every command kept open
// (an open and a close of each per command, otherwise).
struct ExecCgroup {
  std::string name;
  int dir_fd = -1;
  int procs_fd = -1;   // cgroup.procs, written to move a command's child in
  int events_fd = -1;  // cgroup v2's cgroup.events ("populated"); -1 on v1
};

struct Execution {
  uint32_t id = 0;
  pid_t pid = -1;
  ExecCgroup cgroup;
  // Open until the child's execve (or its failure) is known; -1 for a child of the
  // template, which says both in its region.
  int report_fd = -1;
  bool failed = false;
  // The shared-memory child's stack and request, until it has exec'd or is reaped.
  rt::CommandRegion* region = nullptr;
  // A plain command's stdout and stderr read ends, held until it exits or until
  // held_until_ns (CLOCK_MONOTONIC) has passed (protocol.h, kHoldOutputMs); -1 once sent.
  int held_stdout = -1;
  int held_stderr = -1;
  int64_t held_until_ns = 0;
};

int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// The sandbox's pids cgroup, as PID 1 reads it: descriptors opened by host path before
// it entered its namespaces, read-only.
struct TaskCounter {
  int current_fd = -1;  // pids.current
  int events_fd = -1;   // pids.events: "max N", the forks refused at the limit
  uint64_t limit = 0;   // pids.max; 0 when there is none
};

class Init {
 public:
  Init(rt::Spec spec, int userns_fd, int exec_parent_fd, TaskCounter tasks, rt::SeccompProgram seccomp)
      : spec_(std::move(spec)),
        exec_parent_fd_(exec_parent_fd),
        tasks_fd_(tasks.current_fd),
        refusals_fd_(tasks.events_fd),
        task_limit_(tasks.limit),
        seccomp_(std::move(seccomp)) {
    ctx_.userns_fd = userns_fd;
    ctx_.last_cap = rt::read_last_cap();
    ctx_.max_open_files = spec_.max_open_files;
    ctx_.seccomp = &seccomp_;
    ctx_.share_memory = rt::use_shared_memory_child();
    // Looked up once, in the sandbox's own root (PID 1 has pivoted by now).
    for (const char* candidate : {"/usr/bin/bash-static", "/bin/bash-static"}) {
      if (access(candidate, X_OK) == 0) {
        ctx_.static_bash = candidate;
        break;
      }
    }
  }

  // The first command's child, forked as soon as the sandbox is ready.
  void prepare_first() {
    std::string ignored;
    prepare_next(ignored);
  }

  [[noreturn]] void serve() {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    int sfd =
        static_cast<int>(rt::check(signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK), "signalfd(SIGCHLD)"));
    std::vector<pollfd> fds;
    std::vector<uint32_t> report_ids;
    for (;;) {
      fds.assign({{kControlFd, POLLIN, 0}, {sfd, POLLIN, 0}});
      report_ids.clear();
      int64_t next_release_ns = -1;
      for (auto& [id, exec] : running_) {
        if (exec.held_stdout >= 0 && !exec.failed &&
            (next_release_ns < 0 || exec.held_until_ns < next_release_ns))
          next_release_ns = exec.held_until_ns;
        if (exec.report_fd < 0) continue;
        fds.push_back({exec.report_fd, POLLIN, 0});
        report_ids.push_back(id);
      }
      int timeout_ms = -1;
      if (next_release_ns >= 0) {
        // Rounded up: woken before the time, it would only go back to sleep.
        const int64_t left_ns = next_release_ns - monotonic_ns();
        timeout_ms = left_ns <= 0 ? 0 : static_cast<int>((left_ns + 999'999) / 1'000'000);
      }
      int n = poll(fds.data(), fds.size(), timeout_ms);
      if (n < 0) {
        if (errno == EINTR) continue;
        _exit(2);
      }
      for (size_t i = 0; i < report_ids.size(); ++i)
        if (fds[i + 2].revents) check_report(report_ids[i]);
      if (fds[1].revents & POLLIN) {
        // Every queued SIGCHLD in one read (one is queued however many children exited);
        // reap() asks the kernel for each zombie.
        signalfd_siginfo info[4];
        while (read(sfd, info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        }
        reap();
      }
      if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
        proto::Message msg;
        int rc = proto::receive_message(kControlFd, msg, /*dont_wait=*/true);
        if (rc == 0 || (rc < 0 && rc != -EAGAIN)) _exit(0);  // the server is gone
        if (rc > 0) handle(msg);
      }
      // One clock read for both deadlines, taken only when one is pending.
      const int64_t now_ns = next_release_ns >= 0 || prepare_after_ns_ != 0 ? monotonic_ns() : 0;
      if (next_release_ns >= 0) release_held_output(now_ns);
      if (prepare_after_ns_ != 0 && (next_ || running_.empty() || now_ns >= prepare_after_ns_)) {
        prepare_after_ns_ = 0;
        std::string ignored;
        if (!next_) prepare_next(ignored);
      }
    }
  }

 private:
  struct Prepared {
    Execution exec;  // its cgroup
    rt::PreparedCommand command;
  };

  void handle(proto::Message& msg) {
    for (int fd : msg.fds) close(fd);
    switch (msg.header.type) {
      case proto::Type::kSpawn:
        spawn(msg.header.id, msg.payload, msg.header.value);
        break;
      case proto::Type::kKill:
        kill_execution(msg.header.id);
        break;
      default:
        break;
    }
  }

  void spawn(uint32_t id, const std::string& request, int64_t value) {
    const bool keep_stdin = proto::spawn_keeps_stdin(value);
    make_room(id);
    // A process on a terminal: its master is opened here, in the sandbox's devpts, and
    // the slave's path goes to the child with its command (it opens the slave itself:
    // it was made before this terminal existed, with a descriptor table of its own).
    rt::OpenedTerminal terminal;
    std::string with_terminal;
    if (proto::spawn_on_terminal(value)) {
      proto::SpawnRequest req;
      if (!proto::decode(request, req) || !req.terminal.empty()) {
        fail(id, EINVAL, "malformed spawn request");
        return;
      }
      std::string error;
      if (int rc = rt::open_terminal(proto::spawn_terminal_size(value), spec_.host_uid, spec_.host_gid,
                                     terminal, error);
          rc < 0) {
        fail(id, -rc, error);
        return;
      }
      req.terminal = terminal.slave_path;
      with_terminal = proto::encode(req);
    }
    const std::string& payload = terminal.master >= 0 ? with_terminal : request;
    // A child that shares PID 1's memory has the request laid out in its region by PID 1
    // (launch_command), which checks it as it goes, without a copy of every string; a
    // forked child lays it out itself, so it is checked here first.
    if (proto::SpawnRequest req; !ctx_.share_memory && !proto::decode(payload, req)) {
      fail(id, EINVAL, "malformed spawn request");
      return;
    }
    // The prepared child takes the command; if it is gone, one fresh attempt.
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!next_) {
        std::string error;
        if (int rc = prepare_next(error); rc < 0) {
          rt::close_all({terminal.master});
          fail(id, -rc, error);
          return;
        }
      }
      Prepared prepared = std::move(*next_);
      next_.reset();
      if (int rc = rt::launch_command(prepared.command, payload); rc < 0) {
        rt::discard_prepared(prepared.command);
        if (prepared.command.region) discarded_regions_[prepared.command.pid] = prepared.command.region;
        lingering_.push_back(prepared.exec);
        if (rc == -E2BIG || rc == -EINVAL) {
          rt::close_all({terminal.master});
          fail(id, -rc, rc == -E2BIG ? "spawn request: too many arguments" : "malformed spawn request");
          return;
        }
        continue;
      }
      Execution exec = prepared.exec;
      exec.id = id;
      exec.pid = prepared.command.pid;
      exec.report_fd = prepared.command.report_read;
      exec.region = prepared.command.region;
      // Regions whose children have exec'd since are free for the next one.
      release_started_regions();
      const int64_t now_ns = monotonic_ns();
      if (terminal.master >= 0) {
        // The terminal's master stands in for its stdout and stdin (protocol.h); its
        // pipes are unused (the child closes its ends at execve: the stderr pipe the
        // server is given reads end of file then). PID 1 keeps no end of the terminal.
        int fds[3] = {terminal.master, prepared.command.stderr_read, terminal.master};
        proto::send_message(kControlFd, proto::Type::kSpawned, id, exec.pid, {}, fds, 3);
        rt::close_all({terminal.master, prepared.command.stdout_read, prepared.command.stderr_read});
      } else if (keep_stdin) {
        // A process the server talks to gets its pipes now, its stdin's write end too.
        int fds[3] = {prepared.command.stdout_read, prepared.command.stderr_read,
                      prepared.command.stdin_write};
        proto::send_message(kControlFd, proto::Type::kSpawned, id, exec.pid, {}, fds, 3);
        rt::close_all({prepared.command.stdout_read, prepared.command.stderr_read});
      } else {
        // A plain command's output waits in its pipes, which go with its exit, or in a
        // kSpawned once it has run for kHoldOutputMs (protocol.h).
        exec.held_stdout = prepared.command.stdout_read;
        exec.held_stderr = prepared.command.stderr_read;
        exec.held_until_ns = now_ns + int64_t{proto::kHoldOutputMs} * 1'000'000;
      }
      // Its stdin reads end of file, or is the server's to write.
      close(prepared.command.stdin_write);
      running_[id] = exec;
      by_pid_[exec.pid] = id;
      // The next command's child is forked now, while this one runs; but not behind the
      // first plain command after a quiet spell. Its move into its cgroup then often
      // sleeps for an RCU grace period (the host-wide cgroup_threadgroup_rwsem, after
      // no migration for a while: 10 ms and more on a VM), and this command's exit
      // would wait behind it. That child is made once this command has exited and its
      // exit is sent, or once it has run for kHoldOutputMs; a spawn before either makes
      // its own.
      const bool after_quiet = now_ns - last_spawn_ns_ > kQuietSpellNs;
      last_spawn_ns_ = now_ns;
      if (after_quiet && !keep_stdin && running_.size() == 1) {
        prepare_after_ns_ = exec.held_until_ns;
        return;
      }
      std::string ignored;
      prepare_next(ignored);
      return;
    }
    rt::close_all({terminal.master});
    fail(id, EPIPE, "the prepared command process went away");
  }

  // Forks the child for the next command into a fresh execution cgroup.
  int prepare_next(std::string& error) {
    Prepared prepared;
    if (!free_cgroups_.empty()) {
      // An emptied execution cgroup is reused rather than removed and made again.
      prepared.exec.cgroup = std::move(free_cgroups_.back());
      free_cgroups_.pop_back();
      return prepare_in(prepared, error);
    }
    ExecCgroup& cgroup = prepared.exec.cgroup;
    cgroup.name = "e" + std::to_string(++cgroup_counter_);
    if (mkdirat(exec_parent_fd_, cgroup.name.c_str(), 0755) != 0 && errno != EEXIST) {
      int err = errno;
      error = rt::describe_errno("mkdirat(exec cgroup " + cgroup.name + ")", err);
      return -err;
    }
    cgroup.dir_fd = openat(exec_parent_fd_, cgroup.name.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cgroup.dir_fd >= 0) cgroup.procs_fd = openat(cgroup.dir_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
    if (cgroup.procs_fd < 0) {
      int err = errno;
      const char* what = cgroup.dir_fd < 0 ? "openat(exec cgroup " : "openat(cgroup.procs of exec cgroup ";
      rt::close_all({cgroup.dir_fd});
      unlinkat(exec_parent_fd_, cgroup.name.c_str(), AT_REMOVEDIR);
      error = rt::describe_errno(what + cgroup.name + ")", err);
      return -err;
    }
    // Only cgroup v2 has it; v1's emptiness is read from cgroup.procs.
    cgroup.events_fd = openat(cgroup.dir_fd, "cgroup.events", O_RDONLY | O_CLOEXEC);
    return prepare_in(prepared, error);
  }

  int prepare_in(Prepared& prepared, std::string& error) {
    // Cloned from the template, which installed the filter and credentials once; made
    // directly (the same steps, per command) when the template cannot.
    std::string template_error;
    if (rt::prepare_command_from_template(template_, ctx_, prepared.exec.cgroup.procs_fd, prepared.command,
                                          template_error) == 0) {
      next_ = std::move(prepared);
      return 0;
    }
    if (int rc = rt::prepare_command(ctx_, prepared.exec.cgroup.procs_fd, prepared.command, error); rc < 0) {
      lingering_.push_back(prepared.exec);
      sweep_lingering();
      return rc;
    }
    next_ = std::move(prepared);
    return 0;
  }

  // EOF on the report pipe: execve succeeded. Data: a step before it failed. A child of
  // the template says the same in its region: its pid word cleared (it exec'd or exited),
  // with a failure written first if a step failed.
  void check_report(uint32_t id) {
    auto it = running_.find(id);
    if (it == running_.end()) return;
    Execution& exec = it->second;
    if (exec.report_fd < 0) {
      // (A child made directly, whose report said it failed, may still run on its region.)
      if (!exec.region || !exec.region->from_template || !rt::template_child_done(*exec.region)) return;
      rt::SpawnFailure failure = exec.region->failure;
      rt::release_region(exec.region);
      exec.region = nullptr;
      if (failure.err != 0) {
        failure.step[sizeof failure.step - 1] = '\0';
        exec.failed = true;
        fail(id, failure.err, rt::describe_errno(failure.step, failure.err));
      }
      return;
    }
    rt::SpawnFailure failure{};
    ssize_t n = rt::retry_eintr([&] { return read(exec.report_fd, &failure, sizeof failure); });
    if (n < 0 && errno == EAGAIN) return;
    close(exec.report_fd);
    exec.report_fd = -1;
    // EOF alone: execve succeeded, so the child has left PID 1's memory. (After a
    // failure report it may still be running on its stack there until it exits.)
    if (n == 0) {
      rt::release_region(exec.region);
      exec.region = nullptr;
    }
    if (n == static_cast<ssize_t>(sizeof failure)) {
      failure.step[sizeof failure.step - 1] = '\0';
      exec.failed = true;
      fail(id, failure.err, rt::describe_errno(failure.step, failure.err));
    }
  }

  // A long command keeps its child's region only until the child has exec'd.
  void release_started_regions() {
    for (auto& [id, exec] : running_)
      if (exec.region && exec.region->from_template) check_report(id);
  }

  void fail(uint32_t id, int err, const std::string& what) {
    proto::send_message(kControlFd, proto::Type::kSpawnFailed, id, err, what);
  }

  // Sends the pipes of every command that has run past its hold, in a kSpawned.
  void release_held_output(int64_t now_ns) {
    for (auto& [id, exec] : running_) {
      if (exec.held_stdout < 0 || exec.held_until_ns > now_ns || exec.failed) continue;
      int fds[2] = {exec.held_stdout, exec.held_stderr};
      proto::send_message(kControlFd, proto::Type::kSpawned, id, exec.pid, {}, fds, 2);
      drop_held_output(exec);
    }
  }

  static void drop_held_output(Execution& exec) {
    if (exec.held_stdout < 0) return;
    rt::close_all({exec.held_stdout, exec.held_stderr});
    exec.held_stdout = exec.held_stderr = -1;
  }

  // The sandbox's process limit is its own processes' to fill: what an earlier command
  // left running in the background (a fork bomb, `:(){ :|:& };:`) can hold all of it,
  // and then no new command could start (or its shell could not fork) until a restart,
  // which loses /tmp; retrying would not help. So when fewer than kReservedTasks are
  // left, the leftovers of finished commands are ended, the largest group first, until
  // there is room again; the client is told (kLeftoversEnded). Commands still running
  // (and processes the server talks to) are never touched, nor is anything while the
  // sandbox is below its limit.
  //
  // One read of the count is not always enough to tell: a fork bomb's count swings as it
  // fills the limit. Each generation exits once it has forked the next, and the shells
  // whose fork was refused sleep before they try again (bash: 1, 2, 4, 8 s), so the count
  // can be well below the limit for a moment and back at it after the next command has
  // started, which then finds no room to fork. So when forks were refused at the limit
  // since the last command (pids.events' "max"), a lingering group that holds half the
  // limit or more is ended too: it is what fills the sandbox.
  void make_room(uint32_t id) {
    if (task_limit_ == 0) return;
    const bool refused = forks_refused_since_last_look();
    if (lingering_.empty()) return;
    const uint64_t reserve = std::min<uint64_t>(kReservedTasks, task_limit_ / 4);
    auto tasks = current_tasks();
    if (!tasks) return;
    bool crowded = *tasks + reserve >= task_limit_;
    if (!crowded && !refused) return;
    std::vector<std::pair<size_t, size_t>> groups;  // (processes, index in lingering_)
    for (size_t i = 0; i < lingering_.size(); ++i)
      if (size_t n = count_processes(lingering_[i].cgroup.dir_fd); n > 0) groups.emplace_back(n, i);
    std::sort(groups.rbegin(), groups.rend());
    const uint64_t before = *tasks;
    for (const auto& [count, index] : groups) {
      const bool filling = refused && count * 2 >= task_limit_;
      if (!crowded && !filling) break;
      if (int rc = rt::kill_cgroup_tree(lingering_[index].cgroup.dir_fd, spec_.kill_method); rc < 0)
        std::fprintf(stderr, "sandboxd-init: ending the leftovers in exec cgroup %s: %s\n",
                     lingering_[index].cgroup.name.c_str(), std::strerror(-rc));
      tasks = current_tasks();
      if (!tasks) break;
      crowded = *tasks + reserve >= task_limit_;
    }
    reap();
    const uint64_t after = current_tasks().value_or(before);
    const uint64_t ended = before > after ? before - after : 0;
    if (ended == 0) return;
    const std::string note = "sandboxd: the sandbox was at its limit of " + std::to_string(task_limit_) +
                             " processes; " + std::to_string(ended) +
                             " processes that earlier commands left running in the background were "
                             "ended to run this command (files are kept).";
    proto::send_message(kControlFd, proto::Type::kLeftoversEnded, id, static_cast<int64_t>(ended), note);
  }

  // Whether pids.events' count of forks refused at the limit grew since the last call.
  bool forks_refused_since_last_look() {
    if (refusals_fd_ < 0) return false;
    char text[128];
    ssize_t n = pread(refusals_fd_, text, sizeof text - 1, 0);
    if (n <= 0) return false;
    text[n] = '\0';
    const char* max = std::strstr(text, "max ");
    if (!max) return false;
    const uint64_t refusals = std::strtoull(max + 4, nullptr, 10);
    const bool grew = refusals > refusals_seen_;
    refusals_seen_ = refusals;
    return grew;
  }

  std::optional<uint64_t> current_tasks() const {
    if (tasks_fd_ < 0) return std::nullopt;
    char text[32];
    ssize_t n = pread(tasks_fd_, text, sizeof text - 1, 0);
    if (n <= 0) return std::nullopt;
    text[n] = '\0';
    char* end = nullptr;
    const unsigned long long tasks = std::strtoull(text, &end, 10);
    if (end == text) return std::nullopt;
    return tasks;
  }

  // Processes listed in the cgroup's cgroup.procs (opened afresh: v1 answers a reread of
  // an open one from a cached list).
  static size_t count_processes(int dir_fd) {
    int fd = openat(dir_fd, "cgroup.procs", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t lines = 0;
    char buf[4096];
    ssize_t n;
    while ((n = rt::retry_eintr([&] { return read(fd, buf, sizeof buf); })) > 0)
      lines += static_cast<size_t>(std::count(buf, buf + n, '\n'));
    close(fd);
    return lines;
  }

  void kill_execution(uint32_t id) {
    auto it = running_.find(id);
    int rc = 0;
    if (it != running_.end()) rc = rt::kill_cgroup_tree(it->second.cgroup.dir_fd, spec_.kill_method);
    proto::send_message(kControlFd, proto::Type::kKilled, id, rc, {});
    reap();
  }

  void reap() {
    for (;;) {
      int status = 0;
      pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      if (rt::template_reaped(template_, pid)) continue;
      if (auto region = discarded_regions_.find(pid); region != discarded_regions_.end()) {
        rt::release_region(region->second);
        discarded_regions_.erase(region);
      }
      if (next_ && next_->command.pid == pid) {
        // The prepared child died before its command (an agent can kill it): a fresh
        // one is made for the next command.
        rt::discard_prepared(next_->command);
        rt::release_region(next_->command.region);
        lingering_.push_back(next_->exec);
        next_.reset();
        continue;
      }
      auto it = by_pid_.find(pid);
      if (it == by_pid_.end()) continue;  // an orphan re-parented to us
      uint32_t id = it->second;
      by_pid_.erase(it);
      auto exec = running_.find(id);
      bool failed = false;
      if (exec != running_.end()) {
        // The report pipe is complete once the child is gone: read it first, so a
        // failed start is reported as such and not as an exit status.
        check_report(id);
        failed = exec->second.failed;
        rt::release_region(exec->second.region);
        exec->second.region = nullptr;
        if (!failed) {
          // Held pipes go with the exit: what the shell wrote waits in them.
          Execution& done = exec->second;
          int fds[2] = {done.held_stdout, done.held_stderr};
          proto::send_message(kControlFd, proto::Type::kExited, id, status, {}, fds,
                              done.held_stdout >= 0 ? 2 : 0);
        }
        drop_held_output(exec->second);
        lingering_.push_back(exec->second);
        running_.erase(exec);
      } else {
        proto::send_message(kControlFd, proto::Type::kExited, id, status, {});
      }
    }
    sweep_lingering();
  }

  // Per-execution cgroups stay while background processes live in them; once empty a
  // few are kept for the next commands (a cgroup made and removed per command costs
  // mkdir/rmdir in the hierarchy and, with controllers, their offlining in kworkers),
  // and the rest are removed. A kept cgroup is empty, and nothing but PID 1 can move a
  // process into it, so a command's tree (to kill on timeout) is still exactly its own.
  void sweep_lingering() {
    std::optional<bool> all_empty;  // v1's shortcut, read once a sweep
    auto empty = [&](const ExecCgroup& cgroup) {
      if (cgroup.events_fd >= 0) return exec_cgroup_empty(cgroup);
      if (!all_empty) all_empty = only_known_tasks();
      return *all_empty || exec_cgroup_empty(cgroup);
    };
    for (auto it = lingering_.begin(); it != lingering_.end();) {
      ExecCgroup& cgroup = it->cgroup;
      if (free_cgroups_.size() < kKeptCgroups && empty(cgroup)) {
        free_cgroups_.push_back(std::move(cgroup));
        it = lingering_.erase(it);
      } else if (unlinkat(exec_parent_fd_, cgroup.name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) {
        rt::close_all({cgroup.dir_fd, cgroup.procs_fd, cgroup.events_fd});
        it = lingering_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Whether every task of the sandbox is one PID 1 knows, none of which is in a lingering
  // cgroup: itself and the template (in the sandbox's own cgroup), the prepared child
  // and each running command's shell (each in an execution cgroup of its own). Then
  // every lingering cgroup is empty, found with one read of the sandbox's pids.current
  // instead of a look into each (on v1, an open, read and close of its cgroup.procs).
  // Every task PID 1 counts here is its unreaped child (or itself), so each is still
  // charged to pids.current; any other task (a command's background process, a child
  // being discarded, a zombie not reaped yet) only makes the count larger than this,
  // and the cgroups are then looked into one by one.
  bool only_known_tasks() const {
    const auto tasks = current_tasks();
    if (!tasks) return false;
    const size_t known = 1 + (template_.pid >= 0 ? 1 : 0) + (next_ ? 1 : 0) + running_.size();
    return *tasks == known;
  }

  // v2: "populated 0" in cgroup.events, read again through the descriptor kept open. v1
  // has no such file, and its cgroup.procs must be opened afresh for each look: a
  // descriptor read again within a second is answered from the kernel's cached list.
  static bool exec_cgroup_empty(const ExecCgroup& cgroup) {
    if (cgroup.events_fd >= 0) {
      char text[128];
      ssize_t n = pread(cgroup.events_fd, text, sizeof text - 1, 0);
      if (n > 0) {
        text[n] = '\0';
        if (const char* populated = std::strstr(text, "populated ")) return populated[10] == '0';
      }
    }
    return rt::cgroup_is_empty(cgroup.dir_fd);
  }

  rt::Spec spec_;
  int exec_parent_fd_;
  int tasks_fd_;               // the sandbox's pids.current, or -1 (no pids controller)
  int refusals_fd_;            // its pids.events, or -1
  uint64_t refusals_seen_{0};  // pids.events' "max" at the last look
  uint64_t task_limit_;        // the sandbox's pids.max, 0 when it has none
  // What make_room keeps free for the next command (its shell and what it forks).
  static constexpr uint64_t kReservedTasks = 16;
  rt::SeccompProgram seccomp_;
  rt::CommandContext ctx_;
  std::map<uint32_t, Execution> running_;
  std::map<pid_t, uint32_t> by_pid_;
  std::vector<Execution> lingering_;
  std::optional<Prepared> next_;
  // When the last spawn came (CLOCK_MONOTONIC), and, when the next command's child waits
  // for this command's end, the time it is made at the latest (0: it does not wait).
  static constexpr int64_t kQuietSpellNs = 1'000'000'000;
  int64_t last_spawn_ns_ = 0;
  int64_t prepare_after_ns_ = 0;
  rt::CommandTemplate template_;
  uint32_t cgroup_counter_ = 0;
  // Emptied execution cgroups kept for reuse.
  static constexpr size_t kKeptCgroups = 2;
  std::vector<ExecCgroup> free_cgroups_;
  // Regions of children discarded before their command, until they are reaped.
  std::map<pid_t, rt::CommandRegion*> discarded_regions_;
};

void join_cgroup(const std::string& dir) {
  std::string path = dir + "/cgroup.procs";
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw rt::SyscallError("open(" + path + ")", errno);
  if (write(fd, "0", 1) != 1) {
    int err = errno;
    close(fd);
    throw rt::SyscallError("write(" + path + ", 0)", err);
  }
  close(fd);
}

[[noreturn]] void report_failure(const std::string& what) {
  proto::send_message(kControlFd, proto::Type::kSetupFailed, 0, 0, what);
  _exit(1);
}

// PID 1: build the filesystem and serve.
[[noreturn]] void run_pid1(rt::Spec spec, const rt::FolderTrees& trees, int userns_fd, int exec_parent_fd,
                           TaskCounter tasks, rt::SeccompProgram seccomp) {
  std::vector<int> listeners;
  try {
    rt::setup_filesystem(spec, trees);
    for (int tree : {trees.workspace, trees.uploads, trees.outputs, trees.skills})
      if (tree >= 0) close(tree);  // attached: the descriptors are not needed any more
    rt::check(sethostname(spec.hostname.data(), spec.hostname.size()), "sethostname(" + spec.hostname + ")");
    rt::bring_up_loopback();
    // The sandbox's only ways out: listeners on its own loopback, whose connections the
    // server relays (no route, no interface, no firewall rule to get wrong).
    for (const auto& listener : spec.listeners)
      listeners.push_back(rt::open_listener(listener.address, listener.port));
    // Nothing in the sandbox may read PID 1's memory or descriptors.
    rt::check(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE, 0)");
  } catch (const std::exception& e) {
    report_failure(e.what());
  }
  Init init(std::move(spec), userns_fd, exec_parent_fd, tasks, std::move(seccomp));
  proto::send_message(kControlFd, proto::Type::kReady, 0, 0, {}, listeners.data(), listeners.size());
  // The server holds them now; PID 1 keeps no copy a command could inherit.
  for (int fd : listeners) close(fd);
  init.prepare_first();
  init.serve();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--version") == 0) {
    std::puts("sandboxd-init " SANDBOXD_VERSION);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--userns-holder") == 0) return rt::run_userns_holder(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "--mount-template") == 0) return rt::run_mount_template(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "--gvisor-launch") == 0) return rt::run_gvisor_launch(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "--gvisor-agent") == 0) return rt::run_gvisor_agent(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "--gvisor-enter") == 0) return rt::run_gvisor_enter(argc, argv);
  if (fcntl(kControlFd, F_GETFD) < 0) {
    std::fprintf(stderr, "sandboxd-init: started by sandboxd with its control socket on fd 3\n");
    return 2;
  }
  // Only stdio and the control socket cross from the server.
  close_range(kControlFd + 1, ~0U, 0);
  // If the server dies while the sandbox is being set up, so does the launcher.
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  signal(SIGPIPE, SIG_IGN);
  // The sandbox's own folders (/home, /mnt, ...) and the commands' files get the usual
  // modes whatever umask the server runs with (the systemd unit's UMask=0027).
  umask(022);
  // Under memory pressure the kernel kills a sandbox's processes first, never the server
  // (which runs with a low score); every command inherits this.
  if (int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
    if (write(fd, "1000", 4) != 4) std::fprintf(stderr, "sandboxd-init: cannot raise oom_score_adj\n");
    close(fd);
  }
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, nullptr);

  proto::Message msg;
  if (proto::receive_message(kControlFd, msg) <= 0 || msg.header.type != proto::Type::kSpec)
    report_failure("expected the sandbox spec as the first control message");
  rt::Spec spec;
  if (std::string err = rt::decode(msg.payload, spec); !err.empty())
    report_failure("bad sandbox spec: " + err);

  // The agent's user namespace; with mount_trees (spec.h) also the namespace to make
  // the sandbox's from and the container's folders as detached trees.
  const size_t trees = spec.mount_trees ? 3 + (spec.skills_dir.empty() ? 0 : 1) : 0;
  if (msg.fds.size() != 1 + (spec.mount_trees ? 1 + trees : 0))
    report_failure(
        "expected the agent user namespace (and the mount template and folder trees) with the spec");
  int userns_fd = msg.fds[0], exec_parent_fd = -1;
  TaskCounter tasks;
  const int mount_template_fd = spec.mount_trees ? msg.fds[1] : -1;
  rt::FolderTrees folder_trees;
  if (spec.mount_trees) {
    folder_trees.workspace = msg.fds[2];
    folder_trees.uploads = msg.fds[3];
    folder_trees.outputs = msg.fds[4];
    if (trees == 4) folder_trees.skills = msg.fds[5];
  }
  rt::SeccompProgram seccomp;
  seccomp.instructions.resize(spec.seccomp_bpf.size() / sizeof(sock_filter));
  std::memcpy(seccomp.instructions.data(), spec.seccomp_bpf.data(), spec.seccomp_bpf.size());
  try {
    for (const auto& dir : spec.cgroup_dirs) join_cgroup(dir);
    // The count of the sandbox's tasks (Init::only_known_tasks), where a pids controller
    // has it; read-only, and opened here, by its host path, like the cgroups above.
    for (const auto& dir : spec.cgroup_dirs) {
      if ((tasks.current_fd = open((dir + "/pids.current").c_str(), O_RDONLY | O_CLOEXEC)) < 0) continue;
      tasks.events_fd = open((dir + "/pids.events").c_str(), O_RDONLY | O_CLOEXEC);
      // Its limit, set before PID 1 joined and never changed ("max": none).
      if (int fd = open((dir + "/pids.max").c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
        char text[32] = {};
        if (read(fd, text, sizeof text - 1) > 0) tasks.limit = std::strtoull(text, nullptr, 10);
        close(fd);
      }
      break;
    }
    exec_parent_fd =
        static_cast<int>(rt::check(open(spec.exec_cgroup_parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC),
                                   "open(" + spec.exec_cgroup_parent + ")"));
    // The sandbox's mount namespace is a copy of the template's few mounts, not of the
    // server's (mount_template.h); entered after the host paths above are opened.
    if (mount_template_fd >= 0) {
      rt::check(setns(mount_template_fd, CLONE_NEWNS), "setns(mount template, CLONE_NEWNS)");
      close(mount_template_fd);
    }
    rt::check(
        unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP),
        "unshare(CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWNET|CLONE_NEWIPC|CLONE_NEWUTS|CLONE_NEWCGROUP)");
  } catch (const std::exception& e) {
    report_failure(e.what());
  }
  pid_t pid1 = fork();
  if (pid1 < 0) report_failure(rt::describe_errno("fork(pid 1)", errno));
  if (pid1 == 0) {
    prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);  // its parent, the launcher, exits next
    run_pid1(std::move(spec), folder_trees, userns_fd, exec_parent_fd, tasks, std::move(seccomp));
  }
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid1, 0));
  if (pidfd < 0) {
    kill(pid1, SIGKILL);
    report_failure(rt::describe_errno("pidfd_open(pid 1)", errno));
  }
  proto::send_message(kControlFd, proto::Type::kInitPid, 0, pid1, {}, &pidfd, 1);
  _exit(0);
}
