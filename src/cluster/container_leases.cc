#include "cluster/container_leases.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "base/blocking.h"
#include "store/database.h"

namespace sandboxd::cluster {

using Clock = std::chrono::steady_clock;

ContainerLeases::ContainerLeases(asio::io_context& io, store::LeaseStore& store, Settings settings)
    : io_(io), store_(store), settings_(std::move(settings)), renew_timer_(io) {}

int64_t ContainerLeases::now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ContainerLeases::Holder ContainerLeases::holder_of(const std::string& storage) {
  Holder holder;
  auto lease = store_.find(storage);
  if (!lease || !lease->live(now_ms()) || lease->holder == settings_.replica_id) return holder;
  holder.elsewhere = true;
  holder.holder = lease->holder;
  holder.holder_url = lease->holder_url;
  return holder;
}

bool ContainerLeases::confirmed(const std::string& storage) const {
  std::lock_guard lock(mutex_);
  auto it = held_.find(storage);
  return it != held_.end() && it->second.live && Clock::now() - it->second.confirmed_at < settings_.lease / 2;
}

Result<ContainerLeases::Claim> ContainerLeases::claim(const std::string& storage, bool existing_container) {
  const auto started = Clock::now();
  bool held_here = false;
  int64_t held_epoch = 0;
  {
    std::lock_guard lock(mutex_);
    if (auto it = held_.find(storage); it != held_.end() && it->second.live) {
      held_here = true;
      held_epoch = it->second.epoch;
      // Confirmed recently (by an acquire or a renewal): no round trip to the database.
      if (started - it->second.confirmed_at < settings_.lease / 2) return Claim{held_epoch, false};
    }
  }
  if (draining_ && !held_here)
    return ApiError::overloaded("This replica is shutting down; try again (another replica takes the container)",
                                settings_.retry_after_sec);
  std::optional<store::Lease> lease;
  try {
    lease = store_.acquire(storage, settings_.replica_id, settings_.advertise_url, now_ms(),
                           std::chrono::duration_cast<std::chrono::milliseconds>(settings_.lease).count(),
                           existing_container);
  } catch (const store::db::TimeoutError& e) {
    // Another session holds the lease row (a replica paused inside a write, or cut off
    // mid-transaction): this container waits until the database ends that session;
    // nothing else here waits with it.
    spdlog::warn("lease: container storage {}: the lease row is held by another session: {}", storage, e.what());
    return ApiError::overloaded("The container's lease is held up in the database; try again shortly",
                                settings_.retry_after_sec);
  }
  if (!lease && existing_container && !store_.find(storage)) {
    std::lock_guard lock(mutex_);
    held_.erase(storage);
    return ApiError::not_found("Container not found");  // deleted meanwhile (through another replica)
  }
  std::lock_guard lock(mutex_);
  if (!lease) {
    if (held_here) held_.erase(storage);  // another replica has it now
    return ApiError::overloaded("The container is moving to another replica; try again shortly",
                                settings_.retry_after_sec);
  }
  const bool fresh = !held_here || held_epoch != lease->epoch;
  held_[storage] = Held{lease->epoch, started, true};
  if (fresh) spdlog::info("lease: took container storage {} at epoch {}", storage, lease->epoch);
  return Claim{lease->epoch, fresh};
}

bool ContainerLeases::release(const std::string& storage) {
  int64_t epoch = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = held_.find(storage);
    if (it == held_.end() || !it->second.live) return false;
    it->second.live = false;  // the epoch stays for the fence
    epoch = it->second.epoch;
  }
  const bool released = store_.release(storage, settings_.replica_id, epoch);
  if (released) spdlog::info("lease: released container storage {} (epoch {})", storage, epoch);
  return released;
}

void ContainerLeases::drop(const std::string& storage, bool deleted, bool lost) {
  {
    std::lock_guard lock(mutex_);
    held_.erase(storage);
  }
  if (deleted) store_.remove(storage);
  if (lost && on_lost_) on_lost_(storage);
}

void ContainerLeases::fenced(const store::FencedError& fenced) {
  spdlog::warn("lease: {}; this replica gives the container up", fenced.what());
  drop(fenced.storage(), /*deleted=*/false, /*lost=*/true);
}

std::vector<std::string> ContainerLeases::held() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [storage, held] : held_)
    if (held.live) out.push_back(storage);
  return out;
}

int64_t ContainerLeases::check_fence(store::db::Connection& conn, const std::string& storage) const {
  int64_t epoch = 0;  // never held here (or dropped): no lease has epoch 0, so it is refused
  {
    std::lock_guard lock(mutex_);
    if (auto it = held_.find(storage); it != held_.end()) epoch = it->second.epoch;
  }
  return store::LeaseStore::check_fence(conn, storage, epoch);
}

void ContainerLeases::start() { asio::co_spawn(io_, renew_loop(), asio::detached); }

void ContainerLeases::stop() {
  stopped_ = true;
  asio::post(renew_timer_.get_executor(), [this] { renew_timer_.cancel(); });
}

asio::awaitable<void> ContainerLeases::renew_loop() {
  const auto interval = std::max<Clock::duration>(settings_.lease / 3, std::chrono::milliseconds(200));
  const int64_t ttl_ms = std::chrono::duration_cast<std::chrono::milliseconds>(settings_.lease).count();
  while (!stopped_) {
    renew_timer_.expires_after(interval);
    boost::system::error_code ec;
    co_await renew_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (stopped_) break;
    std::vector<std::pair<std::string, int64_t>> due;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [storage, held] : held_)
        if (held.live) due.emplace_back(storage, held.epoch);
    }
    if (due.empty()) continue;
    // The database may make a statement wait (another replica's write): off the I/O threads.
    auto renew_all = [this, due, ttl_ms] {
      std::vector<std::pair<std::string, bool>> outcome;
      for (const auto& [storage, epoch] : due) {
        bool renewed = false;
        try {
          renewed = store_.renew(storage, settings_.replica_id, epoch, now_ms(), ttl_ms);
        } catch (const std::exception& e) {
          spdlog::warn("lease: renewing container storage {}: {}", storage, e.what());
          continue;  // not known lost: tried again next round, the lease runs out meanwhile
        }
        outcome.emplace_back(storage, renewed);
      }
      return outcome;
    };
    const auto attempted = Clock::now();
    auto outcome = co_await run_blocking(std::move(renew_all));
    std::vector<std::string> lost;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [storage, renewed] : outcome) {
        auto it = held_.find(storage);
        if (it == held_.end() || !it->second.live) continue;
        if (renewed) {
          it->second.confirmed_at = attempted;
        } else {
          spdlog::warn("lease: container storage {} was taken over (epoch {} is gone); this replica stops serving it",
                       storage, it->second.epoch);
          held_.erase(it);
          lost.push_back(storage);
        }
      }
    }
    if (on_lost_)
      for (const auto& storage : lost) on_lost_(storage);
  }
}

}  // namespace sandboxd::cluster
