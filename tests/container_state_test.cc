// The parts of an open container that other files lock or flip, each on its own
// (service/container_bucket.h, container_file_index.h, container_python.h): the rules
// they keep, with no server and no sandbox.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "service/container_bucket.h"
#include "service/container_file_index.h"
#include "service/container_python.h"

namespace sandboxd::service {
namespace {

using namespace std::chrono_literals;

TEST(ContainerBucket, AChangeIsUnflushedUntilAFlushThatStartedAfterItSucceeds) {
  ContainerBucket bucket;
  EXPECT_TRUE(bucket.releasable());
  EXPECT_FALSE(bucket.needs_flush());
  bucket.note_change();
  EXPECT_FALSE(bucket.releasable());
  EXPECT_TRUE(bucket.needs_flush());
  const uint64_t at_start = bucket.changes_so_far();
  bucket.note_change();  // during the flush: not in what it sent
  bucket.flush_succeeded(at_start);
  EXPECT_TRUE(bucket.has_unflushed_changes());
  bucket.flush_succeeded(bucket.changes_so_far());
  EXPECT_TRUE(bucket.releasable());
}

TEST(ContainerBucket, AFailedFlushIsRetriedAfterABackoffThatDoublesUpToItsCap) {
  ContainerBucket bucket;
  bucket.note_change();
  bucket.flush_ended_badly(/*now_ms=*/10'000, /*max_delay_ms=*/60'000);
  EXPECT_FALSE(bucket.releasable());  // never released while a flush fails
  EXPECT_FALSE(bucket.flush_due(11'999, 1'000, false));
  EXPECT_TRUE(bucket.flush_due(12'000, 1'000, false));  // 1 s << 1
  bucket.flush_ended_badly(12'000, 60'000);
  EXPECT_FALSE(bucket.flush_due(15'999, 1'000, false));
  EXPECT_TRUE(bucket.flush_due(16'000, 1'000, false));  // 1 s << 2
  for (int i = 0; i < 20; ++i) bucket.flush_ended_badly(16'000, 60'000);
  EXPECT_FALSE(bucket.flush_due(75'999, 1'000, false));
  EXPECT_TRUE(bucket.flush_due(76'000, 1'000, false));  // capped
  bucket.flush_ended_well(76'000);
  bucket.flush_succeeded(bucket.changes_so_far());
  EXPECT_TRUE(bucket.releasable());
  EXPECT_FALSE(bucket.flush_due(1'000'000, 1'000, false));  // nothing to send
}

TEST(ContainerBucket, TheFlusherWaitsItsIntervalWhileSomethingIsToSend) {
  ContainerBucket bucket;
  bucket.flush_ended_well(/*now_ms=*/5'000);
  EXPECT_FALSE(bucket.flush_due(100'000, 1'000, /*executing=*/false));
  EXPECT_FALSE(bucket.flush_due(5'500, 1'000, /*executing=*/true));
  EXPECT_TRUE(bucket.flush_due(6'000, 1'000, /*executing=*/true));  // a command may be writing
  bucket.note_change();
  EXPECT_TRUE(bucket.flush_due(6'000, 1'000, false));
}

TEST(ContainerBucket, ACopyLetGoOfHasNothingToSendOrRetry) {
  ContainerBucket bucket;
  bucket.local_is_ready();
  bucket.note_change();
  bucket.flush_ended_badly(0, 60'000);
  bucket.invalidate_local();
  bucket.let_go();
  EXPECT_FALSE(bucket.local_ready());
  EXPECT_TRUE(bucket.releasable());
  EXPECT_FALSE(bucket.needs_flush());
}

TEST(ContainerFileIndex, ExecutionsInQuickSuccessionShareOneScheduledSync) {
  ContainerFileIndex index;
  auto first = index.schedule_sync(200ms);
  ASSERT_TRUE(first.has_value());
  EXPECT_LE(*first, ContainerFileIndex::Clock::duration(200ms));
  EXPECT_FALSE(index.schedule_sync(200ms).has_value());  // one is scheduled
  index.scheduled_sync_began();
  EXPECT_TRUE(index.schedule_sync(200ms).has_value());
}

TEST(ContainerFileIndex, AListingWalksWhenDirtyOrWhileAWalkRuns) {
  ContainerFileIndex index;
  const auto never = std::chrono::hours(24);
  EXPECT_TRUE(index.stale(false, never));  // never walked
  {
    ContainerFileIndex::Walk walk(index);
    EXPECT_TRUE(index.stale(false, never));  // the walk may not have reached the files yet
  }
  EXPECT_FALSE(index.stale(false, never));
  EXPECT_TRUE(index.stale(/*running=*/true, ContainerFileIndex::Clock::duration(-1)));
  index.note_change();
  EXPECT_TRUE(index.stale(false, never));
  { ContainerFileIndex::Walk walk(index); }
  EXPECT_FALSE(index.stale(false, never));
}

TEST(ContainerFileIndex, ReportedOutputsAreKeptOnlyFromTheCommandsStart) {
  ContainerFileIndex index;
  index.keep_reported_since(100, {{"/outputs/a", 150}, {"/outputs/b", 120}});
  index.keep_reported_since(130, {{"/outputs/c", 140}});
  const auto reported = index.reported_outputs();
  EXPECT_EQ(reported.size(), 2u);
  EXPECT_TRUE(reported.contains("/outputs/a"));
  EXPECT_TRUE(reported.contains("/outputs/c"));
}

TEST(ContainerPython, ContextsAreBoundedAndTheDefaultOneAlwaysExists) {
  ContainerPython python;
  EXPECT_TRUE(python.has_context(std::string(kDefaultPythonContext)));
  std::vector<std::string> made;
  for (;;) {
    auto context = python.add_context("/workspace", 4);
    if (!context) break;
    made.push_back(context->id);
  }
  ASSERT_EQ(made.size(), 3u);  // the default one counts
  const auto listed = python.contexts();
  ASSERT_EQ(listed.size(), 4u);
  EXPECT_EQ(listed[0].id, kDefaultPythonContext);
  EXPECT_EQ(listed[1].id, made[0]);
  EXPECT_EQ(listed[1].cwd, "/workspace");
  EXPECT_TRUE(python.restart_context(made[1]));
  auto removed = python.remove_context(made[1]);
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(*removed, nullptr);  // it had no kernel yet
  EXPECT_FALSE(python.has_context(made[1]));
  EXPECT_FALSE(python.restart_context(made[1]));
  EXPECT_FALSE(python.remove_context(made[1]).has_value());
  EXPECT_TRUE(python.add_context("", 4).has_value());  // room again
}

TEST(ContainerPython, APausedCellIsTakenOnceAndOnlyWhenItsAnswersFit) {
  ContainerPython python;
  ContainerPython::PausedCode paused;
  paused.server_tool_id = "srvtoolu_1";
  paused.cell = 7;
  paused.calls["toolu_a"] = "call-1";
  paused.expires = std::chrono::steady_clock::now() + std::chrono::hours(1);
  python.pause(paused);
  auto accept = [](const ContainerPython::PausedCode&) { return true; };
  auto refuse = [](const ContainerPython::PausedCode&) { return false; };
  EXPECT_FALSE(python.take_paused("srvtoolu_other", accept).has_value());
  EXPECT_FALSE(python.take_paused("srvtoolu_1", refuse).has_value());  // still paused
  auto taken = python.take_paused("srvtoolu_1", accept);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->cell, 7u);
  EXPECT_FALSE(python.take_paused("srvtoolu_1", accept).has_value());  // another finds it taken
  python.put_back_paused(std::move(*taken));
  EXPECT_TRUE(python.take_paused("srvtoolu_1", accept).has_value());

  paused.expires = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  python.pause(paused);
  EXPECT_FALSE(python.take_paused("srvtoolu_1", accept).has_value());  // its pause expired
}

}  // namespace
}  // namespace sandboxd::service
