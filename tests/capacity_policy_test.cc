// The capacity policy on its own (service/capacity_policy.h): no server, no sandbox.
#include "service/capacity_policy.h"

#include <gtest/gtest.h>

#include <vector>

namespace sandboxd::service {
namespace {

using Kind = CapacityDecision::Kind;

SandboxCandidate running(std::string owner, int64_t last_used_at, bool executing = false) {
  return {std::move(owner), true, executing, last_used_at, false};
}

CapacityLimits quota_of(uint64_t pods) {
  CapacityLimits limits;
  limits.quota_enabled = true;
  limits.quota_pods = pods;
  limits.quota_cpu_millis = 1'000'000;
  limits.quota_memory_bytes = 1ull << 40;
  return limits;
}

TEST(CapacityPolicy, AdmitsWithoutAQuota) {
  std::vector<SandboxCandidate> candidates{running("a", 1), running("b", 2)};
  auto decision = decide_capacity(candidates, {"a", 5, 3}, CapacityLimits{});
  EXPECT_EQ(decision.kind, Kind::kAdmit);
  EXPECT_EQ(decision.running, 7u);  // reservations count as running
  EXPECT_EQ(decision.owner_running, 4u);
}

TEST(CapacityPolicy, AdmitsWhileTheQuotaHasRoom) {
  std::vector<SandboxCandidate> candidates{running("a", 1)};
  EXPECT_EQ(decide_capacity(candidates, {"b", 0, 0}, quota_of(2)).kind, Kind::kAdmit);
}

TEST(CapacityPolicy, EvictsTheLeastRecentlyUsedIdleSandboxWhenFull) {
  std::vector<SandboxCandidate> candidates{running("a", 30), running("b", 10), running("c", 20)};
  auto decision = decide_capacity(candidates, {"d", 0, 0}, quota_of(3));
  ASSERT_EQ(decision.kind, Kind::kEvict);
  EXPECT_EQ(decision.victim, 1u);
}

TEST(CapacityPolicy, NeverEvictsABusyOrStoppedSandboxOrTheRequester) {
  std::vector<SandboxCandidate> candidates{running("a", 1, /*executing=*/true), running("b", 2),
                                           running("c", 3)};
  candidates[1].is_requester = true;
  candidates.push_back({"e", false, false, 0, false});  // stopped: holds no room
  auto decision = decide_capacity(candidates, {"b", 0, 0}, quota_of(3));
  ASSERT_EQ(decision.kind, Kind::kEvict);
  EXPECT_EQ(decision.victim, 2u);
}

TEST(CapacityPolicy, RefusesWhenTheQuotaIsFullAndNoneIsIdle) {
  std::vector<SandboxCandidate> candidates{running("a", 1, true), running("b", 2, true)};
  auto decision = decide_capacity(candidates, {"c", 1, 0}, quota_of(3));
  EXPECT_EQ(decision.kind, Kind::kRefuseQuota);
  EXPECT_EQ(decision.running, 3u);
}

TEST(CapacityPolicy, CountsCpuAndMemoryPerSandbox) {
  CapacityLimits limits = quota_of(100);
  limits.sandbox_cpu_millis = 500;
  limits.quota_cpu_millis = 1000;  // two sandboxes' worth
  std::vector<SandboxCandidate> one{running("a", 1)};
  EXPECT_EQ(decide_capacity(one, {"b", 0, 0}, limits).kind, Kind::kAdmit);
  std::vector<SandboxCandidate> two{running("a", 1), running("a", 2)};
  EXPECT_EQ(decide_capacity(two, {"b", 0, 0}, limits).kind, Kind::kEvict);
  limits = quota_of(100);
  limits.sandbox_memory_bytes = 1 << 30;
  limits.quota_memory_bytes = 1 << 30;
  EXPECT_EQ(decide_capacity(one, {"b", 0, 0}, limits).kind, Kind::kEvict);
}

TEST(CapacityPolicy, AnOwnerPastTheirShareLosesTheirOwnIdleSandbox) {
  CapacityLimits limits;
  limits.running_per_owner = 2;
  // b's sandbox is the least recently used, but a pays for a's share.
  std::vector<SandboxCandidate> candidates{running("a", 20), running("b", 1), running("a", 10)};
  auto decision = decide_capacity(candidates, {"a", 0, 0}, limits);
  ASSERT_EQ(decision.kind, Kind::kEvict);
  EXPECT_EQ(decision.victim, 2u);
}

TEST(CapacityPolicy, TheOwnersShareComesBeforeTheQuota) {
  CapacityLimits limits = quota_of(100);  // room for everyone
  limits.running_per_owner = 1;
  std::vector<SandboxCandidate> candidates{running("a", 5)};
  auto decision = decide_capacity(candidates, {"a", 0, 0}, limits);
  ASSERT_EQ(decision.kind, Kind::kEvict);
  EXPECT_EQ(decision.victim, 0u);
}

TEST(CapacityPolicy, RefusesAnOwnerWithNoneOfTheirsIdle) {
  CapacityLimits limits;
  limits.running_per_owner = 2;
  std::vector<SandboxCandidate> candidates{running("a", 1, true), running("b", 0)};
  auto decision = decide_capacity(candidates, {"a", 0, 1}, limits);  // one of a's is starting
  EXPECT_EQ(decision.kind, Kind::kRefuseOwner);
  EXPECT_EQ(decision.owner_running, 2u);
}

TEST(CapacityPolicy, TiesGoToTheFirstCandidate) {
  std::vector<SandboxCandidate> candidates{running("a", 7), running("b", 7)};
  auto decision = decide_capacity(candidates, {"c", 0, 0}, quota_of(2));
  ASSERT_EQ(decision.kind, Kind::kEvict);
  EXPECT_EQ(decision.victim, 0u);
}

}  // namespace
}  // namespace sandboxd::service
