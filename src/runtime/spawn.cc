#include "runtime/spawn.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/syscall_error.h"

namespace sandboxd::runtime {
namespace {

pid_t spawn_with(const std::vector<std::string>& argv, int fd3, int out_fd) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  if (out_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
    posix_spawn_file_actions_adddup2(&actions, out_fd, 2);
  }
  if (fd3 >= 0) posix_spawn_file_actions_adddup2(&actions, fd3, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The child starts with default signal handling and nothing blocked.
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  // Nothing of the server's environment (which may hold an operator's secrets) reaches
  // the helpers, so nothing of it can surface in a sandbox's /proc.
  static char path[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  static char lang[] = "LANG=C";
  char* env[] = {path, lang, nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), env);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw SyscallError("posix_spawn(" + argv[0] + ")", rc);
  return pid;
}

}  // namespace

pid_t spawn_program(const std::vector<std::string>& argv, int fd3) {
  // dup2 onto the same number would keep O_CLOEXEC; make sure the source is not 3.
  if (fd3 == 3) {
    int moved = static_cast<int>(check(fcntl(fd3, F_DUPFD_CLOEXEC, 10), "fcntl(F_DUPFD_CLOEXEC)"));
    pid_t pid = -1;
    try {
      pid = spawn_with(argv, moved, -1);
    } catch (...) {
      close(moved);
      throw;
    }
    close(moved);
    return pid;
  }
  return spawn_with(argv, fd3, -1);
}

int run_program(const std::vector<std::string>& argv, std::string& output) {
  int pipefd[2];
  check(pipe2(pipefd, O_CLOEXEC), "pipe2");
  pid_t pid;
  try {
    pid = spawn_with(argv, -1, pipefd[1]);
  } catch (...) {
    close(pipefd[0]);
    close(pipefd[1]);
    throw;
  }
  close(pipefd[1]);
  char buf[4096];
  ssize_t n;
  while ((n = retry_eintr([&] { return read(pipefd[0], buf, sizeof buf); })) > 0)
    if (output.size() < 65536) output.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  check(retry_eintr([&] { return waitpid(pid, &status, 0); }), "waitpid(" + argv[0] + ")");
  return status;
}

}  // namespace sandboxd::runtime
