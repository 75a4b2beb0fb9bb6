// Server side of the agent user namespace (see user.h).

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "runtime/fd_passing.h"
#include "runtime/spawn.h"
#include "runtime/syscall_error.h"
#include "runtime/user.h"
#include "runtime/userns.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sandboxd::runtime {
namespace {

void write_map(const std::string& path, const std::string& content) {
  int fd = static_cast<int>(check(open(path.c_str(), O_WRONLY | O_CLOEXEC), "open(" + path + ")"));
  ssize_t n = write(fd, content.data(), content.size());
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(content.size()))
    throw SyscallError("write(" + path + ", \"" + content.substr(0, content.size() - 1) + "\")",
                       n < 0 ? err : EIO);
}

}  // namespace

int create_agent_userns(const std::string& init_path, uint32_t host_uid, uint32_t host_gid,
                        const std::vector<UsernsLimit>& limits) {
  std::vector<std::string> argv{init_path, "--userns-holder", std::to_string(host_uid), std::to_string(host_gid)};
  for (const auto& limit : limits) argv.push_back(limit.name + "=" + std::to_string(limit.value));
  int pair[2];
  check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), "socketpair(userns holder)");
  pid_t holder;
  try {
    holder = spawn_program(argv, pair[1]);
  } catch (...) {
    close(pair[0]);
    close(pair[1]);
    throw;
  }
  close(pair[1]);
  auto finish = [&]() {
    close(pair[0]);  // the holder exits
    int status;
    retry_eintr([&] { return waitpid(holder, &status, 0); });
  };
  // The holder's report: 'o' with its namespace as a descriptor (SCM_RIGHTS), or 'e'.
  char byte = 0;
  int fd = -1;
  const int got = receive_byte_with_fd(pair[0], byte, fd);
  if (got != 1 || byte != 'o' || fd < 0) {
    if (fd >= 0) close(fd);
    finish();
    throw SyscallError("unshare(CLONE_NEWUSER) as uid " + std::to_string(host_uid) + " or setting its limits in " +
                           init_path + " --userns-holder",
                       EPERM);
  }
  try {
    std::string proc = "/proc/" + std::to_string(holder);
    write_map(proc + "/uid_map", std::to_string(kAgentUid) + " " + std::to_string(host_uid) + " 1\n");
    write_map(proc + "/gid_map", std::to_string(kAgentGid) + " " + std::to_string(host_gid) + " 1\n");
  } catch (...) {
    close(fd);
    finish();
    throw;
  }
  finish();
  return fd;
}

namespace {

// Two threads: a holder takes a few milliseconds (an exec, an unshare, a report), and
// sandbox starts seldom come more than two at a time; more wait their turn here, never
// on an I/O thread. Never destroyed: a start may still be waiting at exit.
boost::asio::thread_pool& holder_threads() {
  static auto* pool = new boost::asio::thread_pool(2);
  return *pool;
}

boost::asio::awaitable<int> create_on_this_thread(std::string init_path, uint32_t host_uid, uint32_t host_gid,
                                                  std::vector<UsernsLimit> limits) {
  co_return create_agent_userns(init_path, host_uid, host_gid, limits);
}

}  // namespace

boost::asio::awaitable<int> create_agent_userns_off_io(std::string init_path, uint32_t host_uid, uint32_t host_gid,
                                                       std::vector<UsernsLimit> limits) {
  co_return co_await boost::asio::co_spawn(
      holder_threads(), create_on_this_thread(std::move(init_path), host_uid, host_gid, std::move(limits)),
      boost::asio::use_awaitable);
}

}  // namespace sandboxd::runtime
