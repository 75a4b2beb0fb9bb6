// A command's child, from its clone (or fork) to execve: the same steps for a child made
// directly by PID 1 and for one cloned by the command template. Internal to
// sandboxd-init.
#pragma once

#include "runtime/command_region.h"

namespace sandboxd::runtime {

// Every step from the new process to execve; the same for both kinds of child. A child
// of the template is already the confined agent, and PID 1 moves it into its cgroup.
[[noreturn]] void run_child(CommandRegion& region, bool shares_memory);

// The entry of a child cloned with CLONE_VM by PID 1 (`arg`: its CommandRegion).
int shared_memory_child_main(void* arg);

}  // namespace sandboxd::runtime
