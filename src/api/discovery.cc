#include "api/discovery.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <spdlog/spdlog.h>

#include "server/blocking.h"

namespace sandboxd::api {
namespace {

using Clock = std::chrono::steady_clock;
// Executions in quick succession share one walk.
constexpr auto kCoalesce = std::chrono::milliseconds(200);
// While a sandbox runs, a listing walks at most this often.
constexpr auto kRunningRefresh = std::chrono::seconds(1);

void sync_now(ApiContext& api, Container& container, store::OutputChanges* changes = nullptr) {
  {
    std::lock_guard lock(container.sync_mutex);
    container.index_dirty = false;
    container.synced_at = Clock::now();
    ++container.walks_running;
  }
  struct Finished {
    Container& container;
    ~Finished() {
      std::lock_guard lock(container.sync_mutex);
      --container.walks_running;
    }
  } finished{container};
  api.files.sync(container.storage, container.paths, changes);
}

}  // namespace

void after_execution(ApiContext& api, const std::shared_ptr<Container>& container) {
  Clock::duration delay{};
  {
    std::lock_guard lock(container->sync_mutex);
    container->index_dirty = true;
    if (container->sync_scheduled) return;
    container->sync_scheduled = true;
    auto since = Clock::now() - container->synced_at;
    if (since < kCoalesce) delay = kCoalesce - since;
  }
  auto timer = std::make_shared<asio::steady_timer>(container->strand, delay);
  timer->async_wait([&api, container, timer](const boost::system::error_code&) {
    {
      std::lock_guard lock(container->sync_mutex);
      container->sync_scheduled = false;
    }
    // The walk hashes new files: on the blocking pool, not the strand's I/O thread.
    asio::post(server::blocking_pool(), [&api, container] {
      try {
        sync_now(api, *container);
      } catch (const std::exception& e) {  // a bug or a broken database: logged, the pool goes on
        spdlog::error("syncing the files of container {}: {}", container->id, e.what());
      }
    });
  });
}

asio::awaitable<void> before_listing(ApiContext& api, Container& container) {
  {
    std::lock_guard lock(container.sync_mutex);
    // A walk running now (after an execution) cleared index_dirty as it began and may
    // not have reached the files that command wrote: this listing walks as well.
    bool stale = container.index_dirty || container.walks_running > 0 ||
                 (container.running() && Clock::now() - container.synced_at > kRunningRefresh);
    if (!stale) co_return;
  }
  co_await sync_off_io_thread(api, container);
}

asio::awaitable<ChangedOutputs> sync_after_command(ApiContext& api, std::shared_ptr<Container> container,
                                                   int64_t since_ns) {
  auto changes = std::make_shared<store::OutputChanges>();
  changes->since_ns = since_ns;
  auto walk = [&api, container, changes] { sync_now(api, *container, changes.get()); };
  co_await server::run_blocking(std::move(walk));
  co_return ChangedOutputs{std::move(changes->paths), changes->truncated};
}

asio::awaitable<void> sync_off_io_thread(ApiContext& api, Container& container) {
  auto walk = [&api, &container] { sync_now(api, container); };
  co_await server::run_blocking(std::move(walk));
}

}  // namespace sandboxd::api
