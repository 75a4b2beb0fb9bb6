// Metadata store calls off the I/O threads when they are network round trips. With
// SQLite (the single-host default) a store call is microseconds against a local file
// and runs inline, as it always did; with PostgreSQL each statement is a round trip to
// the server (a listing two or three, an upload four or five), so the call runs on a
// small pool of its own and the I/O thread serves other connections meanwhile.
//
//   auto page = co_await store_call(services, [&] { return metadata.list_files(...); });
//
// The awaiting coroutine stays suspended until the call returns, so capturing its
// locals by reference is safe; an exception thrown by the call is rethrown in the
// awaiting coroutine, which resumes on its own executor. Work that is not awaited
// (store_call_detached) must capture by value.
//
// The pool is separate from base/blocking.h's (whose run_on and run_here this
// uses): a disk walk or a hash of a large new output there never holds up a one-row
// lookup, and its size matches the PostgreSQL connection pool (store/database.h
// open_postgres), so each of its threads can hold a connection at once.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <type_traits>
#include <utility>

#include "base/blocking.h"
#include "service/services.h"
#include "store/database.h"

namespace sandboxd::service {

// The process's pool for PostgreSQL store calls: started on first use (never with
// SQLite), joined at exit.
boost::asio::thread_pool& store_pool();

namespace detail {
void log_detached_failure(std::exception_ptr failure);
}  // namespace detail

// Runs `fn` (a call on a store of this backend's database) inline for SQLite, on
// store_pool() for PostgreSQL, and returns its result. (Not a coroutine itself: `fn`
// reaches the coroutine moved, never as a temporary, which GCC 12 destroys twice.)
template <typename Fn>
boost::asio::awaitable<std::invoke_result_t<Fn&>> store_call(store::db::Backend backend, Fn fn) {
  if (backend == store::db::Backend::kSqlite) return run_here(std::move(fn));
  return run_on(store_pool(), std::move(fn));
}

// The same, for the backend of the server's metadata (every store shares it).
template <typename Fn>
boost::asio::awaitable<std::invoke_result_t<Fn&>> store_call(const Services& services, Fn fn) {
  return store_call(services.containers.metadata().backend(), std::move(fn));
}

// A write nobody waits for (a last-used time): inline for SQLite; for PostgreSQL
// queued on store_pool(), a failure logged. `fn` must own what it uses (capture by value).
template <typename Fn>
void store_call_detached(store::db::Backend backend, Fn fn) {
  if (backend == store::db::Backend::kSqlite) {
    fn();
    return;
  }
  boost::asio::co_spawn(store_pool(), run_here(std::move(fn)), [](std::exception_ptr failure, auto&&...) {
    if (failure) detail::log_detached_failure(failure);
  });
}

}  // namespace sandboxd::service
