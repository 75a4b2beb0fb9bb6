// A one-shot cancellation signal shared between whoever decides to cancel (a client
// that went away) and the work in flight (an upstream call, a running command). The
// callbacks run on the cancelling thread, so they only post work to their own strand.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace sandboxd::runtime {

class Cancellation {
 public:
  // Runs every subscribed callback once. Later calls do nothing.
  void cancel() {
    std::map<uint64_t, std::function<void()>> callbacks;
    {
      std::lock_guard lock(mutex_);
      if (cancelled_.exchange(true)) return;
      callbacks.swap(callbacks_);
    }
    for (auto& [id, callback] : callbacks) callback();
  }
  bool cancelled() const { return cancelled_.load(); }

  // `callback` runs on cancel(), or at once when already cancelled. Returns a handle
  // for unsubscribe (0 when it ran at once).
  uint64_t subscribe(std::function<void()> callback) {
    {
      std::lock_guard lock(mutex_);
      if (!cancelled_) {
        uint64_t id = ++next_id_;
        callbacks_.emplace(id, std::move(callback));
        return id;
      }
    }
    callback();
    return 0;
  }
  void unsubscribe(uint64_t id) {
    std::lock_guard lock(mutex_);
    callbacks_.erase(id);
  }

 private:
  std::mutex mutex_;
  std::atomic<bool> cancelled_{false};
  uint64_t next_id_ = 0;
  std::map<uint64_t, std::function<void()>> callbacks_;
};

}  // namespace sandboxd::runtime
