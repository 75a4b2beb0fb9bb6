// Starting one command inside a running sandbox, from sandboxd-init: a new session in
// its own per-execution cgroup, stdin/stdout/stderr on pipes, then the user namespace and
// agent's credentials, no capabilities, and the seccomp filter last before execve.
//
// The child is made with clone(CLONE_VM) where that is safe (see command_child.cc): it shares
// PID 1's memory instead of copying its page tables (the copy, and its teardown at
// execve, cost as much as running a short command on a paravirtualized VM), runs on a
// stack of its own and only makes raw system calls until execve. Elsewhere it is forked;
// both kinds run the very same steps.
//
// By job: process.cc (PID 1's side: a child made ahead, handed its command, discarded),
// command_child.cc (the child's steps to execve), confinement.cc (becoming the confined
// agent), command_region.cc (the child's stack and request), command_template.cc (the
// template children are cloned from).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

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
  // clone(CLONE_VM) instead of fork (decided once by PID 1: see use_shared_memory_child).
  bool share_memory = false;
};

// Whether children may share PID 1's memory here: the architecture has raw system call
// wrappers and fs.suid_dumpable is not 1 (with 1, the child's uid change would make the
// memory it shares with PID 1 ptrace-able by the agent's own processes).
bool use_shared_memory_child();

// A child's stack and request, in PID 1's memory (command_region.h).
struct CommandRegion;
// Gives a region back once its child can no longer use it: its execve succeeded (the
// report pipe closed without a failure, or a template child's pid word was cleared) or
// it has been reaped.
void release_region(CommandRegion* region);

// A child forked ahead of its command: already in its own session and in its
// execution cgroup (joining one is the slow part of a start on cgroup v1: the first
// migration after a quiet spell waits for an RCU grace period), waiting for the
// command on a pipe. PID 1 keeps one ready, so a command only pays for the exec.
struct PreparedCommand {
  pid_t pid = -1;
  // The encoded SpawnRequest goes here, length first. -1 for a child of the template,
  // which is woken through its region and says there when it has exec'd or exited.
  int request_write = -1;
  // The command's stdin. PID 1 closes it at once for a plain command (its stdin is then
  // an empty pipe at end of file, as /dev/null would be) and hands it to the server for
  // a long-lived process the server talks to (the Python kernel's request channel).
  int stdin_write = -1;
  int stdout_read = -1;
  int stderr_read = -1;
  // Closes (EOF) when execve succeeds; carries a SpawnFailure when a step before it
  // failed. Polled, so PID 1 never waits for a child's execve. -1 for a child of the
  // template (its region has both: template_child_done, failure).
  int report_read = -1;
  // The shared-memory child's stack and request; PID 1 owns it until release_region.
  CommandRegion* region = nullptr;
};

// What a child that could not reach execve writes to its report pipe (a child of the
// template: into its region).
struct SpawnFailure {
  int err;
  char step[96];
};

// Starts (clone or fork) a child that joins the execution cgroup whose cgroup.procs is
// open at cgroup_procs and waits for its command. Returns 0, or a negative errno with
// `error` naming the failed call.
int prepare_command(const CommandContext& ctx, int cgroup_procs, PreparedCommand& out, std::string& error);

// Hands the encoded SpawnRequest to a prepared child: laid out in its region and the
// child woken there (a child of the template), or written on request_write, which is
// then closed. Returns 0, or -EPIPE when the child is gone (prepare another).
int launch_command(PreparedCommand& prepared, const std::string& encoded_request);

// The command template (see command_template.cc): one process per sandbox that became the
// agent and installed the seccomp filter once, and from which PID 1 has each command's
// child cloned, so that every child inherits the filter and credentials instead of
// setting them up again. Owned by PID 1; killed and replaced when it stops answering.
struct CommandTemplate {
  pid_t pid = -1;
  // The template's own stack, and the handshake through which PID 1 asks it for a
  // child (no descriptors: futex words in this region).
  CommandRegion* region = nullptr;
  // Its setup failed once (the same steps would fail again): prepare directly.
  bool unusable = false;
  // Children whose template died before saying so, killed, until reaped.
  struct Orphan {
    pid_t pid;
    CommandRegion* region;
  };
  std::vector<Orphan> orphans;
};

// prepare_command through the template (started on first use, restarted after it
// died or stopped answering): the same child, in its execution cgroup and waiting for
// its command. Returns 0, or a negative errno with `error` set when the template could
// not make it (the caller then uses prepare_command).
int prepare_command_from_template(CommandTemplate& tpl, const CommandContext& ctx, int cgroup_procs,
                                  PreparedCommand& out, std::string& error);

// For every pid PID 1 reaps: true when it was the template (now forgotten, so the next
// command starts a new one) or a child orphaned by it.
bool template_reaped(CommandTemplate& tpl, pid_t pid);

// Closes every descriptor the parent holds for a prepared child that never got its
// command (a child of the template is told to exit). Its region, if any, is left in
// `prepared.region` (the child may still run on it until it is reaped).
void discard_prepared(PreparedCommand& prepared);

}  // namespace sandboxd::runtime
