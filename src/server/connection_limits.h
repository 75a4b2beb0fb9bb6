// How many connections the server holds at once: a total cap (checked when a connection
// starts, so descriptors stay bounded whoever opens them) and a cap per owner (known
// only once a request on the connection has authenticated: the connection is then
// charged to that owner until it closes). One owner holding hundreds of slow
// connections gets 429s; everyone else, /health included, is still served.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sandboxd::server {

// The default total cap: half of the process's open-file limit (the other half stays
// for sandboxes, files and the database), at least 64.
size_t default_max_connections();

class ConnectionCounter {
 public:
  ConnectionCounter(size_t max_total, size_t max_per_owner) : max_total_(max_total), max_per_owner_(max_per_owner) {}

  // One more open connection; false (nothing counted) at the total cap.
  bool admit();
  // Charges an admitted connection to `owner`; false (nothing charged) at the owner's cap.
  bool charge(const std::string& owner);
  // A connection ends: it leaves the total and every owner it was charged to.
  void release(const std::vector<std::string>& owners);

  size_t open() const;
  size_t open_for(const std::string& owner) const;
  size_t max_total() const { return max_total_; }
  size_t max_per_owner() const { return max_per_owner_; }

 private:
  const size_t max_total_;
  const size_t max_per_owner_;
  mutable std::mutex mutex_;
  size_t open_ = 0;
  std::map<std::string, size_t> per_owner_;
};

// One connection's place in the counter, for as long as the connection lives. It shares
// the counter: a connection's coroutine frame may be destroyed after the server (when
// the I/O context that holds it goes), and its release must still find the counter.
class ConnectionSlot {
 public:
  explicit ConnectionSlot(std::shared_ptr<ConnectionCounter> counter)
      : counter_(std::move(counter)), admitted_(counter_->admit()) {}
  ~ConnectionSlot() {
    if (admitted_) counter_->release(owners_);
  }
  ConnectionSlot(const ConnectionSlot&) = delete;
  ConnectionSlot& operator=(const ConnectionSlot&) = delete;

  bool admitted() const { return admitted_; }
  // Charges the connection to `owner` (once per owner); false at the owner's cap.
  bool charge(const std::string& owner);

 private:
  std::shared_ptr<ConnectionCounter> counter_;
  bool admitted_;
  std::vector<std::string> owners_;  // usually one
};

}  // namespace sandboxd::server
