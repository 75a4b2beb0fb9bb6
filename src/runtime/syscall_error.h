// Errors from system calls, reported as nsjail and bubblewrap do: the call, its
// arguments and the kernel's reason, so an operator can tell which step failed.
#pragma once

#include <cerrno>
#include <stdexcept>
#include <string>

namespace sandboxd::runtime {

class SyscallError : public std::runtime_error {
 public:
  SyscallError(const std::string& call, int err);
  int code() const noexcept { return err_; }

 private:
  int err_;
};

// Formats "call: strerror(err)".
std::string describe_errno(const std::string& call, int err);

// Throws SyscallError(call, errno) when rc < 0; returns rc otherwise.
long check(long rc, const std::string& call);

// Retries a call interrupted by a signal.
template <typename F>
auto retry_eintr(F&& f) {
  for (;;) {
    auto rc = f();
    if (rc >= 0 || errno != EINTR) return rc;
  }
}

}  // namespace sandboxd::runtime
