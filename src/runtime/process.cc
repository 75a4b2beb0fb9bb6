// PID 1's side of a command's child: made ahead (prepare_command), handed its command
// (launch_command) or discarded. The child's own steps are in command_child.cc (which
// says why sharing PID 1's memory is safe), the agent's confinement in confinement.cc,
// its region in command_region.cc, the template it may be cloned from in
// command_template.cc.

#include "runtime/process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

#include "runtime/command_child.h"
#include "runtime/command_region.h"
#include "runtime/raw_syscall.h"
#include "runtime/syscall_error.h"

namespace sandboxd::runtime {

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

int prepare_command(const CommandContext& ctx, int cgroup_procs, PreparedCommand& out, std::string& error) {
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
  prepare_child_region(region, ctx, cgroup_procs, request[0], in_pipe[0], out_pipe[1], err_pipe[1], report[1],
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
  if (prepared.region && prepared.region->from_template) {
    // A child of the template: the request goes into its region and the child is woken
    // there. A child that has exited (an agent can kill it) has cleared its pid word.
    CommandRegion& region = *prepared.region;
    if (template_child_done(region)) return -EPIPE;
    if (encoded_request.size() > region.data_capacity) return -E2BIG;
    std::memcpy(region.data(), encoded_request.data(), encoded_request.size());
    if (!lay_out(region, encoded_request.size(), region.ctx->static_bash)) return -EINVAL;
    wake_template_child(region, kGoToken);
    return 0;
  }
  std::string message(sizeof(uint32_t), '\0');
  if (prepared.region) {
    // The child reads the region only after the token (see command_child.cc).
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
  // A child of the template waits on its region, not on a pipe whose close it would see.
  if (prepared.region && prepared.region->from_template) wake_template_child(*prepared.region, kQuitToken);
  close_all({prepared.request_write, prepared.stdin_write, prepared.stdout_read, prepared.stderr_read,
             prepared.report_read});
  CommandRegion* region = prepared.region;
  prepared = PreparedCommand{};
  prepared.region = region;
}
}  // namespace sandboxd::runtime
