#include "ops/health_check.h"

#include <spdlog/spdlog.h>
#include <sys/statvfs.h>

#include <boost/asio/post.hpp>
#include <cstdlib>
#include <cstring>

#include "base/failpoint.h"

namespace sandboxd::ops {
namespace {

using Clock = std::chrono::steady_clock;

// A probe waiting this long means the event loop is stuck (every thread blocked).
constexpr auto kEventLoopStall = std::chrono::seconds(5);
// Less free space than this in the data directory is reported.
constexpr uint64_t kLowDiskBytes = 64ull << 20;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

HealthCheck::HealthCheck(boost::asio::io_context& io, std::string data_dir,
                         std::chrono::milliseconds interval)
    : io_(io), data_dir_(std::move(data_dir)), interval_(interval) {
  // Failpoint STOP_HEALTH_CHECK=<seconds> (base/failpoint.h): the check stops after
  // that long, as a crashed check would.
  if (const auto failpoint = sandboxd::failpoint("STOP_HEALTH_CHECK")) {
    char* end = nullptr;
    double after = std::strtod(failpoint->c_str(), &end);
    if (end != failpoint->c_str() && after >= 0) {
      stop_after_ = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(after));
      spdlog::warn("failpoint: the background health check stops after {} s", after);
    }
  }
  last_run_ = probe_answered_ = probe_posted_ = Clock::now();
  check_once();
  thread_ = std::thread([this] { run(); });
}

HealthCheck::~HealthCheck() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void HealthCheck::run() {
  const auto started = Clock::now();
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
    if (stopping_) break;
    if (stop_after_ != Clock::duration::zero() && Clock::now() - started >= stop_after_) {
      spdlog::error("failpoint: the background health check stops now; /health answers 503 from here on");
      return;
    }
    lock.unlock();
    check_once();
    lock.lock();
  }
}

void HealthCheck::check_once() {
  std::vector<std::string> problems;
  const auto now = Clock::now();
  bool post_probe = false;
  {
    std::lock_guard lock(mutex_);
    if (probe_pending_ && now - probe_posted_ > kEventLoopStall)
      problems.push_back("the event loop has not run posted work for " +
                         std::to_string(static_cast<int>(seconds(now - probe_posted_))) + " s");
    if (!probe_pending_) {
      probe_pending_ = true;
      probe_posted_ = now;
      post_probe = true;
    }
  }
  if (post_probe)
    boost::asio::post(io_, [this] {
      std::lock_guard lock(mutex_);
      probe_pending_ = false;
      probe_answered_ = Clock::now();
    });
  struct statvfs fs {};
  uint64_t free_bytes = 0;
  if (statvfs(data_dir_.c_str(), &fs) == 0) {
    free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    if (free_bytes < kLowDiskBytes)
      problems.push_back("the data directory has " + std::to_string(free_bytes >> 20) + " MiB free");
  } else {
    problems.push_back("the data directory cannot be inspected: " + std::string(std::strerror(errno)));
  }
  std::lock_guard lock(mutex_);
  problems_ = std::move(problems);
  data_free_bytes_ = free_bytes;
  last_run_ = Clock::now();
}

HealthCheck::Status HealthCheck::status() const {
  const auto now = Clock::now();
  std::lock_guard lock(mutex_);
  Status status;
  status.seconds_since_run = seconds(now - last_run_);
  // Three missed runs (and a margin for a loaded host) mean the check has stopped.
  status.running = now - last_run_ < 3 * interval_ + std::chrono::seconds(2);
  status.event_loop_lag =
      probe_pending_ ? seconds(now - probe_posted_) : seconds(probe_answered_ - probe_posted_);
  status.data_free_bytes = data_free_bytes_;
  status.problems = problems_;
  return status;
}

}  // namespace sandboxd::ops
