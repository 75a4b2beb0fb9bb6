#include "ops/owner_admission.h"

#include <algorithm>

namespace sandboxd::ops {

std::shared_ptr<Admission> OwnerAdmission::line_of(const std::string& owner, int limit,
                                                   std::chrono::milliseconds queue_timeout) {
  std::lock_guard lock(mutex_);
  // Lines nobody holds a ticket of or waits in go (an owner's line lives while it is used).
  for (auto it = lines_.begin(); it != lines_.end();) {
    if (it->first != owner && it->second.use_count() == 1 && it->second->active() == 0 && it->second->queued() == 0)
      it = lines_.erase(it);
    else
      ++it;
  }
  auto& line = lines_[owner];
  if (!line) line = Admission::create(limit, queue_timeout);
  else line->set_limits(limit, queue_timeout);  // a reload's new share applies to new work
  return line;
}

boost::asio::awaitable<Admission::Ticket> OwnerAdmission::acquire(const std::string& owner, int limit,
                                                                  std::chrono::milliseconds queue_timeout,
                                                                  std::chrono::duration<double>* waited) {
  auto line = line_of(owner, limit, queue_timeout);
  co_return co_await line->acquire(waited);
}

size_t OwnerAdmission::owners() const {
  std::lock_guard lock(mutex_);
  return lines_.size();
}

int owner_execution_share(int configured, int global_limit) {
  return configured > 0 ? configured : std::max(1, global_limit / 2);
}

}  // namespace sandboxd::ops
