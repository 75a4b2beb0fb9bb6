// How many connections the server holds at once: a total cap (checked when a connection
// starts, so descriptors stay bounded whoever opens them), caps per client address
// (checked at the same moment: all its connections, and those of them that have not
// authenticated yet, so one address opening idle connections cannot take the total), and
// a cap per owner (known only once a request on the connection has authenticated: the
// connection is then charged to that owner until it closes). One owner or one address
// holding hundreds of slow connections gets refused; everyone else, /health included, is
// still served.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace sandboxd::server {

// The default total cap: half of the process's open-file limit (the other half stays
// for sandboxes, files and the database), at least 64.
size_t default_max_connections();

class ConnectionCounter {
 public:
  // `max_per_address`, `max_unauthenticated_per_address`: 0 is no cap.
  ConnectionCounter(size_t max_total, size_t max_per_owner, size_t max_per_address = 0,
                    size_t max_unauthenticated_per_address = 0)
      : max_total_(max_total),
        max_per_owner_(max_per_owner),
        max_per_address_(max_per_address),
        max_unauthenticated_per_address_(max_unauthenticated_per_address) {}

  enum class Admission { kAdmitted, kTotalFull, kAddressFull, kAddressUnauthenticatedFull };
  // One more open, not yet authenticated connection from `address` (empty: not counted
  // per address, as for a sandbox's own listener); nothing counted unless admitted.
  Admission admit(const std::string& address = "");
  // Charges an admitted connection to `owner`; false (nothing charged) at the owner's cap.
  bool charge(const std::string& owner);
  // The connection from `address` authenticated (its first charge): it no longer counts
  // against the address's unauthenticated cap.
  void authenticated(const std::string& address);
  // A connection ends: it leaves the total, its address and every owner it was charged to.
  void release(const std::string& address, bool was_authenticated, const std::vector<std::string>& owners);

  size_t open() const;
  // Open connections none of whose requests has authenticated yet.
  size_t unauthenticated() const;
  // Connections refused so far: at the total cap, at an address's caps (all; not
  // authenticated), at an owner's cap.
  struct Refusals {
    uint64_t total = 0, address = 0, address_unauthenticated = 0, owner = 0;
  };
  Refusals refusals() const;
  size_t max_total() const { return max_total_; }
  size_t max_per_owner() const { return max_per_owner_; }

 private:
  struct AddressCount {
    size_t open = 0, unauthenticated = 0;
  };
  const size_t max_total_;
  const size_t max_per_owner_;
  const size_t max_per_address_;
  const size_t max_unauthenticated_per_address_;
  mutable std::mutex mutex_;
  size_t open_ = 0;
  size_t unauthenticated_ = 0;
  std::map<std::string, size_t> per_owner_;
  std::map<std::string, AddressCount> per_address_;
  Refusals refusals_;
};

// One connection's place in the counter, for as long as the connection lives. It shares
// the counter: a connection's coroutine frame may be destroyed after the server (when
// the I/O context that holds it goes), and its release must still find the counter.
class ConnectionSlot {
 public:
  explicit ConnectionSlot(std::shared_ptr<ConnectionCounter> counter, std::string address = "")
      : counter_(std::move(counter)), address_(std::move(address)), admission_(counter_->admit(address_)) {}
  ~ConnectionSlot() {
    if (admitted()) counter_->release(address_, !owners_.empty(), owners_);
  }
  ConnectionSlot(const ConnectionSlot&) = delete;
  ConnectionSlot& operator=(const ConnectionSlot&) = delete;

  bool admitted() const { return admission_ == ConnectionCounter::Admission::kAdmitted; }
  ConnectionCounter::Admission admission() const { return admission_; }
  // Charges the connection to `owner` (once per owner); false at the owner's cap.
  bool charge(const std::string& owner);

  // The token the connection's last request authenticated with, and its owner (tokens
  // change only with a restart): a keep-alive client's next request that presents the
  // same bytes, compared in constant time, is its owner's without hashing it again. A
  // connection learns nothing here it did not send itself.
  void remember_token(std::string_view token, const std::string& owner);
  const std::string* remembered_owner(std::string_view token) const;

 private:
  std::string token_, token_owner_;
  std::shared_ptr<ConnectionCounter> counter_;
  std::string address_;
  ConnectionCounter::Admission admission_;
  std::vector<std::string> owners_;  // usually one
};

}  // namespace sandboxd::server
