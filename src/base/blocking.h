// Disk work off the I/O threads. A handler that walks a directory tree, hashes whole
// files or otherwise waits on the disk hands that work to a small pool of blocking
// threads and awaits it: the I/O thread serves other connections meanwhile.
//
//   auto walk = [&] { return usage_of(paths); };
//   auto usage = co_await run_blocking(std::move(walk));
//
// (Pass a named callable, moved: GCC 12 destroys a lambda temporary converted to a
// coroutine's parameter twice.) An exception thrown by the work is rethrown in the
// awaiting coroutine, which resumes on its own executor.
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

namespace sandboxd {

// The process's pool for blocking work: a few threads, started on first use, joined
// at exit.
boost::asio::thread_pool& blocking_pool();

// An awaitable that runs `fn` when awaited, on the awaiting thread: what run_on() hands
// a pool, and what a caller that decides per call (service/store_call.h) awaits inline.
template <typename Fn>
boost::asio::awaitable<std::invoke_result_t<Fn&>> run_here(Fn fn) {
  co_return fn();
}

namespace detail {
// What `fn` returned or threw, handed from the pool's thread to the awaiting coroutine.
template <typename R>
struct PoolOutcome {
  std::optional<R> value;
  std::exception_ptr failure;
  template <typename Fn>
  void run(Fn& fn) {
    value.emplace(fn());
  }
  R take() { return std::move(*value); }
};
template <>
struct PoolOutcome<void> {
  std::exception_ptr failure;
  template <typename Fn>
  void run(Fn& fn) {
    fn();
  }
  void take() {}
};
}  // namespace detail

// Runs `fn` on `pool` and returns its result to the awaiting coroutine. One hop each
// way: the pool's thread runs `fn` and hands the result straight to the coroutine's
// executor. (co_spawn onto the pool would post once more on the pool after `fn`, since
// `fn` never suspends: a second pool thread woken per call, only to hop back.)
template <typename Fn>
boost::asio::awaitable<std::invoke_result_t<Fn&>> run_on(boost::asio::thread_pool& pool, Fn fn) {
  using Value = std::invoke_result_t<Fn&>;
  detail::PoolOutcome<Value> outcome;
  // The coroutine is suspended until the handler runs, so its locals outlive the work.
  auto start = [&pool, &fn, &outcome](auto handler) {
    auto executor = boost::asio::prefer(boost::asio::get_associated_executor(handler),
                                        boost::asio::execution::outstanding_work.tracked);
    boost::asio::post(pool, [&fn, &outcome, handler = std::move(handler), executor]() mutable {
      try {
        outcome.run(fn);
      } catch (...) {
        outcome.failure = std::current_exception();
      }
      boost::asio::dispatch(executor, std::move(handler));
    });
  };
  co_await boost::asio::async_initiate<const boost::asio::use_awaitable_t<>, void()>(
      start, boost::asio::use_awaitable);
  if (outcome.failure) std::rethrow_exception(outcome.failure);
  co_return outcome.take();
}

// The pool for work over many entries that an owner's request sent (a skill's files
// being unpacked, checked, sealed or removed): threads of their own, so such work
// queues behind itself and never in front of the file transfers, listings and command
// set-ups that blocking_pool() runs for every owner.
boost::asio::thread_pool& tree_pool();

// Runs `fn` on blocking_pool() and returns its result to the awaiting coroutine.
template <typename Fn>
boost::asio::awaitable<std::invoke_result_t<Fn&>> run_blocking(Fn fn) {
  return run_on(blocking_pool(), std::move(fn));
}

}  // namespace sandboxd
