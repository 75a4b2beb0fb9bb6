#include "server/connection_limits.h"

#include <openssl/crypto.h>
#include <sys/resource.h>

#include <algorithm>

namespace sandboxd::server {

size_t default_max_connections() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 4096;
  return std::max<size_t>(64, static_cast<size_t>(limit.rlim_cur / 2));
}

ConnectionCounter::Admission ConnectionCounter::admit(const std::string& address) {
  std::lock_guard lock(mutex_);
  if (open_ >= max_total_) {
    ++refusals_.total;
    return Admission::kTotalFull;
  }
  if (!address.empty()) {
    auto found = per_address_.find(address);
    const AddressCount count = found == per_address_.end() ? AddressCount{} : found->second;
    if (max_per_address_ > 0 && count.open >= max_per_address_) {
      ++refusals_.address;
      return Admission::kAddressFull;
    }
    if (max_unauthenticated_per_address_ > 0 && count.unauthenticated >= max_unauthenticated_per_address_) {
      ++refusals_.address_unauthenticated;
      return Admission::kAddressUnauthenticatedFull;
    }
    AddressCount& counted = per_address_[address];
    ++counted.open;
    ++counted.unauthenticated;
  }
  ++open_;
  ++unauthenticated_;
  return Admission::kAdmitted;
}

void ConnectionCounter::authenticated(const std::string& address) {
  std::lock_guard lock(mutex_);
  --unauthenticated_;
  if (auto it = per_address_.find(address); !address.empty() && it != per_address_.end())
    --it->second.unauthenticated;
}

bool ConnectionCounter::charge(const std::string& owner) {
  std::lock_guard lock(mutex_);
  size_t& count = per_owner_[owner];
  if (count >= max_per_owner_) {
    ++refusals_.owner;
    if (count == 0) per_owner_.erase(owner);
    return false;
  }
  ++count;
  return true;
}

void ConnectionCounter::release(const std::string& address, bool was_authenticated,
                                const std::vector<std::string>& owners) {
  std::lock_guard lock(mutex_);
  --open_;
  if (!was_authenticated) --unauthenticated_;
  if (auto it = per_address_.find(address); !address.empty() && it != per_address_.end()) {
    --it->second.open;
    if (!was_authenticated) --it->second.unauthenticated;
    if (it->second.open == 0) per_address_.erase(it);
  }
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

ConnectionCounter::Refusals ConnectionCounter::refusals() const {
  std::lock_guard lock(mutex_);
  return refusals_;
}

size_t ConnectionCounter::unauthenticated() const {
  std::lock_guard lock(mutex_);
  return unauthenticated_;
}

bool ConnectionSlot::charge(const std::string& owner) {
  if (std::find(owners_.begin(), owners_.end(), owner) != owners_.end()) return true;
  if (!counter_->charge(owner)) return false;
  if (owners_.empty()) counter_->authenticated(address_);
  owners_.push_back(owner);
  return true;
}

void ConnectionSlot::remember_token(std::string_view token, const std::string& owner) {
  token_.assign(token);
  token_owner_ = owner;
}

const std::string* ConnectionSlot::remembered_owner(std::string_view token) const {
  if (token_.empty() || token.size() != token_.size()) return nullptr;
  return CRYPTO_memcmp(token.data(), token_.data(), token.size()) == 0 ? &token_owner_ : nullptr;
}

}  // namespace sandboxd::server
