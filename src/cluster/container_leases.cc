#include "cluster/container_leases.h"

#include <spdlog/spdlog.h>
#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <optional>
#include <random>

#include "base/blocking.h"
#include "ops/metrics.h"
#include "store/database.h"

namespace sandboxd::cluster {

using Clock = std::chrono::steady_clock;

ContainerLeases::ContainerLeases(asio::io_context& io, store::LeaseStore& store, Settings settings)
    : io_(io),
      store_(store),
      settings_(std::move(settings)),
      renew_timer_(io),
      pacer_(settings_.takeover_per_second, settings_.takeover_batch),
      takeover_timer_(io) {}

int64_t ContainerLeases::now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ContainerLeases::Holder ContainerLeases::holder_of(const std::string& storage) {
  Holder holder;
  // Held here under a heartbeat confirmed less than leaseSeconds/2 ago: nobody else can
  // have taken it (a takeover waits until leaseSeconds after that heartbeat), so its
  // requests need no read of the leases table, which a migration, a VACUUM FULL or a
  // stuck session may hold locked. Under an older heartbeat, one renewed now under the
  // incarnation that holds it confirms it the same way (a takeover moves the
  // incarnation on first), as claim() does.
  auto held_here = [&] {
    std::lock_guard lock(mutex_);
    auto it = held_.find(storage);
    return it != held_.end() && it->second.live;
  };
  if (held_here() && (confirmed_heartbeat() || (heartbeat() && held_here()))) return holder;
  auto lease = store_.find(storage);
  if (!lease || lease->holder.empty()) return holder;
  if (!lease->live(now_ms())) {
    holder.takeover = lease->holder != settings_.replica_id || lease->holder_incarnation != incarnation();
    return holder;
  }
  if (lease->holder == settings_.replica_id) return holder;
  holder.elsewhere = true;
  holder.holder = lease->holder;
  holder.holder_url = lease->holder_url;
  return holder;
}

int64_t ContainerLeases::ttl_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(settings_.lease).count();
}

store::ReplicaRegistration ContainerLeases::registration() const {
  std::lock_guard lock(mutex_);
  return registration_;
}

bool ContainerLeases::confirmed_heartbeat() const {
  std::lock_guard lock(mutex_);
  return Clock::now() - heartbeat_at_ < settings_.lease / 2;
}

bool ContainerLeases::confirmed(const std::string& storage) const {
  std::lock_guard lock(mutex_);
  auto it = held_.find(storage);
  // Every lease of the incarnation is valid while its heartbeat is: the heartbeat's time
  // is each one's. (An acquire proves the lease row, not the heartbeat's expiry.)
  return it != held_.end() && it->second.live && !it->second.unchecked &&
         Clock::now() - heartbeat_at_ < settings_.lease / 2;
}

std::optional<int64_t> ContainerLeases::cache_epoch(const std::string& storage) const {
  std::lock_guard lock(mutex_);
  auto it = held_.find(storage);
  if (it == held_.end() || !it->second.live || it->second.unchecked ||
      Clock::now() - heartbeat_at_ >= settings_.lease / 2)
    return std::nullopt;
  return it->second.epoch;
}

void ContainerLeases::register_replica() {
  auto replica = store_.register_replica(settings_.replica_id, settings_.advertise_url, now_ms(), ttl_ms());
  std::lock_guard lock(mutex_);
  registration_ = replica;
  heartbeat_at_ = Clock::now();
  spdlog::info("lease: replica {} registered, incarnation {}", replica.id, replica.incarnation);
}

bool ContainerLeases::heartbeat() {
  const auto replica = registration();
  const auto attempted = Clock::now();
  if (store_.heartbeat(replica, now_ms(), ttl_ms())) {
    std::lock_guard lock(mutex_);
    if (registration_.incarnation == replica.incarnation) heartbeat_at_ = std::max(heartbeat_at_, attempted);
    return true;
  }
  lost_incarnation(replica.incarnation);
  return false;
}

