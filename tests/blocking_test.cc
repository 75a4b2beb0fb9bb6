// Work handed to a pool and awaited (base/blocking.h run_on, run_blocking): the work runs
// on the pool's thread, its result or its exception comes back to the awaiting coroutine,
// and the coroutine resumes on its own executor (a connection's strand), never on the
// pool's thread, also when many coroutines on several I/O threads hand work at once.
#include "base/blocking.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sandboxd {
namespace {

namespace asio = boost::asio;
using Strand = asio::strand<asio::io_context::executor_type>;

// Runs `body` as a coroutine on a strand of an io_context served by `io_threads` threads.
void run_on_strands(int coroutines, int io_threads,
                    const std::function<asio::awaitable<void>(Strand, int)>& body) {
  asio::io_context io;
  std::atomic<int> finished{0};
  for (int i = 0; i < coroutines; ++i) {
    Strand strand = asio::make_strand(io);
    asio::co_spawn(strand, body(strand, i), [&finished](std::exception_ptr failure) {
      if (failure) std::rethrow_exception(failure);
      ++finished;
    });
  }
  std::vector<std::thread> threads;
  for (int i = 1; i < io_threads; ++i) threads.emplace_back([&io] { io.run(); });
  io.run();
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(finished.load(), coroutines);
}

TEST(Blocking, TheWorkRunsOnThePoolAndItsResultComesBackOnTheCoroutinesStrand) {
  asio::thread_pool pool(2);
  run_on_strands(1, 1, [&pool](Strand strand, int) -> asio::awaitable<void> {
    const auto io_thread = std::this_thread::get_id();
    std::thread::id work_thread;
    auto work = [&work_thread] {
      work_thread = std::this_thread::get_id();
      return std::string("done");
    };
    const std::string result = co_await run_on(pool, std::move(work));
    EXPECT_EQ(result, "done");
    EXPECT_NE(work_thread, io_thread);
    EXPECT_EQ(std::this_thread::get_id(), io_thread);
    EXPECT_TRUE(strand.running_in_this_thread());
  });
}

TEST(Blocking, AnExceptionOfTheWorkIsThrownInTheAwaitingCoroutine) {
  run_on_strands(1, 1, [](Strand strand, int) -> asio::awaitable<void> {
    auto failing = []() -> int { throw std::runtime_error("the walk failed"); };
    bool caught = false;
    try {
      co_await run_blocking(std::move(failing));
    } catch (const std::runtime_error& e) {
      caught = std::string(e.what()) == "the walk failed";
    }
    EXPECT_TRUE(caught);
    EXPECT_TRUE(strand.running_in_this_thread());
    // A void result, and a result that can only be moved.
    int ran = 0;
    auto nothing = [&ran] { ++ran; };
    co_await run_blocking(std::move(nothing));
    EXPECT_EQ(ran, 1);
    auto owned = [] { return std::make_unique<int>(7); };
    auto value = co_await run_blocking(std::move(owned));
    EXPECT_TRUE(value && *value == 7);
  });
}

TEST(Blocking, ManyCoroutinesOnTwoIoThreadsEachGetTheirOwnResults) {
  asio::thread_pool pool(4);
  std::atomic<int> on_pool_thread{0};
  run_on_strands(64, 2, [&](Strand strand, int index) -> asio::awaitable<void> {
    for (int round = 0; round < 50; ++round) {
      auto work = [index, round] { return index * 1000 + round; };
      const int result = co_await run_on(pool, std::move(work));
      EXPECT_EQ(result, index * 1000 + round);
      if (!strand.running_in_this_thread()) ++on_pool_thread;
    }
  });
  EXPECT_EQ(on_pool_thread.load(), 0);
}

}  // namespace
}  // namespace sandboxd
