// The server side's way to make a sandbox's user namespace (user.h) without holding an
// I/O thread: the holder process is spawned and waited for on threads of their own.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/user.h"

namespace sandboxd::runtime {

// A sandbox's user namespace being made (create_agent_userns) on the holder threads from
// the moment it is started, so that the rest of the sandbox's start (cgroups, the
// launcher) goes on meanwhile; `get` awaits it.
class PendingUserns : public std::enable_shared_from_this<PendingUserns> {
 public:
  static std::shared_ptr<PendingUserns> start(const boost::asio::any_io_executor& executor,
                                              std::string init_path, uint32_t host_uid, uint32_t host_gid,
                                              std::vector<UsernsLimit> limits);
  ~PendingUserns();  // closes a namespace that nobody took
  PendingUserns(const PendingUserns&) = delete;
  PendingUserns& operator=(const PendingUserns&) = delete;

  // The namespace's fd, the caller's to close; resumes on the caller's executor. Throws
  // as create_agent_userns. Once only.
  boost::asio::awaitable<int> get();

 private:
  explicit PendingUserns(const boost::asio::any_io_executor& executor) : ready_(executor, 1) {}

  boost::asio::experimental::concurrent_channel<void(boost::system::error_code)> ready_;
  std::mutex mutex_;
  int fd_ = -1;
  std::exception_ptr error_;
};

// Waits for the holders under way and runs no more: at shutdown, before the I/O context
// their results are sent to goes.
void join_userns_holders();

}  // namespace sandboxd::runtime
