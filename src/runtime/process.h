// Starting one command inside a running sandbox, from sandboxd-init: a new session in
// its own per-execution cgroup, stdout/stderr on pipes, then the user namespace and
// agent's credentials, no capabilities, and the seccomp filter last before execve.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "runtime/protocol.h"
#include "runtime/seccomp.h"

namespace sandboxd::runtime {

struct CommandContext {
  int userns_fd = -1;
  int last_cap = 40;
  uint64_t max_open_files = 0;
  const SeccompProgram* seccomp = nullptr;
  // The image's statically linked bash (Debian's bash-static), when it has one: the
  // same bash, without the dynamic loader's work on every command (about a third of a
  // millisecond). Commands asking for /bin/bash run it; argv stays as asked.
  const char* static_bash = nullptr;
};

// A child forked ahead of its command: already in its own session and in its
// execution cgroup (joining one is the slow part of a start on cgroup v1: the first
// migration after a quiet spell waits for an RCU grace period), waiting for the
// command on a pipe. PID 1 keeps one ready, so a command only pays for the exec.
struct PreparedCommand {
  pid_t pid = -1;
  int request_write = -1;  // the encoded SpawnRequest goes here, length first
  int stdout_read = -1;
  int stderr_read = -1;
  // Closes (EOF) when execve succeeds; carries a SpawnFailure when a step before it
  // failed. Polled, so PID 1 never waits for a child's execve.
  int report_read = -1;
};

// What a child that could not reach execve writes to its report pipe.
struct SpawnFailure {
  int err;
  char step[96];
};

// Forks a child that joins the cgroup at cgroup_dirfd and waits for its command.
// Returns 0, or a negative errno with `error` naming the failed call.
int prepare_command(const CommandContext& ctx, int cgroup_dirfd, PreparedCommand& out, std::string& error);

// Hands the encoded SpawnRequest to a prepared child and closes request_write.
// Returns 0, or -EPIPE when the child is gone (prepare another).
int launch_command(PreparedCommand& prepared, const std::string& encoded_request);

// Closes every descriptor the parent holds for a prepared child.
void discard_prepared(PreparedCommand& prepared);

}  // namespace sandboxd::runtime
