#include "service/discovery.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <spdlog/spdlog.h>

#include "base/blocking.h"

namespace sandboxd::service {
namespace {

using Clock = std::chrono::steady_clock;
// Executions in quick succession share one walk.
constexpr auto kCoalesce = std::chrono::milliseconds(200);
// While a sandbox runs, a listing walks at most this often.
constexpr auto kRunningRefresh = std::chrono::seconds(1);

void sync_now(Services& services, Container& container, store::OutputChanges* changes = nullptr) {
  {
    std::lock_guard lock(container.index.mutex);
    container.index.dirty = false;
    container.index.synced_at = Clock::now();
    ++container.index.walks_running;
  }
  struct Finished {
    Container& container;
    ~Finished() {
      std::lock_guard lock(container.index.mutex);
      --container.index.walks_running;
    }
  } finished{container};
  services.files.sync(container.storage, container.paths, changes);
}

}  // namespace

void after_execution(Services& services, const std::shared_ptr<Container>& container) {
  Clock::duration delay{};
  {
    std::lock_guard lock(container->index.mutex);
    container->index.dirty = true;
    if (container->index.sync_scheduled) return;
    container->index.sync_scheduled = true;
    auto since = Clock::now() - container->index.synced_at;
    if (since < kCoalesce) delay = kCoalesce - since;
  }
  auto timer = std::make_shared<asio::steady_timer>(container->strand, delay);
  timer->async_wait([&services, container, timer](const boost::system::error_code&) {
    {
      std::lock_guard lock(container->index.mutex);
      container->index.sync_scheduled = false;
    }
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
  {
    std::lock_guard lock(container.index.mutex);
    // A walk running now (after an execution) cleared index.dirty as it began and may
    // not have reached the files that command wrote: this listing walks as well.
    bool stale = container.index.dirty || container.index.walks_running > 0 ||
                 (container.running() && Clock::now() - container.index.synced_at > kRunningRefresh);
    if (!stale) co_return;
  }
  co_await sync_off_io_thread(services, container);
}

asio::awaitable<ChangedOutputs> sync_after_command(Services& services, std::shared_ptr<Container> container,
                                                   int64_t since_ns) {
  auto changes = std::make_shared<store::OutputChanges>();
  changes->since_ns = since_ns;
  {
    std::lock_guard lock(container->index.mutex);
    changes->reported_before = container->index.reported_outputs;
  }
  auto walk = [&services, container, changes] { sync_now(services, *container, changes.get()); };
  co_await run_blocking(std::move(walk));
  {
    // Kept only while a later command's start may still share their tick: a ctime below
    // this command's start can never be at or after a later one's.
    std::lock_guard lock(container->index.mutex);
    auto& reported = container->index.reported_outputs;
    std::erase_if(reported, [since_ns](const auto& entry) { return entry.second < since_ns; });
    for (const auto& [path, ctime_ns] : changes->reported_now) reported[path] = ctime_ns;
  }
  co_return ChangedOutputs{std::move(changes->paths), changes->truncated};
}

asio::awaitable<void> sync_off_io_thread(Services& services, Container& container) {
  auto walk = [&services, &container] { sync_now(services, container); };
  co_await run_blocking(std::move(walk));
}

}  // namespace sandboxd::service
