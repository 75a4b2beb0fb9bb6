#include "ops/admission.h"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sandboxd::ops {

namespace asio = boost::asio;

Admission::Admission(int limit, std::chrono::milliseconds queue_timeout, int owner_cap)
    : queue_timeout_(queue_timeout) {
  lines_.set_limits(limit, owner_cap);
}

std::shared_ptr<Admission> Admission::create(int limit, std::chrono::milliseconds queue_timeout,
                                             int owner_cap) {
  return std::shared_ptr<Admission>(new Admission(limit, queue_timeout, owner_cap));
}

asio::awaitable<Admission::Ticket> Admission::acquire(const std::string& owner,
                                                      std::chrono::duration<double>* waited) {
  const auto started = std::chrono::steady_clock::now();
  std::shared_ptr<Waiter> waiter;
  FairLines::WaiterId id = 0;
  {
    std::lock_guard lock(mutex_);
    if (lines_.admit_now(owner)) {
      if (waited) *waited = {};
      co_return Ticket(shared_from_this(), owner);
    }
    waiter = std::make_shared<Waiter>(co_await asio::this_coro::executor);
    waiter->timer.expires_after(queue_timeout_);
    id = lines_.enqueue(owner);
    waiters_.emplace(id, waiter);
    wake_granted();  // (a free slot the owner's own earlier waiter could not take)
  }
  boost::system::error_code ec;
  co_await waiter->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (waited) *waited = std::chrono::steady_clock::now() - started;
  std::lock_guard lock(mutex_);
  if (waiter->granted) co_return Ticket(shared_from_this(), owner);  // the slot was handed over
  // Timed out: leave the line (unless the slot was granted meanwhile: then it is ours).
  waiters_.erase(id);
  if (!lines_.leave(id)) co_return Ticket(shared_from_this(), owner);
  wake_granted();  // the owner's next waiter may now be first in line
  co_return Ticket();
}

void Admission::release(const std::string& owner) {
  std::lock_guard lock(mutex_);
  lines_.release(owner);
  wake_granted();
}

void Admission::wake_granted() {
  for (FairLines::WaiterId id : lines_.grant()) {
    auto found = waiters_.find(id);
    if (found == waiters_.end()) continue;
    auto next = std::move(found->second);
    waiters_.erase(found);
    next->granted = true;
    // The waiter's timer belongs to its executor: wake it there.
    asio::post(next->timer.get_executor(), [next] { next->timer.cancel(); });
  }
}

void Admission::set_limits(int limit, std::chrono::milliseconds queue_timeout, int owner_cap) {
  std::lock_guard lock(mutex_);
  lines_.set_limits(limit, owner_cap);
  queue_timeout_ = queue_timeout;
  wake_granted();
}

int Admission::active() const {
  std::lock_guard lock(mutex_);
  return lines_.running();
}
int Admission::queued() const {
  std::lock_guard lock(mutex_);
  return lines_.waiting();
}
int Admission::limit() const {
  std::lock_guard lock(mutex_);
  return lines_.limit();
}
int Admission::owner_cap() const {
  std::lock_guard lock(mutex_);
  return lines_.owner_cap();
}
int Admission::active_of(const std::string& owner) const {
  std::lock_guard lock(mutex_);
  return lines_.running_of(owner);
}

}  // namespace sandboxd::ops
