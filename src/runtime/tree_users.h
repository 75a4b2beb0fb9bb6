// Ending the processes of one sandbox that still use a folder after it was taken away
// from them: a lazily detached bind stays reachable through a working directory, an
// open file or a mapping that was inside it, and Linux has no revoke(2).
#pragma once

#include <sys/types.h>

#include <string>

namespace sandboxd::runtime {

// SIGKILLs every process of the sandbox whose PID 1 is `pid1` (its descendants, found
// through /proc/<pid>/task/<tid>/children, whatever namespaces they made) that has its
// working directory or root, an open file or a mapped file inside the host folder
// `dir` (matched by device and inode over the folder's entries, at most `max_entries`
// of them). Returns how many were signalled. Walks /proc and the folder: off the I/O
// threads.
int kill_tree_users(pid_t pid1, const std::string& dir, size_t max_entries);

}  // namespace sandboxd::runtime
