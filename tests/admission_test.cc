// The execution scheduling policy (ops/owner_admission.h) on its own: work-conserving
// (an owner alone uses every slot, a free slot never idles while someone may take it),
// round robin over the owners that wait, first come first served within an owner, and a
// hard per-owner cap only when one is set. The server's side of it is in ops_test
// (one owner, every slot) and host_limits_test (a quiet owner beside one that floods).

#include <gtest/gtest.h>

#include "ops/owner_admission.h"

using sandboxd::ops::FairLines;

namespace {

TEST(FairLines, AnOwnerAloneUsesEverySlot) {
  FairLines lines;
  lines.set_limits(4, 0);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(lines.admit_now("alice")) << i;
  EXPECT_FALSE(lines.admit_now("alice"));
  EXPECT_EQ(lines.running(), 4);
  EXPECT_EQ(lines.running_of("alice"), 4);
  // Waiting requests are counted, whoever's line they are in.
  lines.enqueue("alice");
  lines.enqueue("bob");
  EXPECT_EQ(lines.waiting(), 2);
  EXPECT_TRUE(lines.grant().empty());  // no slot is free
}

TEST(FairLines, FreedSlotsGoRoundTheWaitingOwnersLeastRecentlyServedFirst) {
  FairLines lines;
  lines.set_limits(2, 0);
  ASSERT_TRUE(lines.admit_now("alice"));
  ASSERT_TRUE(lines.admit_now("alice"));
  // Alice floods; Bob and Carol each send one later.
  const auto a1 = lines.enqueue("alice"), a2 = lines.enqueue("alice"), a3 = lines.enqueue("alice");
  const auto b1 = lines.enqueue("bob");
  const auto c1 = lines.enqueue("carol");
  std::vector<FairLines::WaiterId> order;
  auto free_one = [&](const std::string& owner) {
    lines.release(owner);
    auto granted = lines.grant();
    ASSERT_EQ(granted.size(), 1u);
    order.push_back(granted[0]);
  };
  free_one("alice");  // Bob and Carol were never served: they go before Alice's line
  free_one("alice");
  free_one("bob");  // then Alice's, in her order
  free_one("carol");
  free_one("alice");
  EXPECT_EQ(order.size(), 5u);
  EXPECT_EQ(order[0], b1);
  EXPECT_EQ(order[1], c1);
  EXPECT_EQ(order[2], a1);
  EXPECT_EQ(order[3], a2);
  EXPECT_EQ(order[4], a3);
  EXPECT_EQ(lines.waiting(), 0);
  EXPECT_EQ(lines.running(), 2);
}

TEST(FairLines, TwoFloodingOwnersAlternate) {
  FairLines lines;
  lines.set_limits(1, 0);
  ASSERT_TRUE(lines.admit_now("alice"));
  std::vector<FairLines::WaiterId> alice, bob;
  for (int i = 0; i < 3; ++i) alice.push_back(lines.enqueue("alice"));
  for (int i = 0; i < 3; ++i) bob.push_back(lines.enqueue("bob"));
  std::string served;
  std::string holder = "alice";
  for (int i = 0; i < 6; ++i) {
    lines.release(holder);
    auto granted = lines.grant();
    ASSERT_EQ(granted.size(), 1u);
    const bool is_alice = std::find(alice.begin(), alice.end(), granted[0]) != alice.end();
    holder = is_alice ? "alice" : "bob";
    served += is_alice ? 'a' : 'b';
  }
  EXPECT_EQ(served, "bababa");
}

TEST(FairLines, AHardCapAppliesOnlyWhenSetAndLeavesTheRestToOthers) {
  FairLines lines;
  lines.set_limits(4, 2);
  EXPECT_TRUE(lines.admit_now("alice"));
  EXPECT_TRUE(lines.admit_now("alice"));
  EXPECT_FALSE(lines.admit_now("alice"));  // at her cap, with slots free
  const auto a = lines.enqueue("alice");
  EXPECT_TRUE(lines.grant().empty());   // her waiter cannot take the free slots...
  EXPECT_TRUE(lines.admit_now("bob"));  // ...others can, at once
  EXPECT_TRUE(lines.admit_now("bob"));
  EXPECT_FALSE(lines.admit_now("carol"));  // all four taken
  lines.release("alice");
  EXPECT_EQ(lines.grant(), std::vector<FairLines::WaiterId>{a});
  EXPECT_EQ(lines.running_of("alice"), 2);
  // Without a cap the same owner takes every slot.
  lines.set_limits(4, 0);
  lines.release("bob");
  EXPECT_TRUE(lines.admit_now("alice"));
  EXPECT_EQ(lines.running_of("alice"), 3);
}

TEST(FairLines, AWaiterThatGivesUpLeavesTheLineAndTheNextOfItsOwnerMovesUp) {
  FairLines lines;
  lines.set_limits(1, 0);
  ASSERT_TRUE(lines.admit_now("alice"));
  const auto first = lines.enqueue("bob");
  const auto second = lines.enqueue("bob");
  EXPECT_TRUE(lines.leave(first));
  EXPECT_FALSE(lines.leave(first));  // only once
  EXPECT_EQ(lines.waiting(), 1);
  lines.release("alice");
  EXPECT_EQ(lines.grant(), std::vector<FairLines::WaiterId>{second});
  EXPECT_FALSE(lines.leave(second));  // granted: it holds a slot now, it cannot leave
  lines.release("bob");
  EXPECT_EQ(lines.running(), 0);
  EXPECT_EQ(lines.owners(), 0u);  // nothing left of idle owners
}

TEST(FairLines, AnOwnersOwnWaitersStayInOrderAheadOfItsNewRequests) {
  FairLines lines;
  lines.set_limits(1, 0);
  ASSERT_TRUE(lines.admit_now("alice"));
  const auto waiting = lines.enqueue("alice");
  lines.release("alice");
  // A new request of hers does not jump her own line while a slot is handed over.
  EXPECT_FALSE(lines.admit_now("alice"));
  EXPECT_EQ(lines.grant(), std::vector<FairLines::WaiterId>{waiting});
}

TEST(FairLines, ALowerLimitLetsRunningWorkFinishAndAHigherOneGrantsAtOnce) {
  FairLines lines;
  lines.set_limits(3, 0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(lines.admit_now("alice"));
  const auto b = lines.enqueue("bob");
  lines.set_limits(1, 0);
  lines.release("alice");
  EXPECT_TRUE(lines.grant().empty());  // two still running, the limit is one
  EXPECT_EQ(lines.running(), 2);
  lines.set_limits(4, 0);
  EXPECT_EQ(lines.grant(), std::vector<FairLines::WaiterId>{b});
}

TEST(FairLines, TheCapInForceIsTheOperatorsOrTheWholeLimit) {
  EXPECT_EQ(sandboxd::ops::owner_execution_cap(0, 16), 16);
  EXPECT_EQ(sandboxd::ops::owner_execution_cap(3, 16), 3);
}

}  // namespace
