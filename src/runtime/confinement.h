// The steps that make a process the confined agent, shared by every command's child
// made directly and by the command template (whose children inherit them through
// clone). Internal to sandboxd-init.
#pragma once

#include "runtime/process.h"

namespace sandboxd::runtime {

// The command's limits, the agent's credentials and the seccomp filter: done by each
// directly made child, and once by the template for all the children it clones.
// Returns 0, or the negative errno with *step naming the failed call.
// Raw system calls only: it runs in a child that may share PID 1's memory.
long become_confined_agent(const CommandContext& ctx, const char** step);

}  // namespace sandboxd::runtime
