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

#include <boost/asio/post.hpp>
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
  std::vector<std::string> argv{init_path, "--userns-holder", std::to_string(host_uid),
                                std::to_string(host_gid)};
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
    throw SyscallError("unshare(CLONE_NEWUSER) as uid " + std::to_string(host_uid) +
                           " or setting its limits in " + init_path + " --userns-holder",
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

// Two threads: a holder takes a few milliseconds (an exec, an unshare, a report); a
// burst of starts waits its turn here, never on an I/O thread. Never destroyed: a
// holder may still be running at exit.
boost::asio::thread_pool& holder_threads() {
  static auto* pool = new boost::asio::thread_pool(2);
  return *pool;
}

}  // namespace

std::shared_ptr<PendingUserns> PendingUserns::start(const boost::asio::any_io_executor& executor,
                                                    std::string init_path, uint32_t host_uid,
                                                    uint32_t host_gid, std::vector<UsernsLimit> limits) {
  std::shared_ptr<PendingUserns> pending(new PendingUserns(executor));
  boost::asio::post(holder_threads(), [pending, init_path = std::move(init_path), host_uid, host_gid,
                                       limits = std::move(limits)] {
    int fd = -1;
    std::exception_ptr error;
    try {
      fd = create_agent_userns(init_path, host_uid, host_gid, limits);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(pending->mutex_);
      pending->fd_ = fd;
      pending->error_ = error;
    }
    pending->ready_.try_send(boost::system::error_code{});  // (room for one: never fails)
  });
  return pending;
}

void join_userns_holders() { holder_threads().join(); }

PendingUserns::~PendingUserns() {
  if (fd_ >= 0) close(fd_);
}

boost::asio::awaitable<int> PendingUserns::get() {
  co_await ready_.async_receive(boost::asio::use_awaitable);
  std::lock_guard lock(mutex_);
  if (error_) std::rethrow_exception(error_);
  int fd = fd_;
  fd_ = -1;
  co_return fd;
}

}  // namespace sandboxd::runtime
