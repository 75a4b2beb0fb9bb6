// How fast one replica takes containers over from replicas whose heartbeat ran out: a
// token bucket of claims a second, shared by the requests that arrive for such
// containers and by the background takeover of those nobody asks for. A survivor that
// takes over thousands of containers then loads the database (and itself) by a bounded
// amount a second, so its own requests keep their usual latency, and the containers
// move over seconds rather than in one burst.
//
// Requests come first: a request reserves a token, waiting its turn when none is free
// (the bucket goes into debt), up to a bound past which it is refused (503 with
// Retry-After: the client comes back later, or to another replica). The background takes
// only tokens free at that moment, so it never delays a request. Time is passed in, so
// the arithmetic can be checked without a clock.
#pragma once

#include <chrono>
#include <mutex>
#include <optional>

namespace sandboxd::cluster {

class TakeoverPacer {
 public:
  using Clock = std::chrono::steady_clock;
  // `per_second` claims a second on average; up to `burst` at once after a quiet while.
  TakeoverPacer(double per_second, int burst, Clock::time_point now = Clock::now());

  // A request's claim: when its turn comes (`now` when a token is free), the token
  // reserved for it; nullopt when that is further than `max_wait` away (nothing
  // reserved).
  std::optional<Clock::time_point> reserve(Clock::time_point now, Clock::duration max_wait);
  // The background's claims: up to `wanted` tokens free at `now` (none while requests
  // wait for theirs), taken.
  int take_free(Clock::time_point now, int wanted);
  // Tokens taken by take_free and not used (fewer containers were left to take).
  void give_back(int unused);

  double per_second() const { return per_second_; }
  int burst() const { return static_cast<int>(burst_); }

 private:
  void refill(Clock::time_point now);  // under mutex_

  const double per_second_;
  const double burst_;
  std::mutex mutex_;
  double tokens_;  // negative while requests wait for tokens they reserved
  Clock::time_point refilled_at_;
};

}  // namespace sandboxd::cluster
