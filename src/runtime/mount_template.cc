// See mount_template.h.

#include "runtime/mount_template.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/fd_passing.h"
#include "runtime/spawn.h"
#include "runtime/syscall_error.h"

namespace sandboxd::runtime {

int create_mount_template(const std::string& init_path, const std::string& service_dir,
                          const std::vector<std::string>& needed, std::string& error) {
  std::vector<std::string> argv{init_path, "--mount-template", service_dir.empty() ? "-" : service_dir};
  argv.insert(argv.end(), needed.begin(), needed.end());
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    error = describe_errno("socketpair(mount template)", errno);
    return -1;
  }
  pid_t helper;
  try {
    helper = spawn_program(argv, pair[1]);
  } catch (const std::exception& e) {
    close(pair[0]);
    close(pair[1]);
    error = e.what();
    return -1;
  }
  close(pair[1]);
  char byte = 0;
  int fd = -1;
  const int got = receive_byte_with_fd(pair[0], byte, fd);
  close(pair[0]);
  int status = 0;
  retry_eintr([&] { return waitpid(helper, &status, 0); });
  if (got != 1 || byte != 'o' || fd < 0) {
    if (fd >= 0) close(fd);
    error = init_path +
            " --mount-template could not make a mount namespace to start sandboxes from "
            "(unshare(CLONE_NEWNS), open_tree(2) or setns(2) refused: setns needs CAP_SYS_CHROOT)";
    return -1;
  }
  return fd;
}

std::vector<int> clone_folders(const std::vector<const std::string*>& folders) {
  std::vector<int> trees;
  for (const std::string* folder : folders) {
    if (folder->empty()) continue;
    // Recursive: a folder with mounts below it (skills) comes whole. A clone, never
    // the mount itself: the server's own stays where it is.
    int tree = static_cast<int>(syscall(SYS_open_tree, AT_FDCWD, folder->c_str(),
                                        OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
    if (tree < 0) {
      const int err = errno;
      for (int fd : trees) close(fd);
      throw SyscallError("open_tree(" + *folder + ", OPEN_TREE_CLONE|AT_RECURSIVE)", err);
    }
    trees.push_back(tree);
  }
  return trees;
}

bool can_clone_folders(std::string& error) {
  int probe = static_cast<int>(syscall(SYS_open_tree, AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (probe < 0) {
    error = describe_errno("open_tree(/, OPEN_TREE_CLONE) in the server", errno);
    return false;
  }
  close(probe);
  return true;
}

}  // namespace sandboxd::runtime
