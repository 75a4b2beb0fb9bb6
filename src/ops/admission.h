// Admission for executions (capacity.*, docs/limits.md): at most maxConcurrentExecutions commands run at
// once; the rest wait in their owner's line up to queueTimeoutSec, then are refused (429
// with Retry-After). Who gets a freed slot is FairLines' policy (owner_admission.h):
// work-conserving, round robin over the owners that wait, an optional hard per-owner
// cap. A waiter holds no thread: it awaits a timer that a granted slot cancels.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "ops/owner_admission.h"

namespace sandboxd::ops {

class Admission : public std::enable_shared_from_this<Admission> {
 public:
  // A held slot; released when destroyed.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(std::shared_ptr<Admission> admission, std::string owner)
        : admission_(std::move(admission)), owner_(std::move(owner)) {}
    Ticket(Ticket&&) = default;
    Ticket& operator=(Ticket&& other) noexcept {
      if (this != &other) {
        if (admission_) admission_->release(owner_);  // the slot held so far goes back
        admission_ = std::move(other.admission_);
        owner_ = std::move(other.owner_);
      }
      return *this;
    }
    ~Ticket() {
      if (admission_) admission_->release(owner_);
    }
    explicit operator bool() const { return admission_ != nullptr; }

   private:
    std::shared_ptr<Admission> admission_;
    std::string owner_;
  };

  // `owner_cap` 0: no per-owner cap.
  static std::shared_ptr<Admission> create(int limit, std::chrono::milliseconds queue_timeout,
                                           int owner_cap = 0);

  // A slot for `owner` now, or after waiting in line; an empty ticket when the wait timed
  // out. `waited` receives the time spent in line.
  boost::asio::awaitable<Ticket> acquire(const std::string& owner,
                                         std::chrono::duration<double>* waited = nullptr);

  // New limits apply to new work (a lower limit lets running commands finish).
  void set_limits(int limit, std::chrono::milliseconds queue_timeout, int owner_cap = 0);
  int active() const;
  int queued() const;  // every request waiting for a slot, whoever's line it is in
  int limit() const;
  int owner_cap() const;  // 0: none
  int active_of(const std::string& owner) const;

 private:
  struct Waiter {
    explicit Waiter(boost::asio::any_io_executor executor) : timer(executor) {}
    boost::asio::steady_timer timer;
    bool granted = false;
  };
  Admission(int limit, std::chrono::milliseconds queue_timeout, int owner_cap);
  void release(const std::string& owner);
  void wake_granted();  // with mutex_ held

  mutable std::mutex mutex_;
  FairLines lines_;
  std::chrono::milliseconds queue_timeout_;
  std::map<FairLines::WaiterId, std::shared_ptr<Waiter>> waiters_;
};

}  // namespace sandboxd::ops
