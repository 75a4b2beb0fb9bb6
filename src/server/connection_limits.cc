#include "server/connection_limits.h"

#include <sys/resource.h>

#include <algorithm>

namespace sandboxd::server {

size_t default_max_connections() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 4096;
  return std::max<size_t>(64, static_cast<size_t>(limit.rlim_cur / 2));
}

bool ConnectionCounter::admit() {
  std::lock_guard lock(mutex_);
  if (open_ >= max_total_) return false;
  ++open_;
  return true;
}

bool ConnectionCounter::charge(const std::string& owner) {
  std::lock_guard lock(mutex_);
  size_t& count = per_owner_[owner];
  if (count >= max_per_owner_) {
    if (count == 0) per_owner_.erase(owner);
    return false;
  }
  ++count;
  return true;
}

void ConnectionCounter::release(const std::vector<std::string>& owners) {
  std::lock_guard lock(mutex_);
  --open_;
  for (const auto& owner : owners) {
    auto it = per_owner_.find(owner);
    if (it == per_owner_.end()) continue;
    if (--it->second == 0) per_owner_.erase(it);
  }
}

size_t ConnectionCounter::open() const {
  std::lock_guard lock(mutex_);
  return open_;
}

size_t ConnectionCounter::open_for(const std::string& owner) const {
  std::lock_guard lock(mutex_);
  auto it = per_owner_.find(owner);
  return it == per_owner_.end() ? 0 : it->second;
}

bool ConnectionSlot::charge(const std::string& owner) {
  if (std::find(owners_.begin(), owners_.end(), owner) != owners_.end()) return true;
  if (!counter_->charge(owner)) return false;
  owners_.push_back(owner);
  return true;
}

}  // namespace sandboxd::server
