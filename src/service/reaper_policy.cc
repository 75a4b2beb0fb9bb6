#include "service/reaper_policy.h"

namespace sandboxd::service {

bool expired(int64_t last_used_at, int64_t ttl_seconds, int64_t now) {
  return last_used_at + ttl_seconds <= now;
}

bool stops_idle(const ReapCandidate& candidate, int64_t ttl_seconds, int64_t now) {
  return expired(candidate.last_used_at, ttl_seconds, now) && candidate.executing == 0;
}

bool may_close(const CloseCandidate& candidate, int64_t ttl_seconds, int64_t now) {
  // Anything a request did since the stop keeps it open: the next round looks again.
  return candidate.still_open && !candidate.in_transition && !candidate.running &&
         expired(candidate.last_used_at, ttl_seconds, now) && !candidate.held_elsewhere &&
         !candidate.unflushed;
}

}  // namespace sandboxd::service
