#include "runtime/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "runtime/syscall_error.h"
#include "runtime/user.h"

namespace sandboxd::runtime {
namespace {

[[noreturn]] void child_fail(int report_fd, const char* step, int err) {
  SpawnFailure failure{err, {}};
  std::strncpy(failure.step, step, sizeof failure.step - 1);
  (void)!write(report_fd, &failure, sizeof failure);
  _exit(127);
}

// Everything from fork to execve: async-signal-safe calls only.
[[noreturn]] void run_child(const CommandContext& ctx, char* const* argv, char* const* envp,
                            const char* cwd, int cgroup_dirfd, int out_w, int err_w,
                            int report_fd) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
  if (setsid() < 0) child_fail(report_fd, "setsid()", errno);
  int procs = openat(cgroup_dirfd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
  if (procs < 0) child_fail(report_fd, "openat(exec cgroup, cgroup.procs)", errno);
  if (write(procs, "0", 1) != 1) child_fail(report_fd, "write(exec cgroup.procs, 0)", errno);
  close(procs);
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) child_fail(report_fd, "open(/dev/null)", errno);
  if (dup2(null_fd, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
    child_fail(report_fd, "dup2(stdio)", errno);
  if (ctx.max_open_files > 0) {
    rlimit limit{ctx.max_open_files, ctx.max_open_files};
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) child_fail(report_fd, "setrlimit(RLIMIT_NOFILE)", errno);
  }
  const char* step = nullptr;
  if (int rc = become_agent(ctx.userns_fd, ctx.last_cap, &step); rc < 0)
    child_fail(report_fd, step, -rc);
  if (chdir(cwd) != 0) child_fail(report_fd, "chdir(cwd)", errno);
  // Every inherited descriptor but stdio closes at exec (the report pipe must survive
  // until then to tell the parent about a failed execve).
  if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) child_fail(report_fd, "close_range(3, ~0)", errno);
  if (int rc = apply_seccomp(*ctx.seccomp, &step); rc < 0) child_fail(report_fd, step, -rc);
  execve(argv[0], argv, envp);
  child_fail(report_fd, "execve", errno);
}

}  // namespace

int start_command(const CommandContext& ctx, const protocol::SpawnRequest& req, int cgroup_dirfd,
                  StartedCommand& out, std::string& error) {
  // Prepare everything that allocates before fork.
  std::vector<char*> argv, envp;
  for (const auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : req.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int out_pipe[2], err_pipe[2], report[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    error = describe_errno("pipe2(stdout)", errno);
    return -errno;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    error = describe_errno("pipe2(stderr)", err);
    return -err;
  }
  if (pipe2(report, O_CLOEXEC) != 0) {
    int err = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    error = describe_errno("pipe2(report)", err);
    return -err;
  }
  pid_t pid = fork();
  if (pid == 0)
    run_child(ctx, argv.data(), envp.data(), req.cwd.c_str(), cgroup_dirfd, out_pipe[1],
              err_pipe[1], report[1]);
  int fork_errno = errno;
  close(out_pipe[1]);
  close(err_pipe[1]);
  close(report[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    close(report[0]);
    error = describe_errno("fork()", fork_errno);
    return -fork_errno;
  }
  out.pid = pid;
  out.stdout_read = out_pipe[0];
  out.stderr_read = err_pipe[0];
  out.report_read = report[0];
  return 0;
}

}  // namespace sandboxd::runtime
