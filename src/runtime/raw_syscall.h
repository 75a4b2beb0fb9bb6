// System calls without libc, for a child that shares PID 1's memory (clone(CLONE_VM)).
//
// Such a child runs at the same time as PID 1, in the same address space and with the
// same thread pointer, so it must not write anything PID 1 may read: not errno (libc's
// wrappers and syscall() store failures in the thread's errno, which is PID 1's), not
// the heap, not libc's locks or caches. These wrappers only move registers: they return
// the kernel's result, a negative errno on failure, and touch no memory of their own.
#pragma once

#if defined(__x86_64__) || defined(__aarch64__)
#define SANDBOXD_HAVE_RAW_SYSCALL 1
#else
#define SANDBOXD_HAVE_RAW_SYSCALL 0
#endif

namespace sandboxd::runtime::raw {

#if defined(__x86_64__)
inline long syscall6(long nr, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0, long a6 = 0) {
  register long r10 __asm__("r10") = a4;
  register long r8 __asm__("r8") = a5;
  register long r9 __asm__("r9") = a6;
  long ret;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
}
#elif defined(__aarch64__)
inline long syscall6(long nr, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0, long a6 = 0) {
  register long x8 __asm__("x8") = nr;
  register long x0 __asm__("x0") = a1;
  register long x1 __asm__("x1") = a2;
  register long x2 __asm__("x2") = a3;
  register long x3 __asm__("x3") = a4;
  register long x4 __asm__("x4") = a5;
  register long x5 __asm__("x5") = a6;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
  return x0;
}
#endif

}  // namespace sandboxd::runtime::raw
