#include "cluster/takeover_pacer.h"

#include <algorithm>
#include <cmath>

namespace sandboxd::cluster {

TakeoverPacer::TakeoverPacer(double per_second, int burst, Clock::time_point now)
    : per_second_(std::max(per_second, 0.001)),
      burst_(std::max(burst, 1)),
      tokens_(burst_),
      refilled_at_(now) {}

void TakeoverPacer::refill(Clock::time_point now) {
  if (now <= refilled_at_) return;
  const double seconds = std::chrono::duration<double>(now - refilled_at_).count();
  tokens_ = std::min(burst_, tokens_ + seconds * per_second_);
  refilled_at_ = now;
}

std::optional<TakeoverPacer::Clock::time_point> TakeoverPacer::reserve(Clock::time_point now,
                                                                       Clock::duration max_wait) {
  std::lock_guard lock(mutex_);
  refill(now);
  if (tokens_ >= 1) {
    tokens_ -= 1;
    return now;
  }
  // The turn comes when the bucket has refilled past this request's token (and those of
  // every request that reserved before it).
  const double wait_s = (1 - tokens_) / per_second_;
  const auto wait = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
  if (wait > max_wait) return std::nullopt;
  tokens_ -= 1;
  return now + wait;
}

int TakeoverPacer::take_free(Clock::time_point now, int wanted) {
  std::lock_guard lock(mutex_);
  refill(now);
  const int free = tokens_ >= 1 ? static_cast<int>(std::floor(tokens_)) : 0;
  const int taken = std::clamp(wanted, 0, free);
  tokens_ -= taken;
  return taken;
}

void TakeoverPacer::give_back(int unused) {
  if (unused <= 0) return;
  std::lock_guard lock(mutex_);
  tokens_ = std::min(burst_, tokens_ + unused);
}

}  // namespace sandboxd::cluster
