#include "server/relay.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

namespace sandboxd::server {
namespace {

using tcp = asio::ip::tcp;
using boost::system::error_code;

// A pipe of one direction: what splice moves through. 1 MiB when the system allows it
// (fewer round trips through the event loop), else the default 64 KiB.
class Pipe {
 public:
  Pipe() {
    if (pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0)
      throw boost::system::system_error(error_code(errno, boost::system::system_category()), "pipe2");
    int size = fcntl(fds_[1], F_SETPIPE_SZ, 1 << 20);
    capacity_ = size > 0 ? static_cast<size_t>(size) : 65536;
  }
  ~Pipe() {
    close(fds_[0]);
    close(fds_[1]);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  int read_end() const { return fds_[0]; }
  int write_end() const { return fds_[1]; }
  size_t capacity() const { return capacity_; }

 private:
  int fds_[2] = {-1, -1};
  size_t capacity_ = 65536;
};

[[noreturn]] void fail(const char* what) {
  throw boost::system::system_error(error_code(errno, boost::system::system_category()), what);
}

// One direction, `from` -> `to`, until `from` ends; then `to`'s write half is shut down.
asio::awaitable<void> pump(tcp::socket& from, tcp::socket& to, uint64_t* delivered) {
  Pipe pipe;
  size_t buffered = 0;  // bytes in the pipe, not yet written to `to`
  bool from_done = false;
  constexpr unsigned kFlags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;
  for (;;) {
    bool would_block_reading = false;
    if (!from_done && buffered < pipe.capacity()) {
      ssize_t n = splice(from.native_handle(), nullptr, pipe.write_end(), nullptr, pipe.capacity() - buffered,
                         kFlags);
      if (n > 0)
        buffered += static_cast<size_t>(n);
      else if (n == 0)
        from_done = true;
      else if (errno == EAGAIN)
        would_block_reading = true;
      else if (errno != EINTR)
        fail("splice(socket -> pipe)");
    }
    if (buffered > 0) {
      ssize_t n = splice(pipe.read_end(), nullptr, to.native_handle(), nullptr, buffered, kFlags);
      if (n > 0) {
        buffered -= static_cast<size_t>(n);
        if (delivered) *delivered += static_cast<uint64_t>(n);
      } else if (n < 0 && errno == EAGAIN) {
        co_await to.async_wait(tcp::socket::wait_write, asio::use_awaitable);  // the reader is slow: wait
      } else if (n < 0 && errno != EINTR) {
        fail("splice(pipe -> socket)");
      }
      continue;
    }
    if (from_done) break;
    if (would_block_reading) co_await from.async_wait(tcp::socket::wait_read, asio::use_awaitable);
  }
  error_code ignored;
  to.shutdown(tcp::socket::shutdown_send, ignored);
}

}  // namespace

asio::awaitable<void> relay(tcp::socket a, tcp::socket b, RelayBytes* bytes) {
  using namespace asio::experimental::awaitable_operators;
  error_code ignored;
  a.native_non_blocking(true, ignored);
  b.native_non_blocking(true, ignored);
  try {
    // When one direction fails, the other is cancelled.
    co_await (pump(a, b, bytes ? &bytes->a_to_b : nullptr) && pump(b, a, bytes ? &bytes->b_to_a : nullptr));
  } catch (const std::exception&) {
    // A reset or a closed peer: the relay simply ends.
  }
  a.close(ignored);
  b.close(ignored);
}

}  // namespace sandboxd::server
