// service/tool_tasks.h: MCP's tasks as the service keeps them. A task runs on apart from
// whoever started it, is the owner's only, ends cancelled when cancelled, and its bounds
// hold: at most Limits::per_owner kept (the one that ended first dropped to make room,
// none while all run), an ended one forgotten after Limits::keep_ended.
#include "service/tool_tasks.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using sandboxd::service::ToolTasks;
using Status = ToolTasks::Status;

// Work that writes some output and ends at once with a result.
ToolTasks::Work finishing(std::string output) {
  return [output](std::shared_ptr<sandboxd::runtime::Cancellation>,
                  ToolTasks::Progress progress) -> asio::awaitable<ToolTasks::Outcome> {
    progress(output);
    co_return ToolTasks::Outcome{false, boost::json::object{{"said", output}}};
  };
}

// Work that runs until its task is cancelled.
ToolTasks::Work running_until_cancelled() {
  return [](std::shared_ptr<sandboxd::runtime::Cancellation> cancellation,
            ToolTasks::Progress progress) -> asio::awaitable<ToolTasks::Outcome> {
    progress("started\n");
    auto timer =
        std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor, std::chrono::hours(1));
    cancellation->subscribe([timer] { asio::post(timer->get_executor(), [timer] { timer->cancel(); }); });
    boost::system::error_code ec;
    co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    co_return ToolTasks::Outcome{false, boost::json::object{{"ran", "to its end"}}};
  };
}

TEST(ToolTasks, ATaskRunsApartItsOutputShowsAndItsResultIsKeptForItsOwner) {
  asio::io_context io;
  ToolTasks tasks;
  auto started = tasks.start(io.get_executor(), "alice", "box-1", finishing("hello\n"));
  ASSERT_TRUE(started) << started.error().message;
  EXPECT_EQ(started->status, Status::kWorking);
  EXPECT_TRUE(started->id.starts_with("mcpt_")) << started->id;
  EXPECT_EQ(ToolTasks::container_of(started->id), "box-1");
  io.run();  // the work runs on the executor, not in start()

  auto ended = tasks.get("alice", started->id);
  ASSERT_TRUE(ended);
  EXPECT_EQ(ended->status, Status::kCompleted);
  EXPECT_EQ(boost::json::serialize(ended->payload), R"({"said":"hello\n"})");
  EXPECT_GE(ended->ttl, std::chrono::hours(1));
  // Another owner: as unknown as an id never made (the id is no credential).
  EXPECT_FALSE(tasks.get("bob", started->id));
  EXPECT_FALSE(tasks.cancel("bob", started->id));
  EXPECT_FALSE(tasks.get("alice", "mcpt_" + std::string(32, '0') + ".box-1"));
  // Cancelling an ended task changes nothing.
  EXPECT_EQ(tasks.cancel("alice", started->id)->status, Status::kCompleted);
}

TEST(ToolTasks, ACancelledTaskIsCancelledAndItsWorkIsStopped) {
  asio::io_context io;
  ToolTasks tasks;
  auto started = tasks.start(io.get_executor(), "alice", "box", running_until_cancelled());
  ASSERT_TRUE(started);
  io.poll();
  auto working = tasks.get("alice", started->id);
  ASSERT_TRUE(working);
  EXPECT_EQ(working->status, Status::kWorking);
  EXPECT_EQ(working->status_message, "started\n");
  EXPECT_EQ(tasks.cancel("alice", started->id)->status, Status::kCancelled);
  io.run();  // returns only once the work has ended: its cancellation stopped it
  auto cancelled = tasks.get("alice", started->id);
  EXPECT_EQ(cancelled->status, Status::kCancelled);
  EXPECT_TRUE(cancelled->payload.empty());  // what the work returned after is not its result
}

TEST(ToolTasks, AnOwnersTasksAreBoundedTheFirstEndedMakesRoomNoneWhileAllRun) {
  asio::io_context io;
  ToolTasks tasks(ToolTasks::Limits{.per_owner = 2});
  auto first = tasks.start(io.get_executor(), "alice", "box", finishing("1"));
  io.run();
  io.restart();
  auto second = tasks.start(io.get_executor(), "alice", "box", running_until_cancelled());
  auto third = tasks.start(io.get_executor(), "alice", "box", running_until_cancelled());
  ASSERT_TRUE(first && second && third);
  EXPECT_FALSE(tasks.get("alice", first->id));  // ended: dropped to make room
  // Both kept tasks run: the next is refused, and another owner is not held back.
  auto refused = tasks.start(io.get_executor(), "alice", "box", finishing("4"));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, sandboxd::ErrorKind::rate_limited);
  EXPECT_NE(refused.error().message.find("at most 2 tasks"), std::string::npos) << refused.error().message;
  EXPECT_TRUE(tasks.start(io.get_executor(), "bob", "box", finishing("b")));
  io.poll();
  tasks.cancel("alice", second->id);
  tasks.cancel("alice", third->id);
  io.run();
  EXPECT_TRUE(tasks.start(io.get_executor(), "alice", "box", finishing("5")));
}

TEST(ToolTasks, AnEndedTaskIsForgottenAfterItsKeepTime) {
  asio::io_context io;
  ToolTasks tasks(ToolTasks::Limits{.keep_ended = std::chrono::milliseconds(0)});
  auto started = tasks.start(io.get_executor(), "alice", "box", finishing("x"));
  ASSERT_TRUE(started);
  EXPECT_TRUE(tasks.get("alice", started->id));  // running: kept whatever the keep time
  io.run();
  EXPECT_FALSE(tasks.get("alice", started->id));
}

TEST(ToolTasks, OnlyATaskIdNamesAContainer) {
  const std::string random(32, 'a');
  EXPECT_EQ(ToolTasks::container_of("mcpt_" + random + ".my-box.1"), "my-box.1");
  const std::vector<std::string> not_task_ids{"",
                                              "mcpt_",
                                              "mcpt_" + random,
                                              "mcpt_" + random + ".",
                                              "mcpt_" + std::string(31, 'a') + "x.box",
                                              "mcpt_" + random + "-box",
                                              "mcpt_" + random + ".bad/box",
                                              "task_" + random + ".box"};
  for (const auto& id : not_task_ids) EXPECT_EQ(ToolTasks::container_of(id), "") << id;
}

}  // namespace
