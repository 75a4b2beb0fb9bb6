#include "runtime/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
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

bool read_exactly(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The child, from fork to execve. PID 1 is single-threaded, so allocating here is safe.
[[noreturn]] void run_child(const CommandContext& ctx, int cgroup_dirfd, int request_read, int out_w, int err_w,
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
  // Everything that does not depend on the command is done before waiting for it, so
  // that a command only pays for reading its request and execve.
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) child_fail(report_fd, "open(/dev/null)", errno);
  if (ctx.max_open_files > 0) {
    rlimit limit{ctx.max_open_files, ctx.max_open_files};
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) child_fail(report_fd, "setrlimit(RLIMIT_NOFILE)", errno);
  }
  const char* step = nullptr;
  if (int rc = become_agent(ctx.userns_fd, ctx.last_cap, &step); rc < 0)
    child_fail(report_fd, step, -rc);
  // Every inherited descriptor but stdio closes at exec (the report pipe must survive
  // until then to tell the parent about a failed execve; the request pipe is read first).
  if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) child_fail(report_fd, "close_range(3, ~0)", errno);
  if (int rc = apply_seccomp(*ctx.seccomp, &step); rc < 0) child_fail(report_fd, step, -rc);
  // Ready: wait for the command (a length, then the encoded request). Later siblings
  // may hold copies of the write end, so the length, not EOF, ends the message.
  uint32_t length = 0;
  if (!read_exactly(request_read, &length, sizeof length)) _exit(0);  // never used
  if (length > protocol::kMaxMessage) child_fail(report_fd, "read(spawn request): too long", E2BIG);
  std::string payload(length, '\0');
  if (!read_exactly(request_read, payload.data(), length)) child_fail(report_fd, "read(spawn request)", EPIPE);
  close(request_read);
  protocol::SpawnRequest req;
  if (!protocol::decode(payload, req)) child_fail(report_fd, "decode(spawn request)", EINVAL);
  std::vector<char*> argv, envp;
  for (auto& a : req.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : req.env) envp.push_back(e.data());
  envp.push_back(nullptr);

  if (dup2(null_fd, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
    child_fail(report_fd, "dup2(stdio)", errno);
  if (chdir(req.cwd.c_str()) != 0) child_fail(report_fd, "chdir(cwd)", errno);
  const char* program = argv[0];
  if (ctx.static_bash && req.argv[0] == "/bin/bash") program = ctx.static_bash;
  execve(program, argv.data(), envp.data());
  child_fail(report_fd, "execve", errno);
}

void close_all(std::initializer_list<int> fds) {
  for (int fd : fds)
    if (fd >= 0) close(fd);
}

}  // namespace

int prepare_command(const CommandContext& ctx, int cgroup_dirfd, PreparedCommand& out, std::string& error) {
  int request[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, report[2] = {-1, -1};
  for (auto [pipe_fds, name] : {std::pair{request, "pipe2(request)"}, std::pair{out_pipe, "pipe2(stdout)"},
                                std::pair{err_pipe, "pipe2(stderr)"}, std::pair{report, "pipe2(report)"}}) {
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
      int err = errno;
      close_all({request[0], request[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], report[0], report[1]});
      error = describe_errno(name, err);
      return -err;
    }
  }
  pid_t pid = fork();
  if (pid == 0) {
    close_all({request[1], out_pipe[0], err_pipe[0], report[0]});
    run_child(ctx, cgroup_dirfd, request[0], out_pipe[1], err_pipe[1], report[1]);
  }
  int fork_errno = errno;
  close_all({request[0], out_pipe[1], err_pipe[1], report[1]});
  if (pid < 0) {
    close_all({request[1], out_pipe[0], err_pipe[0], report[0]});
    error = describe_errno("fork()", fork_errno);
    return -fork_errno;
  }
  out.pid = pid;
  out.request_write = request[1];
  out.stdout_read = out_pipe[0];
  out.stderr_read = err_pipe[0];
  out.report_read = report[0];
  return 0;
}

int launch_command(PreparedCommand& prepared, const std::string& encoded_request) {
  std::string message(sizeof(uint32_t), '\0');
  uint32_t length = static_cast<uint32_t>(encoded_request.size());
  std::memcpy(message.data(), &length, sizeof length);
  message += encoded_request;
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
  close_all({prepared.request_write, prepared.stdout_read, prepared.stderr_read, prepared.report_read});
  prepared = PreparedCommand{};
}

}  // namespace sandboxd::runtime
