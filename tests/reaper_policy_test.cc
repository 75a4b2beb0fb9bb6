// The idle reaper's choices on their own (service/reaper_policy.h): no server, no clock.
#include "service/reaper_policy.h"

#include <gtest/gtest.h>

namespace sandboxd::service {
namespace {

constexpr int64_t kTtl = 300;
constexpr int64_t kNow = 10'000;

TEST(ReaperPolicy, ExpiresAtTheTtlExactly) {
  EXPECT_FALSE(expired(kNow - kTtl + 1, kTtl, kNow));
  EXPECT_TRUE(expired(kNow - kTtl, kTtl, kNow));
  EXPECT_TRUE(expired(0, kTtl, kNow));
}

TEST(ReaperPolicy, StopsAnIdleSandboxButNotOneRunningACommand) {
  EXPECT_TRUE(stops_idle({kNow - kTtl, 0}, kTtl, kNow));
  EXPECT_FALSE(stops_idle({kNow - kTtl, 1}, kTtl, kNow));  // a long command keeps its sandbox
  EXPECT_FALSE(stops_idle({kNow - 1, 0}, kTtl, kNow));     // used lately
}

CloseCandidate closable() {
  return {.still_open = true,
          .in_transition = false,
          .running = false,
          .last_used_at = kNow - kTtl,
          .held_elsewhere = false,
          .unflushed = false};
}

TEST(ReaperPolicy, ClosesAStoppedIdleContainerNobodyHolds) { EXPECT_TRUE(may_close(closable(), kTtl, kNow)); }

TEST(ReaperPolicy, KeepsAContainerAnythingHappenedTo) {
  auto candidate = closable();
  candidate.still_open = false;  // deleted or replaced meanwhile
  EXPECT_FALSE(may_close(candidate, kTtl, kNow));
  candidate = closable();
  candidate.in_transition = true;
  EXPECT_FALSE(may_close(candidate, kTtl, kNow));
  candidate = closable();
  candidate.running = true;  // started again
  EXPECT_FALSE(may_close(candidate, kTtl, kNow));
  candidate = closable();
  candidate.last_used_at = kNow;  // used since the stop
  EXPECT_FALSE(may_close(candidate, kTtl, kNow));
  candidate = closable();
  candidate.held_elsewhere = true;  // a request holds it
  EXPECT_FALSE(may_close(candidate, kTtl, kNow));
  candidate = closable();
  candidate.unflushed = true;  // the bucket lacks its changes
  EXPECT_FALSE(may_close(candidate, kTtl, kNow));
}

}  // namespace
}  // namespace sandboxd::service
