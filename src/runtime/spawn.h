// Starting programs from the (multithreaded) server: posix_spawn only, so nothing but
// exec runs in the child between fork and exec.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace sandboxd::runtime {

// Starts argv[0] (an absolute path) with stdin on /dev/null, stdout and stderr
// inherited, and `fd3` (when >= 0) as its fd 3. Throws SyscallError.
pid_t spawn_program(const std::vector<std::string>& argv, int fd3 = -1);

// Runs a program to completion, collecting stdout and stderr into `output`; returns its
// wait status. Blocking: for set-up work off the request path (formatting a volume).
int run_program(const std::vector<std::string>& argv, std::string& output);

}  // namespace sandboxd::runtime
