// Admission for executions (capacity.*, docs/limits.md): at most maxConcurrentExecutions
// commands run at once; the rest wait in FIFO order up to queueTimeoutSec, then are
// refused (429 with Retry-After). A waiter holds no thread: it awaits a timer that a
// released slot cancels.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>

namespace sandboxd::ops {

class Admission : public std::enable_shared_from_this<Admission> {
 public:
  // A held slot; released when destroyed.
  class Ticket {
   public:
    Ticket() = default;
    explicit Ticket(std::shared_ptr<Admission> owner) : owner_(std::move(owner)) {}
    Ticket(Ticket&&) = default;
    Ticket& operator=(Ticket&& other) noexcept {
      if (this != &other) {
        if (owner_) owner_->release();  // the slot held so far goes back
        owner_ = std::move(other.owner_);
      }
      return *this;
    }
    ~Ticket() {
      if (owner_) owner_->release();
    }
    explicit operator bool() const { return owner_ != nullptr; }

   private:
    std::shared_ptr<Admission> owner_;
  };

  static std::shared_ptr<Admission> create(int limit, std::chrono::milliseconds queue_timeout);

  // A slot now, or after waiting in line; an empty ticket when the wait timed out.
  // `waited` receives the time spent in line.
  boost::asio::awaitable<Ticket> acquire(std::chrono::duration<double>* waited = nullptr);

  // New limits apply to new work (a lower limit lets running commands finish).
  void set_limits(int limit, std::chrono::milliseconds queue_timeout);
  int active() const;
  int queued() const;
  int limit() const;

 private:
  struct Waiter {
    explicit Waiter(boost::asio::any_io_executor executor) : timer(executor) {}
    boost::asio::steady_timer timer;
    bool granted = false;
  };
  Admission(int limit, std::chrono::milliseconds queue_timeout) : limit_(limit), queue_timeout_(queue_timeout) {}
  void release();
  void grant_waiting();  // with mutex_ held

  mutable std::mutex mutex_;
  int limit_;
  std::chrono::milliseconds queue_timeout_;
  int active_ = 0;
  std::deque<std::shared_ptr<Waiter>> waiting_;
};

}  // namespace sandboxd::ops
