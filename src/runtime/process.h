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
};

struct StartedCommand {
  pid_t pid = -1;
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

// Forks the command with its cgroup at cgroup_dirfd and returns at once. On failure
// to fork returns a negative errno and fills `error` with the failed call.
int start_command(const CommandContext& ctx, const protocol::SpawnRequest& req, int cgroup_dirfd,
                  StartedCommand& out, std::string& error);

}  // namespace sandboxd::runtime