void ContainerLeases::lost_incarnation(int64_t lost) {
  std::vector<std::string> gone;
  {
    std::lock_guard lock(mutex_);
    if (registration_.incarnation != lost) return;  // another call got here first
    for (auto it = held_.begin(); it != held_.end();) {
      if (it->second.live) {
        gone.push_back(it->first);
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
  }
  spdlog::warn(
      "lease: replica {} incarnation {} is gone (its heartbeat ran out and another replica took over); this "
      "replica stops serving its {} container(s) and registers again",
      settings_.replica_id, lost, gone.size());
  for (const auto& storage : gone) let_go(storage);
  if (on_lost_)
    for (const auto& storage : gone) on_lost_(storage);
  try {
    register_replica();  // what it takes from now on is at the next epoch
  } catch (const std::exception& e) {
    // Tried again at the next heartbeat (which finds the same incarnation gone).
    spdlog::warn("lease: registering replica {} again: {}", settings_.replica_id, e.what());
  }
}

Result<ContainerLeases::Claim> ContainerLeases::claim(const std::string& storage, bool existing_container) {
  const auto started = Clock::now();
  bool held_here = false, recent = false;
  int64_t held_epoch = 0;
  bool unchecked = false;
  {
    std::lock_guard lock(mutex_);
    recent = started - heartbeat_at_ < settings_.lease / 2;
    if (auto it = held_.find(storage); it != held_.end() && it->second.live) {
      held_here = true;
      held_epoch = it->second.epoch;
      unchecked = it->second.unchecked;
      // Held, and the heartbeat confirmed recently: no round trip to the database.
      if (recent) {
        it->second.unchecked = false;
        return Claim{held_epoch, unchecked};
      }
    }
  }
  if (draining_ && !held_here)
    return ApiError::overloaded(
        "This replica is shutting down; try again (another replica takes the container)",
        settings_.retry_after_sec);
  std::optional<store::Lease> lease;
  try {
    // The heartbeat has not been confirmed for a while (the database was slow or away):
    // confirm it first, so that what is served from here on is served under a heartbeat
    // that is known to run for another leaseSeconds.
    if (!recent) {
      const bool renewed = heartbeat();
      std::lock_guard lock(mutex_);
      auto it = held_.find(storage);
      if (held_here && it == held_.end()) held_here = false;  // gone with the incarnation
      // Renewed under the incarnation that holds it: nobody took it (a takeover moves
      // the incarnation on first), so it is served as under a recent heartbeat, with no
      // read of the leases table (which another session may hold locked).
      if (renewed && held_here && it->second.live && it->second.epoch == held_epoch) {
        it->second.unchecked = false;
        return Claim{held_epoch, unchecked};
      }
    }
    lease = store_.acquire(storage, registration(), now_ms(), existing_container);
  } catch (const store::db::TimeoutError& e) {
    // Another session holds the lease row (a replica paused inside a write, or cut off
    // mid-transaction): this container waits until the database ends that session;
    // nothing else here waits with it.
    spdlog::warn("lease: container storage {}: the lease row is held by another session: {}", storage,
                 e.what());
    return ApiError::overloaded("The container's lease is held up in the database; try again shortly",
                                settings_.retry_after_sec);
  }
  if (!lease && existing_container && !store_.find(storage)) {
    {
      std::lock_guard lock(mutex_);
      held_.erase(storage);
    }
    let_go(storage);
    return ApiError::not_found("Container not found");  // deleted meanwhile (through another replica)
  }
  if (!lease) {
    {
      std::lock_guard lock(mutex_);
      if (held_here) held_.erase(storage);  // another replica has it now
    }
    let_go(storage);
    return ApiError::overloaded("The container is moving to another replica; try again shortly",
                                settings_.retry_after_sec);
  }
  std::lock_guard lock(mutex_);
  const bool fresh = !held_here || unchecked || held_epoch != lease->epoch;
  held_[storage] = Held{lease->epoch, true, false};
  if (fresh) spdlog::info("lease: took container storage {} at epoch {}", storage, lease->epoch);
  return Claim{lease->epoch, fresh};
}

ContainerLeases::ClaimTally ContainerLeases::claim_each(const std::vector<std::string>& storages) {
  ClaimTally tally;
  for (const auto& storage : storages) {
    if (claim(storage, /*existing_container=*/false))
      ++tally.held;
    else
      ++tally.refused;
  }
  return tally;
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
  let_go(storage);
  const bool released = store_.release(storage, settings_.replica_id, epoch);
  if (released) spdlog::info("lease: released container storage {} (epoch {})", storage, epoch);
  return released;
}

void ContainerLeases::drop(const std::string& storage, bool deleted, bool lost) {
  {
    std::lock_guard lock(mutex_);
    held_.erase(storage);
  }
  let_go(storage);
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

void ContainerLeases::start() {
  asio::co_spawn(io_, heartbeat_loop(), asio::detached);
  asio::co_spawn(io_, takeover_loop(), asio::detached);
}

void ContainerLeases::stop() {
  stopped_ = true;
  asio::post(renew_timer_.get_executor(), [this] {
    renew_timer_.cancel();
    takeover_timer_.cancel();
  });
}

void ContainerLeases::set_draining() {
  if (draining_.exchange(true)) return;
  asio::post(takeover_thread_, [this] {
    std::vector<std::pair<std::string, int64_t>> untouched;
    {
      std::lock_guard lock(mutex_);
      for (auto& [storage, lease] : held_)
        if (lease.live && lease.unchecked) {
          lease.live = false;  // the epoch stays for the fence, as after any release
          untouched.emplace_back(storage, lease.epoch);
        }
    }
    for (const auto& entry : untouched) let_go(entry.first);
    size_t released = 0;
    try {
      for (const auto& [storage, epoch] : untouched)
        if (store_.release(storage, settings_.replica_id, epoch)) ++released;
    } catch (const std::exception& e) {  // the rest run out with this replica's heartbeat
      spdlog::warn("lease: releasing the containers taken over and never used: {}", e.what());
    }
    if (!untouched.empty())
      spdlog::info("lease: released {} container(s) taken over and never used here", released);
  });
}

Clock::duration ContainerLeases::heartbeat_interval() const {
  return std::max<Clock::duration>(settings_.lease / 3, std::chrono::milliseconds(200));
}

asio::awaitable<bool> ContainerLeases::takeover_turn() {
  const auto turn = pacer_.reserve(Clock::now(), kTakeoverWait);
  if (!turn) co_return false;
  ops::metrics().lease_taken_over(ops::Metrics::TakeoverBy::request, 1);
  if (*turn > Clock::now()) {
    asio::steady_timer wait(co_await asio::this_coro::executor, *turn);
    boost::system::error_code ec;
    co_await wait.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return true;
}

ContainerLeases::TakeoverRound ContainerLeases::take_over_round() {
  TakeoverRound round;
  if (stopped_ || draining_) return round;
  std::lock_guard guard(takeover_mutex_);
  const auto rows = store_.expired_replicas(settings_.replica_id, now_ms());
  const auto read_at = Clock::now();
  {
    // A replica that cannot renew its own heartbeat may be the one cut off: it judges
    // nobody. Whatever it saw meanwhile is forgotten, so a replica is found dead only
    // after a stretch of time all of which this one's heartbeat was confirmed.
    std::lock_guard lock(mutex_);
    if (read_at - heartbeat_at_ >= settings_.lease / 2) {
      expired_.clear();
      return round;
    }
  }
  // Dead: its row stayed run out for 2 x leaseSeconds while this replica's heartbeat
  // was renewed (moved on meanwhile, by a request's takeover or another survivor's,
  // is the same stretch; registered again ends it). A live replica that the database
  // kept waiting (a stall longer than its heartbeat, which stalls every replica alike)
  // renews within one heartbeat interval of the database answering again, well inside
  // that stretch, so a stall alone moves nothing; and a replica that was only paused,
  // and comes back within it, registers again and takes back what no request moved.
  // Nothing is urgent here: a container somebody asks for moves with the request.
  std::map<std::string, Expired> seen;
  std::optional<store::ReplicaRow> dead;
  for (const auto& row : rows) {
    if (auto done = taken_over_.find(row.id);
        done != taken_over_.end() && done->second == std::pair{row.incarnation, row.expires_at_ms})
      continue;
    Expired entry{row.incarnation, row.expires_at_ms, read_at};
    if (auto it = expired_.find(row.id);
        it != expired_.end() &&
        ((it->second.incarnation == row.incarnation && it->second.expires_at_ms == row.expires_at_ms) ||
         (row.expires_at_ms == 0 && row.incarnation > it->second.incarnation)))
      entry.since = it->second.since;
    if (!dead && read_at - entry.since >= 2 * settings_.lease) dead = row;
    seen[row.id] = entry;
  }
  expired_ = std::move(seen);
  round.watching = !expired_.empty();
  if (!dead) return round;
  round.dead = true;
  const int claims = pacer_.take_free(Clock::now(), settings_.takeover_batch);
  if (claims == 0) return round;  // requests for containers being taken over used them
  const auto taken = store_.take_over(registration(), *dead, now_ms(), claims);
  pacer_.give_back(claims - static_cast<int>(taken.size()));
  {
    std::lock_guard lock(mutex_);
    for (const auto& lease : taken) held_[lease.storage] = Held{lease.epoch, true, /*unchecked=*/true};
  }
  round.taken = taken.size();
  ops::metrics().lease_taken_over(ops::Metrics::TakeoverBy::background, taken.size());
  // Its row now has the next incarnation (moved on by this replica or another).
  const int64_t moved_on = dead->expires_at_ms != 0 ? dead->incarnation + 1 : dead->incarnation;
  if (!taken.empty())
    spdlog::info("lease: took {} container(s) of replica {} over (its heartbeat ran out)", taken.size(),
                 dead->id);
  if (static_cast<int>(taken.size()) < claims) {
    // None left (or the last few are being taken by another replica this moment): done
    // with this incarnation of it.
    taken_over_[dead->id] = {moved_on, 0};
    expired_.erase(dead->id);
    round.dead = false;
    spdlog::info("lease: every container of replica {} is taken over", dead->id);
  }
  return round;
}

asio::awaitable<void> ContainerLeases::takeover_loop() {
  // The rounds of the replicas are spread by jitter; while a dead replica has
  // containers left, one round each time the pacer has refilled a batch.
  std::minstd_rand random(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.75, 1.25);
  const auto interval = heartbeat_interval();
  const auto batch_interval = std::clamp<Clock::duration>(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
          settings_.takeover_batch / std::max(0.001, settings_.takeover_per_second))),
      std::chrono::milliseconds(20), interval);
  Clock::duration next = interval;
  while (!stopped_) {
    takeover_timer_.expires_after(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(next) * jitter(random)));
    boost::system::error_code ec;
    co_await takeover_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (stopped_) break;
    auto round = [this] {
      try {
        return take_over_round();
      } catch (const std::exception& e) {
        spdlog::warn("lease: taking over the containers of a replica whose heartbeat ran out: {}", e.what());
        return TakeoverRound{};
      }
    };
    const TakeoverRound done = co_await run_on(takeover_thread_, std::move(round));
    next = done.dead ? batch_interval : done.watching ? interval / 2 : interval;
  }
}

asio::awaitable<void> ContainerLeases::heartbeat_loop() {
  const auto interval = heartbeat_interval();
  while (!stopped_) {
    renew_timer_.expires_after(interval);
    boost::system::error_code ec;
    co_await renew_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (stopped_) break;
    // A thread of its own: the heartbeat never queues behind the blocking pool's work
    // (a takeover's claims, file listings), which a slow database makes pile up.
    auto beat = [this] {
      try {
        heartbeat();
      } catch (const std::exception& e) {
        // Not known lost: tried again next round; the heartbeat runs out meanwhile.
        spdlog::warn("lease: heartbeat of replica {}: {}", settings_.replica_id, e.what());
      }
      return 0;
    };
    co_await run_on(heartbeat_thread_, std::move(beat));
  }
}

}  // namespace sandboxd::cluster
