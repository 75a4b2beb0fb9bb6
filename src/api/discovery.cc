#include "api/discovery.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace sandboxd::api {
namespace {

using Clock = std::chrono::steady_clock;
// Executions in quick succession share one walk.
constexpr auto kCoalesce = std::chrono::milliseconds(200);
// While a sandbox runs, a listing walks at most this often.
constexpr auto kRunningRefresh = std::chrono::seconds(1);

void sync_now(ApiContext& api, Container& container) {
  {
    std::lock_guard lock(container.sync_mutex);
    container.index_dirty = false;
    container.synced_at = Clock::now();
  }
  api.files.sync(container.storage, container.paths);
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
    sync_now(api, *container);
  });
}

void before_listing(ApiContext& api, Container& container) {
  {
    std::lock_guard lock(container.sync_mutex);
    bool stale = container.index_dirty || (container.running() && Clock::now() - container.synced_at > kRunningRefresh);
    if (!stale) return;
  }
  sync_now(api, container);
}

}  // namespace sandboxd::api
