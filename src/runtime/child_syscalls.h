// What a command's child and the command template run on: raw system calls only (see
// command_child.cc for why), a failure written to the report pipe, exact reads of a
// pipe. Nothing here writes errno, allocates or takes a lock. Internal to sandboxd-init.
#pragma once

#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>

#include "runtime/process.h"
#include "runtime/raw_syscall.h"

namespace sandboxd::runtime {

inline long sys(long nr, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0) {
  return raw::syscall6(nr, a1, a2, a3, a4, a5);
}

inline size_t length_of(const char* s) {
  size_t n = 0;
  while (s[n]) ++n;
  return n;
}

[[noreturn]] inline void child_exit(int code) {
  for (;;) sys(SYS_exit_group, code);
}

[[noreturn]] inline void child_fail(int report_fd, const char* step, long rc) {
  SpawnFailure failure{};
  failure.err = static_cast<int>(-rc);
  size_t n = length_of(step);
  if (n > sizeof failure.step - 1) n = sizeof failure.step - 1;
  for (size_t i = 0; i < n; ++i) failure.step[i] = step[i];
  sys(SYS_write, report_fd, reinterpret_cast<long>(&failure), sizeof failure);
  child_exit(127);
}

inline bool read_exactly(int fd, void* data, size_t size) {
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

}  // namespace sandboxd::runtime
