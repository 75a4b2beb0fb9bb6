#include "runtime/syscall_error.h"

#include <cstring>

namespace sandboxd::runtime {

std::string describe_errno(const std::string& call, int err) { return call + ": " + std::strerror(err); }

SyscallError::SyscallError(const std::string& call, int err)
    : std::runtime_error(describe_errno(call, err)), err_(err) {}

long check(long rc, const std::string& call) {
  if (rc < 0) throw SyscallError(call, errno);
  return rc;
}

}  // namespace sandboxd::runtime
