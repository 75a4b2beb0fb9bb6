#include "runtime/terminal.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>

#include "runtime/syscall_error.h"

namespace sandboxd::runtime {

int open_terminal(const protocol::TerminalSize& size, uid_t owner_uid, gid_t owner_gid, OpenedTerminal& out,
                  std::string& error) {
  // O_NOCTTY: PID 1 never takes a controlling terminal (it would get the terminal's
  // SIGHUP, and a process of the agent's could signal it through the terminal).
  const int master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) {
    const int err = errno;
    error = describe_errno("open(/dev/ptmx, O_RDWR|O_NOCTTY)", err);
    return -err;
  }
  auto failed = [&](const std::string& call) {
    const int err = errno;
    close(master);
    error = describe_errno(call, err);
    return -err;
  };
  int unlock = 0;
  if (ioctl(master, TIOCSPTLCK, &unlock) != 0) return failed("ioctl(/dev/ptmx, TIOCSPTLCK, 0)");
  unsigned int number = 0;
  if (ioctl(master, TIOCGPTN, &number) != 0) return failed("ioctl(/dev/ptmx, TIOCGPTN)");
  winsize window{size.rows, size.cols, 0, 0};
  if (ioctl(master, TIOCSWINSZ, &window) != 0) return failed("ioctl(/dev/ptmx, TIOCSWINSZ)");
  // The slave is given to the agent by its path, never opened here: a slave opened and
  // closed again would leave the master reading EIO (the terminal's hang-up) until the
  // child opens it, and the server would take that for the process's end. The path is
  // this terminal's: number N stays the master's while it is open, and devpts holds
  // nothing but the kernel's own nodes (the agent can neither mount over /dev/pts nor
  // make a link in it). PID 1 (root) made it, so it is root's until given to the agent;
  // mode 0620 as devpts is mounted with.
  const std::string path = "/dev/pts/" + std::to_string(number);
  if (fchownat(AT_FDCWD, path.c_str(), owner_uid, owner_gid, AT_SYMLINK_NOFOLLOW) != 0)
    return failed("fchownat(" + path + ", " + std::to_string(owner_uid) + ", " + std::to_string(owner_gid) +
                  ", AT_SYMLINK_NOFOLLOW)");
  if (fchmodat(AT_FDCWD, path.c_str(), 0620, 0) != 0) return failed("fchmodat(" + path + ", 0620)");
  out.master = master;
  out.slave_path = path;
  return 0;
}

int set_terminal_size(int master, const protocol::TerminalSize& size) {
  winsize window{size.rows, size.cols, 0, 0};
  return ioctl(master, TIOCSWINSZ, &window) == 0 ? 0 : -errno;
}

}  // namespace sandboxd::runtime
