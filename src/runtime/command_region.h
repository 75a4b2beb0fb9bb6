// A command child's region: one mapping in PID 1's memory holding the child's request
// (laid out by PID 1 for a child that shares its memory, or by a forked child on its own
// copy) and, at its top, the stack that child runs on. PID 1 owns a region until the
// child can no longer use it (release_region), and keeps two for reuse. Internal to
// sandboxd-init: process.cc, command_child.cc and command_template.cc use it.
#pragma once

#include <sys/types.h>

#include <unistd.h>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "runtime/process.h"

namespace sandboxd::runtime {

struct CommandRequestLayout {
  const char* program = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* cwd = nullptr;
  // The pseudo-terminal slave to open as stdio and controlling terminal (PID 1 opened
  // its master); null for a process on pipes.
  const char* terminal = nullptr;
};

// One mapping: this header, then the data area (the request's bytes, then its argv and
// envp arrays), a guard page, and the child's stack at the top.
struct CommandRegion {
  // Fixed before the child starts. cgroup_procs: its execution cgroup's cgroup.procs,
  // opened by PID 1, for a child that joins it itself. request_read and report_fd are
  // -1 for a child of the template, which is told and tells through this region
  // (start_word, failure) instead.
  const CommandContext* ctx;
  int cgroup_procs, request_read, in_r, out_w, err_w, report_fd;
  size_t data_capacity;
  // Written by PID 1 before the token (shared memory child) or by the forked child
  // itself after reading the request from the pipe.
  CommandRequestLayout request;
  size_t data_used;
  // A child cloned by the template: the kernel writes its pid here during the clone
  // (CLONE_PARENT_SETTID), so PID 1 knows it even when the template dies before saying,
  // and sets it back to 0 when the child execs or exits (CLONE_CHILD_CLEARTID: the
  // kernel clears it once the child has left this memory for good).
  pid_t template_child_pid;
  bool from_template;
  // A child of the template waits on this word (a futex) for its command: 0 until PID 1
  // stores kGoToken (the request is laid out) or kQuitToken (it will not come).
  uint32_t start_word;
  // What a child of the template that could not reach execve writes before it exits
  // (err 0: nothing failed).
  SpawnFailure failure;
  // The template's own region: how PID 1 asks it for a child and it answers (see
  // command_template.cc). `state` is a futex word the kernel sets to 0 when the
  // template exits (CLONE_CHILD_CLEARTID), which wakes PID 1 if it is waiting.
  struct TemplateHandshake {
    uint32_t state;
    CommandRegion* request;  // the region of the child to clone
    int pid;                 // > 0: the child; <= 0: nothing was cloned
    int setup_failed;        // the template could not become the agent (failure says why)
  } handshake;
  char* data() { return reinterpret_cast<char*>(this + 1); }
};

// What PID 1 writes on a shared-memory child's request pipe, or into a template child's
// start_word, once the request is laid out in its region (a forked child gets the
// request's length on the pipe instead).
inline constexpr uint32_t kGoToken = 0xffffffffu;
inline constexpr uint32_t kQuitToken = 0xfffffffeu;

// Stores `token` in the region's start_word and wakes who waits on it: a template child
// (kGoToken: its command is laid out; kQuitToken: none will come), or the template
// itself (kGoToken: a child's region is in its handshake).
void wake_template_child(CommandRegion& region, uint32_t token);

// A template child has exec'd or exited: it will not touch its region again (its
// failure, if any, is in region.failure).
bool template_child_done(const CommandRegion& region);

// A region from the reuse slots or a new mapping; null (errno set) when none can be made.
CommandRegion* acquire_region();

// A command child's region: its context and the ends of the pipes it keeps, nothing of
// an earlier request left.
void prepare_child_region(CommandRegion* region, const CommandContext& ctx, int cgroup_procs,
                          int request_read, int in_r, int out_w, int err_w, int report_fd,
                          bool from_template);

// Where the region's child starts its stack (16-byte aligned).
void* stack_top(CommandRegion* region);

// Parses an encoded SpawnRequest (protocol.cc: cwd, then argv and env as a count and
// that many NUL-terminated items, then the terminal's slave path when there is one)
// that sits in the region's data area, in place: the strings stay where they are and
// the argv and envp arrays go after them. Used by PID 1
// for a shared-memory child, and by a forked child on its own copy; allocates nothing.
// False when it is malformed or does not fit.
bool lay_out(CommandRegion& region, size_t length, const char* static_bash);

// PID 1's side: closes each descriptor that is open (-1: none).
inline void close_all(std::initializer_list<int> fds) {
  for (int fd : fds)
    if (fd >= 0) close(fd);
}

}  // namespace sandboxd::runtime
