// Pseudo-terminals for processes that want one (E2B's `pty`): PID 1 opens the master in
// the sandbox's own devpts instance (mount.cc mounts it `newinstance`, /dev/ptmx points
// at it), so the terminal, its number and its slave exist only inside the sandbox; the
// host's /dev/pts is never mounted there and the server never hands the sandbox a host
// terminal. The child opens the slave as its controlling terminal (command_child.cc);
// the master goes to the server, which reads and writes it as a process's pipes and
// sets its window size here.
#pragma once

#include <sys/types.h>

#include <string>

#include "runtime/protocol.h"

namespace sandboxd::runtime {

struct OpenedTerminal {
  int master = -1;         // close-on-exec, PID 1's until handed to the server
  std::string slave_path;  // "/dev/pts/N" in the sandbox's devpts
};

// PID 1's side: opens /dev/ptmx, unlocks its slave, sets the window size and gives the
// slave to the agent (host ids `owner_uid`/`owner_gid`, uid/gid 1000 inside) with mode
// 0620, so that the agent's child can open it by path and no other user could. Returns
// 0, or -errno with `error` naming the failed call and its arguments.
int open_terminal(const protocol::TerminalSize& size, uid_t owner_uid, gid_t owner_gid, OpenedTerminal& out,
                  std::string& error);

// The server's side: the window size of the terminal whose master is `master` (the
// kernel sends SIGWINCH to its foreground process group when it changes). 0 or -errno.
int set_terminal_size(int master, const protocol::TerminalSize& size);

}  // namespace sandboxd::runtime
