#include "ops/admission.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sandboxd::ops {

namespace asio = boost::asio;

std::shared_ptr<Admission> Admission::create(int limit, std::chrono::milliseconds queue_timeout) {
  return std::shared_ptr<Admission>(new Admission(limit, queue_timeout));
}

asio::awaitable<Admission::Ticket> Admission::acquire(std::chrono::duration<double>* waited) {
  const auto started = std::chrono::steady_clock::now();
  std::shared_ptr<Waiter> waiter;
  {
    std::lock_guard lock(mutex_);
    if (waiting_.empty() && active_ < limit_) {
      ++active_;
      if (waited) *waited = {};
      co_return Ticket(shared_from_this());
    }
    waiter = std::make_shared<Waiter>(co_await asio::this_coro::executor);
    waiter->timer.expires_after(queue_timeout_);
    waiting_.push_back(waiter);
  }
  boost::system::error_code ec;
  co_await waiter->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (waited) *waited = std::chrono::steady_clock::now() - started;
  std::lock_guard lock(mutex_);
  if (waiter->granted) co_return Ticket(shared_from_this());  // the slot was handed over
  // Timed out: leave the line.
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), waiter), waiting_.end());
  co_return Ticket();
}

void Admission::release() {
  std::lock_guard lock(mutex_);
  --active_;
  grant_waiting();
}

void Admission::grant_waiting() {
  while (active_ < limit_ && !waiting_.empty()) {
    auto next = std::move(waiting_.front());
    waiting_.pop_front();
    ++active_;
    next->granted = true;
    // The waiter's timer belongs to its executor: wake it there.
    asio::post(next->timer.get_executor(), [next] { next->timer.cancel(); });
  }
}

void Admission::set_limits(int limit, std::chrono::milliseconds queue_timeout) {
  std::lock_guard lock(mutex_);
  limit_ = limit;
  queue_timeout_ = queue_timeout;
  grant_waiting();
}

int Admission::active() const {
  std::lock_guard lock(mutex_);
  return active_;
}
int Admission::queued() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(waiting_.size());
}
int Admission::limit() const {
  std::lock_guard lock(mutex_);
  return limit_;
}

}  // namespace sandboxd::ops
