#include "service/discovery.h"

#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <spdlog/spdlog.h>

#include "base/blocking.h"
#include "ops/metrics.h"

namespace sandboxd::service {
namespace {

using Clock = std::chrono::steady_clock;
// Executions in quick succession share one walk.
constexpr auto kCoalesce = std::chrono::milliseconds(200);
// While a sandbox runs, a listing walks at most this often.
constexpr auto kRunningRefresh = std::chrono::seconds(1);

void sync_now(Services& services, Container& container, store::OutputChanges* changes = nullptr) {
  const ContainerFileIndex::Walk walk(container.index);
  services.files.sync(container.storage, container.paths, changes);
}

}  // namespace

void after_execution(Services& services, const std::shared_ptr<Container>& container) {
  const std::optional<Clock::duration> delay = container->index.schedule_sync(kCoalesce);
  if (!delay) return;  // one is scheduled: it walks after this execution too
  auto timer = std::make_shared<asio::steady_timer>(container->strand, *delay);
  timer->async_wait([&services, container, timer](const boost::system::error_code&) {
    container->index.scheduled_sync_began();
    // The walk hashes new files: on the blocking pool, not the strand's I/O thread.
    asio::post(blocking_pool(), [&services, container] {
      try {
        sync_now(services, *container);
      } catch (const std::exception& e) {  // a bug or a broken database: logged, the pool goes on
        spdlog::error("syncing the files of container {}: {}", container->id, e.what());
      }
    });
  });
}

asio::awaitable<void> before_listing(Services& services, Container& container) {
  // A walk running now (after an execution) made the index clean as it began and may
  // not have reached the files that command wrote: this listing walks as well.
  if (!container.index.stale(container.running(), kRunningRefresh)) co_return;
  co_await sync_off_io_thread(services, container);
}

store::TreeChanges::Mark output_mark(Services& services, const Container& container) {
  auto* trees = services.files.tree_changes();
  return trees ? trees->mark(container.storage) : store::TreeChanges::Mark{};
}

asio::awaitable<ChangedOutputs> sync_after_command(Services& services, std::shared_ptr<Container> container,
                                                   int64_t since_ns,
                                                   std::optional<store::TreeChanges::Mark> before) {
  auto* trees = services.files.tree_changes();
  if (before && trees && trees->unchanged_since(container->storage, *before)) {
    ops::metrics().output_walk(/*skipped=*/true);
    container->index.keep_reported_since(since_ns);
    after_execution(services, container);
    co_return ChangedOutputs{};
  }
  ops::metrics().output_walk(/*skipped=*/false);
  auto changes = std::make_shared<store::OutputChanges>();
  changes->since_ns = since_ns;
  changes->reported_before = container->index.reported_outputs();
  auto walk = [&services, container, changes] { sync_now(services, *container, changes.get()); };
  co_await run_blocking(std::move(walk));
  container->index.keep_reported_since(since_ns, changes->reported_now);
  co_return ChangedOutputs{std::move(changes->paths), changes->truncated};
}

void drain_tree_changes(asio::io_context& io, store::TreeChanges& changes) {
  if (!changes.enabled()) return;
  // Its own descriptor (a dup): the loop's end closes it, never the instance's.
  const int fd = ::dup(changes.descriptor());
  if (fd < 0) return;
  auto readable = std::make_shared<asio::posix::stream_descriptor>(io, fd);
  auto loop = [readable, &changes]() -> asio::awaitable<void> {
    for (;;) {
      boost::system::error_code ec;
      co_await readable->async_wait(asio::posix::stream_descriptor::wait_read,
                                    asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      changes.drain();
    }
  };
  asio::co_spawn(io, std::move(loop), asio::detached);
}

asio::awaitable<void> sync_off_io_thread(Services& services, Container& container) {
  auto walk = [&services, &container] { sync_now(services, container); };
  co_await run_blocking(std::move(walk));
}

}  // namespace sandboxd::service
