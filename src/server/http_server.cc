// HttpServer itself: its construction and route table, the listener and the accept loop
// (with its answer to running out of descriptors), and connections handed over by
// another listener. A connection's requests are served by session.cc.
#include "server/http_server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sandboxd::server {
namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
using Clock = std::chrono::steady_clock;

}  // namespace

HttpServer::HttpServer(asio::io_context& io, ServerLimits limits)
    : io_(io),
      limits_(limits),
      connections_(std::make_shared<ConnectionCounter>(
          limits.max_connections, limits.max_connections_per_owner, limits.max_connections_per_address,
          limits.max_unauthenticated_per_address)),
      reserve_fd_(::open("/dev/null", O_RDONLY | O_CLOEXEC)) {}

HttpServer::~HttpServer() {
  if (reserve_fd_ >= 0) ::close(reserve_fd_);
}

void HttpServer::route(http::verb method, std::string pattern, std::string name, Handler handler,
                       RouteOptions options) {
  router_.add(method, std::move(pattern), std::move(name));
  handlers_.push_back(std::move(handler));
  route_options_.push_back(options);
}

void HttpServer::accept_credential_header(std::string name) {
  // presented_token keeps what it found of each name in a fixed array: no allocation on
  // every request.
  if (credential_headers_.size() >= kMaxCredentialHeaders)
    throw std::logic_error("more than " + std::to_string(kMaxCredentialHeaders) + " credential headers");
  credential_headers_.push_back(std::move(name));
}

tcp::endpoint HttpServer::listen(const std::string& host, uint16_t port) {
  tcp::endpoint endpoint{asio::ip::make_address(host), port};
  acceptor_.emplace(io_);
  acceptor_->open(endpoint.protocol());
  acceptor_->set_option(asio::socket_base::reuse_address(true));
  acceptor_->bind(endpoint);
  acceptor_->listen(asio::socket_base::max_listen_connections);
  acceptor_->native_non_blocking(true);  // the out-of-descriptors path accepts directly
  asio::co_spawn(io_, accept_loop(), asio::detached);
  return acceptor_->local_endpoint();
}

void HttpServer::stop_accepting() {
  stopping_ = true;
  if (acceptor_) {
    asio::post(acceptor_->get_executor(), [this] {
      boost::system::error_code ec;
      acceptor_->close(ec);
    });
  }
}

asio::awaitable<void> HttpServer::accept_loop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor_->async_accept(asio::make_strand(io_), use_tuple);
    if (ec) {
      if (stopping_ || ec == asio::error::operation_aborted) co_return;
      // Out of descriptors or similar: back off instead of spinning. Out of descriptors,
      // the reserve one makes room to take the waiting connection off the queue and
      // close it, so its client hears at once instead of hanging.
      static std::atomic<int64_t> last_warning{0};  // at most one line every 5 s
      const int64_t now =
          std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch()).count();
      if (int64_t last = last_warning.load();
          now - last >= 5 && last_warning.compare_exchange_strong(last, now))
        spdlog::warn("accept: {}", ec.message());
      const bool out_of_descriptors = ec == asio::error::no_descriptors || ec.value() == ENFILE;
      if (out_of_descriptors && reserve_fd_ < 0) reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (out_of_descriptors && reserve_fd_ >= 0) {
        ::close(reserve_fd_);
        int waiting = ::accept4(acceptor_->native_handle(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (waiting >= 0) ::close(waiting);
        reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      }
      asio::steady_timer pause(io_, std::chrono::milliseconds(50));
      co_await pause.async_wait(use_tuple);
      continue;
    }
    socket.set_option(tcp::no_delay(true));
    auto executor = socket.get_executor();
    asio::co_spawn(executor, session(std::move(socket), nullptr), asio::detached);
  }
}

void HttpServer::serve_connection(tcp::socket socket, std::shared_ptr<const ConnectionOrigin> origin,
                                  std::function<void()> on_closed) {
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  auto executor = socket.get_executor();
  asio::co_spawn(executor, origin_session(this, std::move(socket), std::move(origin), std::move(on_closed)),
                 asio::detached);
}

asio::awaitable<void> HttpServer::origin_session(HttpServer* self, tcp::socket socket,
                                                 std::shared_ptr<const ConnectionOrigin> origin,
                                                 std::function<void()> on_closed) {
  struct Closed {
    std::function<void()>& on_closed;
    ~Closed() {
      if (on_closed) on_closed();
    }
  } closed{on_closed};
  co_await self->session(std::move(socket), std::move(origin));
}

}  // namespace sandboxd::server
