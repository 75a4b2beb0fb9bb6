// DisconnectWatch: a long request's connection watched for its client going away.
#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "server/http_server.h"

namespace sandboxd::server {
namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

}  // namespace

std::shared_ptr<DisconnectWatch> DisconnectWatch::start(tcp::socket& socket, std::function<void()> on_gone) {
  std::shared_ptr<DisconnectWatch> watch(new DisconnectWatch(socket, std::move(on_gone)));
  asio::co_spawn(
      socket.get_executor(), [watch]() { return watch->watch(); }, asio::detached);
  return watch;
}

asio::awaitable<void> DisconnectWatch::watch() {
  auto self = shared_from_this();
  for (;;) {
    auto [ec] = co_await socket_.async_wait(tcp::socket::wait_read, use_tuple);
    if (stopped_) co_return;  // the socket may be gone: touch nothing
    if (ec) {
      if (ec != asio::error::operation_aborted) on_gone_();
      co_return;
    }
    char byte;
    ssize_t n = ::recv(socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) co_return;  // a pipelined request: the client is still there
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      on_gone_();
      co_return;
    }
  }
}

void DisconnectWatch::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ignored;
  socket_.cancel(ignored);  // wakes the pending wait; no write is pending now
}

}  // namespace sandboxd::server
