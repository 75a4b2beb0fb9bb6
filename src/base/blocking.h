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

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
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

// Runs `fn` on `pool` and returns its result to the awaiting coroutine.
template <typename Fn>
boost::asio::awaitable<std::invoke_result_t<Fn&>> run_on(boost::asio::thread_pool& pool, Fn fn) {
  co_return co_await boost::asio::co_spawn(pool, run_here(std::move(fn)), boost::asio::use_awaitable);
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
