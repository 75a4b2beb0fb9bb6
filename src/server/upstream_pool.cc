#include "server/upstream_pool.h"

#include <sys/socket.h>

#include <cerrno>

namespace sandboxd::server {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

// An idle connection is still usable when it has nothing to read: no end of stream
// (the peer closed it), no error, and no stray bytes (which no request asked for).
bool still_open(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

std::shared_ptr<UpstreamPool> UpstreamPool::make(asio::any_io_executor executor, Limits limits) {
  return std::shared_ptr<UpstreamPool>(new UpstreamPool(std::move(executor), limits));
}

UpstreamPool::UpstreamPool(asio::any_io_executor executor, Limits limits)
    : limits_(limits), sweep_timer_(std::move(executor)) {}

UpstreamPool::~UpstreamPool() = default;

std::optional<asio::ip::tcp::socket> UpstreamPool::take(const std::string& upstream,
                                                        asio::any_io_executor executor) {
  std::lock_guard lock(mutex_);
  auto it = idle_.find(upstream);
  if (it == idle_.end()) return std::nullopt;
  auto& waiting = it->second;
  const auto now = Clock::now();
  while (!waiting.empty()) {
    Idle idle = std::move(waiting.back());  // the most recently used: the least likely closed
    waiting.pop_back();
    if (now - idle.since >= limits_.idle_timeout || !still_open(idle.fd.get()))
      continue;  // closed as it goes
    asio::ip::tcp::socket socket(executor);
    boost::system::error_code ec;
    socket.assign(idle.protocol, idle.fd.get(), ec);
    if (ec) continue;
    idle.fd.release();  // the socket owns it now
    if (waiting.empty()) idle_.erase(it);
    return socket;
  }
  idle_.erase(it);
  return std::nullopt;
}

void UpstreamPool::give_back(const std::string& upstream, asio::ip::tcp::socket socket) {
  boost::system::error_code ec;
  const auto protocol = socket.local_endpoint(ec).protocol();
  if (ec) return;  // not connected any more: closed with the socket
  const int fd = socket.release(ec);
  if (ec || fd < 0) return;
  std::lock_guard lock(mutex_);
  auto& waiting = idle_[upstream];
  waiting.push_back(Idle{UniqueFd(fd), protocol, Clock::now()});
  while (waiting.size() > limits_.max_idle_per_upstream) waiting.pop_front();  // the oldest go
  arm_locked();
}

size_t UpstreamPool::idle(const std::string& upstream) const {
  std::lock_guard lock(mutex_);
  auto it = idle_.find(upstream);
  return it == idle_.end() ? 0 : it->second.size();
}

void UpstreamPool::sweep_locked() {
  const auto now = Clock::now();
  for (auto it = idle_.begin(); it != idle_.end();) {
    auto& waiting = it->second;
    while (!waiting.empty() && now - waiting.front().since >= limits_.idle_timeout) waiting.pop_front();
    it = waiting.empty() ? idle_.erase(it) : std::next(it);
  }
}

void UpstreamPool::arm_locked() {
  if (sweep_armed_ || idle_.empty()) return;
  sweep_armed_ = true;
  sweep_timer_.expires_after(limits_.idle_timeout / 2);
  sweep_timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
    auto pool = weak.lock();
    if (!pool || ec == asio::error::operation_aborted) return;
    std::lock_guard lock(pool->mutex_);
    pool->sweep_armed_ = false;
    pool->sweep_locked();
    pool->arm_locked();
  });
}

}  // namespace sandboxd::server
