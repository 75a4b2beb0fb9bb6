// The background health check behind /health. A thread of its own wakes every second,
// checks that the event loop still runs the work posted to it and how much room the
// data directory has left, and records when it last ran. /health answers from that
// record, in memory: 200 while the check runs, 503 once it has stopped (no run for a
// few intervals), which is what a supervisor's liveness probe should act on.
//
// Fault injection for tests and drills: SANDBOXD_FAILPOINT_STOP_HEALTH_CHECK=N makes
// the check stop after N seconds, as a crashed or wedged check would.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sandboxd::ops {

class HealthCheck {
 public:
  HealthCheck(boost::asio::io_context& io, std::string data_dir,
              std::chrono::milliseconds interval = std::chrono::seconds(1));
  ~HealthCheck();
  HealthCheck(const HealthCheck&) = delete;
  HealthCheck& operator=(const HealthCheck&) = delete;

  struct Status {
    bool running = false;          // the check ran within the last few intervals
    double seconds_since_run = 0;  // since its last run
    double event_loop_lag = 0;     // seconds the last posted probe waited (or is waiting)
    uint64_t data_free_bytes = 0;
    std::vector<std::string> problems;  // what the last run found
  };
  Status status() const;

 private:
  void run();
  void check_once();

  boost::asio::io_context& io_;
  std::string data_dir_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::duration stop_after_{};  // the failpoint; zero = never

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point last_run_;
  std::vector<std::string> problems_;
  uint64_t data_free_bytes_ = 0;
  // The event-loop probe: posted at `probe_posted_`, answered at `probe_answered_`.
  std::chrono::steady_clock::time_point probe_posted_, probe_answered_;
  bool probe_pending_ = false;
  std::thread thread_;
};

}  // namespace sandboxd::ops
