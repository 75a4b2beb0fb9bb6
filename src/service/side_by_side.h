// Work over many items at once: one coroutine per item, awaited together (a shutdown
// stopping every sandbox, rather than one after the other).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <exception>
#include <vector>

namespace sandboxd::service {

// Runs `work(item)` for every item, side by side on `executor`, and returns once all
// have finished. `work` must not throw (each item's failure is its own to report); an
// exception that escapes one anyway is rethrown here after all have finished.
template <typename Item, typename Work>
boost::asio::awaitable<void> all_of(boost::asio::any_io_executor executor, const std::vector<Item>& items,
                                    Work work) {
  namespace asio = boost::asio;
  if (items.empty()) co_return;
  using Op = decltype(asio::co_spawn(executor, work(items.front()), asio::deferred));
  std::vector<Op> ops;
  ops.reserve(items.size());
  for (const auto& item : items) ops.push_back(asio::co_spawn(executor, work(item), asio::deferred));
  auto [order, failures] = co_await asio::experimental::make_parallel_group(std::move(ops))
                               .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
  for (const auto& failure : failures)
    if (failure) std::rethrow_exception(failure);
}

}  // namespace sandboxd::service
