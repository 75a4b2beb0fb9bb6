// ContainerLifecycle (container_lifecycle.h): a container's life here, from its opening
// to its removal, and the idle reaper.
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>

#include "base/blocking.h"
#include "base/ids.h"
#include "ops/logging.h"
#include "ops/metrics.h"
#include "service/container_lifecycle.h"
#include "service/container_service.h"
#include "service/egress_options.h"
#include "service/host_space.h"
#include "service/reaper_policy.h"
#include "service/sandbox_credentials.h"
#include "service/side_by_side.h"
#include "service/store_call.h"

namespace sandboxd::service {
namespace {

namespace fs = std::filesystem;

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Ends a transition however the coroutine that runs it leaves.
struct TransitionEnd {
  std::function<void()> end;
  ~TransitionEnd() { end(); }
};

}  // namespace

ContainerLifecycle::ContainerLifecycle(ContainerParts& parts, ContainerMemory& memory)
    : parts_(parts),
      memory_(memory),
      reaper_strand_(asio::make_strand(parts.io)),
      reaper_timer_(reaper_strand_) {
  asio::co_spawn(reaper_strand_, reap_idle(), asio::detached);
}

ContainerLifecycle::~ContainerLifecycle() {
  // touch()'s queued writes use the metadata, which the owner destroys after this.
  for (int queued = background_touches_->load(); queued > 0; queued = background_touches_->load())
    background_touches_->wait(queued);
}

asio::awaitable<Result<std::shared_ptr<Container>>> ContainerLifecycle::async_open(std::string owner,
                                                                                   std::string id,
                                                                                   bool create) {
  if (!ContainerService::valid_id(id))
    co_return ApiError::invalid_request("Invalid container id: must be 1-128 characters of [A-Za-z0-9._:-]");
  const Key key{owner, id};
  for (;;) {
    if (shutting_down_)
      co_return ApiError::overloaded("The server is shutting down", parts_.settings()->retry_after_sec);
    // The common case, a container in use here (its lease confirmed lately): no
    // database call, no hop.
    auto ready = [this](const Container& open) {
      return !parts_.leases || parts_.leases->confirmed(open.storage);
    };
    auto [open, transition, ours] = parts_.registry.begin_opening(key, create, ready);
    if (!transition) co_return open;
    if (ours) co_return co_await run_opening(key, create, std::move(open), std::move(transition));
    co_await ContainerRegistry::await_end(transition);
    if (!transition->outcome) continue;  // it was closing: look again
    const auto& outcome = *transition->outcome;
    // An opening that could not make it says nothing to a request that may.
    if (!outcome && outcome.error().kind == ErrorKind::not_found && create && !transition->create) continue;
    co_return outcome;
  }
}

void ContainerLifecycle::touch(Container& container) {
  int64_t now = now_seconds();
  int64_t previous = container.last_used_at.exchange(now);
  // The index only needs second resolution; skip the write within the same second.
  if (previous == now) return;
  if (parts_.metadata.backend() == store::db::Backend::kSqlite) {
    parts_.metadata.touch_container(container.owner, container.id, now);
    return;
  }
  // A round trip nobody needs to wait for. Two of them may land out of order: the
  // index then says a second earlier, which only the listing's expires_at shows.
  // The count outlives this service (the write holds it): the destructor may return
  // the moment it reaches zero, before notify_all returns.
  ++*background_touches_;
  auto write = [&metadata = parts_.metadata, queued = background_touches_, owner = container.owner,
                id = container.id, now] {
    struct Done {
      std::atomic<int>& queued;
      ~Done() {
        --queued;
        queued.notify_all();
      }
    } done{*queued};
    metadata.touch_container(owner, id, now);
  };
  store_call_detached(parts_.metadata.backend(), std::move(write));
}

int64_t ContainerLifecycle::expires_at(const Container& container) const {
  return container.last_used_at.load() + parts_.settings()->session_ttl_sec;
}

std::vector<std::shared_ptr<Container>> ContainerLifecycle::open_containers() const {
  return parts_.registry.all();
}

std::vector<std::shared_ptr<Container>> ContainerLifecycle::find_open_any_owner(const std::string& id) const {
  return parts_.registry.with_id(id);
}

std::shared_ptr<Container> ContainerLifecycle::find_open(const std::string& owner,
                                                         const std::string& id) const {
  return parts_.registry.find({owner, id});
}

asio::awaitable<std::vector<store::ContainerRecord>> ContainerLifecycle::async_list(std::string owner,
                                                                                    size_t limit,
                                                                                    std::string after_id) {
  // From memory when the owner's list is held (a single host): no round trip, no hop.
  if (auto held = parts_.metadata.cached_list_containers(owner, limit, after_id)) co_return std::move(*held);
  auto call = [this, &owner, limit, &after_id] { return list(owner, limit, after_id); };
  co_return co_await store_call(parts_.metadata.backend(), std::move(call));
}

std::vector<store::ContainerRecord> ContainerLifecycle::list(const std::string& owner, size_t limit,
                                                             const std::string& after_id) {
  return parts_.metadata.list_containers(owner, limit, after_id);
}

ApiError ContainerLifecycle::host_out_of_something(const std::string& what, const std::exception& e) const {
  // A full disk, no free loop device, mkfs or mount failing: the host is out of
  // something, which a client can only wait out. The detail goes to the log only.
  spdlog::error("{}: {}", what, e.what());
  ops::metrics().execution_rejected("503", "host_resources");
  if (is_disk_full(e))
    return ApiError::overloaded("The host is out of disk space for a new container; try again later",
                                parts_.settings()->retry_after_sec);
  return ApiError::overloaded("The host is out of resources for a new container volume; try again later",
                              parts_.settings()->capacity_retry_after_sec);
}

asio::awaitable<Result<std::shared_ptr<Container>>> ContainerLifecycle::run_opening(
    Key key, bool create, std::shared_ptr<Container> open, std::shared_ptr<Transition> transition) {
  auto work = [this, &key, create, &open] { return open_blocking(key.first, key.second, create, open); };
  Result<std::shared_ptr<Container>> outcome = ApiError::internal();
  std::exception_ptr failure;
  try {
    // With PostgreSQL on the store pool (a connection per thread); with SQLite on the
    // blocking pool: a mount or a volume's folders are never an I/O thread's wait.
    if (parts_.metadata.backend() == store::db::Backend::kPostgres)
      outcome = co_await run_on(store_pool(), std::move(work));
    else
      outcome = co_await run_blocking(std::move(work));
  } catch (...) {
    failure = std::current_exception();
  }
  // An open container whose lease claim found it deleted (through another replica).
  const bool deleted_elsewhere = open && !failure && !outcome && outcome.error().kind == ErrorKind::not_found;
  transition->outcome = failure ? Result<std::shared_ptr<Container>>(ApiError::internal()) : outcome;
  parts_.registry.settle_opening(key, transition, !failure && outcome ? *outcome : nullptr,
                                 deleted_elsewhere ? open : nullptr);
  if (deleted_elsewhere) co_await forget_locally(open);
  if (failure) std::rethrow_exception(failure);
  co_return outcome;
}

Result<std::shared_ptr<Container>> ContainerLifecycle::open_blocking(const std::string& owner,
                                                                     const std::string& id, bool create,
                                                                     const std::shared_ptr<Container>& open) {
  if (open) {  // cluster mode: open here, its lease not confirmed lately
    if (auto claimed = claim_lease(*open, /*existing=*/true); !claimed) {
      if (claimed.error().kind == ErrorKind::not_found)
        return ApiError::not_found("Container not found: " + id);
      return claimed.error();
    }
    return open;
  }
  if (auto record = parts_.metadata.find_container(owner, id)) return open_existing(*record);
  if (!create) return ApiError::not_found("Container not found: " + id);
  // Each container holds a volume image, a loop device and mounts while in use: an
  // owner keeps at most quotas.containersPerOwner of them. Its chat threads without a
  // container yet count too (each was promised one when it was made), so a quota
  // reached by other containers never strands a thread at its first turn.
  if (const uint64_t cap = parts_.settings()->containers_per_owner;
      cap > 0 && parts_.metadata.containers_claimed(owner, id) >= cap) {
    ops::metrics().execution_rejected("403", "containers_quota");
    return ApiError::permission("Container quota reached: this owner has " + std::to_string(cap) +
                                " containers (quotas.containersPerOwner); delete one first");
  }
  store::ContainerRecord record;
  record.owner = owner;
  record.id = id;
  record.storage = "c" + random_hex(20);
  record.created_at = record.last_used_at = now_seconds();
  auto container = std::make_shared<Container>(parts_.io);
  container->owner = owner;
  container->id = id;
  container->storage = record.storage;
  container->created_at = record.created_at;
  container->last_used_at = record.last_used_at;
  container->api_secret = new_api_secret();
  Result<void> prepared = ApiError::internal();
  try {
    prepared = parts_.storage.prepare(*container, /*fresh=*/true,
                                      /*remake_when_missing=*/parts_.durability != nullptr);
  } catch (const std::exception& e) {
    prepared = host_out_of_something("creating container " + id, e);
  }
  if (!prepared) {
    parts_.storage.discard_unmade(*container);  // nothing of a container that could not be made stays behind
    return prepared.error();
  }
  if (parts_.leases)  // before the record: a container this replica may not serve is not made
    if (auto claimed = claim_lease(*container, /*existing=*/false); !claimed) {
      parts_.storage.discard_unmade(*container);
      return claimed.error();
    }
  // The database decides a race: another replica may have created (owner, id) since
  // the lookup above. The first record stays; this replica's fresh storage and its
  // lease go, and the container is opened as the existing one it is (a 503 to retry
  // when the winner serves it: the retry is relayed there).
  const store::ContainerRecord stored = parts_.metadata.create_container(record);
  if (stored.storage != record.storage) {
    spdlog::info("container {} of {} was created by another replica at the same moment; this one's copy goes",
                 id, owner);
    if (parts_.leases) parts_.leases->drop(record.storage, /*deleted=*/true, /*lost=*/false);
    parts_.storage.discard_unmade(*container);
    return open_existing(stored);
  }
  return container;
}

Result<std::shared_ptr<Container>> ContainerLifecycle::open_existing(const store::ContainerRecord& record) {
  std::optional<LeaseKeeper::Claim> claim;  // before anything is mounted for it
  if (parts_.leases) {
    auto claimed = parts_.leases->claim(record.storage, /*existing_container=*/true);
    if (!claimed) {
      if (claimed.error().kind == ErrorKind::not_found)
        return ApiError::not_found("Container not found: " + record.id);  // deleted since it was read
      return claimed.error();
    }
    claim = *claimed;
  }
  Result<std::shared_ptr<Container>> container = ApiError::internal();
  try {
    container = load(record);
  } catch (const std::exception& e) {
    return host_out_of_something("mounting the volume of container " + record.id, e);
  }
  // A lease newly taken: the local copy (if any) may be older than what another
  // replica flushed meanwhile; ensure_local checks it before the first use.
  if (container && claim && claim->fresh && parts_.durability)
    parts_.durability->invalidate_local(**container);
  return container;
}

Result<std::shared_ptr<Container>> ContainerLifecycle::load(const store::ContainerRecord& record) {
  auto container = std::make_shared<Container>(parts_.io);
  container->owner = record.owner;
  container->id = record.id;
  container->storage = record.storage;
  container->created_at = record.created_at;
  container->last_used_at = record.last_used_at;
  container->api_secret = new_api_secret();
  // Its network options as its row keeps them: before its sandbox starts, so that its
  // first connection is checked against them.
  set_egress_options(*container, decode_egress_options(record.egress));
  // Cluster mode: a container another replica made or served may have no local copy
  // here yet; an empty one is made (and filled by ensure_local).
  const bool no_local_copy = parts_.leases && !parts_.storage.has_volume(container->storage);
  if (auto prepared = parts_.storage.prepare(*container, /*fresh=*/no_local_copy,
                                             /*remake_when_missing=*/parts_.durability != nullptr);
      !prepared)
    return prepared.error();
  return container;
}

void ContainerLifecycle::lease_lost(const std::string& storage) {
  const std::shared_ptr<Container> lost = parts_.registry.with_storage(storage);
  if (!lost) return;
  spdlog::warn("container {} of {} is served by another replica now: its sandbox here stops", lost->id,
               lost->owner);
  asio::co_spawn(parts_.io, check_still_there(lost), asio::detached);
  // Its local copy is stale from now on (the new holder writes the manifest): never
  // flush it again. Without this a fenced flush was retried for as long as the process
  // lived (and kept the container from being let go), and had this replica taken the
  // lease back later, a retry landing before ensure_local would have passed the new
  // epoch's fence and put the stale tree over the newer holder's manifest. A later
  // claim restores from the bucket first.
  if (parts_.durability) parts_.durability->invalidate_local(*lost);
  // Its memory (if the stop keeps it) is the new holder's to restore, not this replica's.
  auto stop_here = [this, lost]() -> asio::awaitable<void> {
    co_await stop_on_strand(lost, "lease_lost");
    memory_.lost(*lost);
  };
  asio::co_spawn(lost->strand, std::move(stop_here), asio::detached);
}

asio::awaitable<void> ContainerLifecycle::check_still_there(std::shared_ptr<Container> container) {
  // (A lease lost is also what a delete through another replica looks like from here.)
  auto look_up = [this, &container] {
    return parts_.metadata.find_container(container->owner, container->id);
  };
  std::optional<store::ContainerRecord> record;
  try {
    record = co_await store_call(parts_.metadata.backend(), std::move(look_up));
  } catch (const std::exception& e) {
    spdlog::warn("container {} of {}: looking it up: {}", container->id, container->owner, e.what());
    co_return;  // the next request's claim finds out
  }
  if (record && record->storage == container->storage) co_return;
  spdlog::warn("container {} of {} was deleted through another replica: its mount and local copy here go",
               container->id, container->owner);
  co_await forget_locally(container);
}

asio::awaitable<void> ContainerLifecycle::forget_locally(std::shared_ptr<Container> container) {
  container->deleted = true;  // no flush of it from now on (the flusher and stop skip a deleted container)
  co_await asio::co_spawn(container->strand, stop_on_strand(container, "deleted"), asio::use_awaitable);
  memory_.lost(*container);
  const Key key{container->owner, container->id};
  auto closing = co_await parts_.registry.begin_closing(key, container);
  TransitionEnd end{[this, &key, &closing] { parts_.registry.end(key, closing); }};
  if (parts_.leases) parts_.leases->drop(container->storage, /*deleted=*/false, /*lost=*/false);
  auto discard = [this, &container] { parts_.storage.discard(*container); };
  co_await run_blocking(std::move(discard));
}

Result<void> ContainerLifecycle::claim_lease(Container& container, bool existing) {
  auto claimed = parts_.leases->claim(container.storage, existing);
  if (!claimed) return claimed.error();
  if (claimed->fresh && parts_.durability) parts_.durability->invalidate_local(container);
  return {};
}

asio::awaitable<void> ContainerLifecycle::flush_and_release(std::shared_ptr<Container> container) {
  // The final flush ran as the sandbox stopped (stop_on_strand). A container whose
  // changes are not all in the bucket keeps its lease, and its local copy, until a
  // retried flush succeeds and a later stop lets it go.
  if (parts_.durability && !container->deleted && !parts_.durability->releasable(*container)) {
    spdlog::warn("container {} of {}: its files are not all in the bucket yet; its lease is kept",
                 container->id, container->owner);
    co_return;
  }
  auto release = [this, container] { parts_.leases->release(container->storage); };
  try {
    co_await run_blocking(std::move(release));
  } catch (const std::exception& e) {  // the database: the lease then runs out by itself
    spdlog::error("container {} of {}: releasing its lease: {}", container->id, container->owner, e.what());
  }
}

asio::awaitable<ContainerLifecycle::DrainOutcome> ContainerLifecycle::drain(std::chrono::seconds grace) {
  if (parts_.leases) parts_.leases->set_draining();
  const std::vector<std::shared_ptr<Container>> all = parts_.registry.all();
  // Running commands get the grace period to finish; stopping the sandbox cancels the rest.
  const auto deadline = std::chrono::steady_clock::now() + grace;
  asio::steady_timer pause(parts_.io);
  for (;;) {
    bool busy = false;
    for (const auto& container : all) busy = busy || container->executing.load() > 0;
    if (!busy || std::chrono::steady_clock::now() >= deadline) break;
    pause.expires_after(std::chrono::milliseconds(100));
    co_await pause.async_wait(asio::use_awaitable);
  }
  DrainOutcome outcome;
  const size_t held_before = parts_.leases ? parts_.leases->held().size() : 0;
  for (const auto& container : all) co_await stop(container, "drain");
  outcome.kept = parts_.leases ? parts_.leases->held().size() : 0;
  outcome.released = held_before > outcome.kept ? held_before - outcome.kept : 0;
  co_return outcome;
}

asio::awaitable<Result<void>> ContainerLifecycle::make_room(std::shared_ptr<Container> for_container) {
  for (;;) {
    const auto settings = parts_.settings();
    CapacityLimits limits;
    limits.quota_enabled = settings->quota_enabled;
    limits.quota_pods = settings->quota_pods;
    limits.quota_cpu_millis = settings->quota_cpu_millis;
    limits.quota_memory_bytes = settings->quota_memory_bytes;
    limits.sandbox_cpu_millis = settings->limit_range_enabled ? settings->limit_cpu_millis : 0;
    limits.sandbox_memory_bytes = settings->memory_limit_bytes    ? settings->memory_limit_bytes
                                  : settings->limit_range_enabled ? settings->limit_memory_bytes
                                                                  : 0;
    limits.running_per_owner = settings->running_sandboxes_per_owner;
    std::shared_ptr<Container> victim;
    const CapacityDecision decision = parts_.registry.reserve_room(*for_container, limits, victim);
    switch (decision.kind) {
      case CapacityDecision::Kind::kAdmit:
        co_return Result<void>();  // released by the caller once its sandbox runs (or failed)
      case CapacityDecision::Kind::kRefuseOwner:
        ops::metrics().execution_rejected("429", "owner_sandboxes");
        co_return ApiError::rate_limited(
            "Too many sandboxes of this owner are running (" + std::to_string(decision.owner_running) +
                " of " + std::to_string(limits.running_per_owner) + ", none idle); try again later",
            settings->capacity_retry_after_sec);
      case CapacityDecision::Kind::kRefuseQuota:
        ops::metrics().execution_rejected("503", "quota");
        co_return ApiError::overloaded("The sandbox quota is full (" + std::to_string(decision.running) +
                                           " of " + std::to_string(settings->quota_pods) +
                                           " running, none idle); try again later",
                                       settings->capacity_retry_after_sec);
      case CapacityDecision::Kind::kEvict:
        break;
    }
    spdlog::info("quota: stopping the idle sandbox of container {} ({}) to make room", victim->id,
                 victim->owner);
    co_await stop(victim, "quota");
  }
}

asio::awaitable<Result<std::shared_ptr<runtime::Sandbox>>> ContainerLifecycle::ensure_sandbox(
    std::shared_ptr<Container> container) {
  auto& state = container->on_strand;
  for (;;) {
    if (container->deleted) co_return ApiError::not_found("Container not found: " + container->id);
    // A start, a stop or a snapshot under way first: a sandbox being stopped still runs
    // while it is checkpointed, and is not to be handed out.
    if (state.starting()) {
      co_await state.wait_until_started();
      continue;
    }
    // Held paused by its last stop: it goes on where it was, in milliseconds.
    if (state.held) {
      if (co_await resume_held(container)) co_return state.sandbox;
      continue;
    }
    if (state.sandbox && state.sandbox->running()) co_return state.sandbox;
    container->sandbox_up = false;  // it stopped by itself (PID 1 died)
    if (!parts_.runtime) co_return ApiError::unavailable(parts_.why_unavailable());
    // Room under the quota first (this may stop the least recently used idle sandbox).
    auto room = co_await make_room(container);
    if (!room) co_return room.error();
    struct Release {
      ContainerRegistry& registry;
      const std::string& owner;
      ~Release() { registry.release_room(owner); }
    } release{parts_.registry, container->owner};
    // From here until the start ends, other work of the strand (another execution, a
    // stop) waits for it: each step below may suspend.
    state.begin_starting(container->strand);
    std::string error;
    try {
      // Its memory, when its last stop kept it; else a pre-started sandbox, which only
      // needs the container's folders bound in (mounts: the blocking pool's work).
      // (A restore or a start over a slot records the slot in state.slot, to be given
      // back at the stop.)
      auto claim = [this, &container] { return parts_.pool.claim(container->paths, container->id); };
      if (auto restored = co_await memory_.restore(container)) {
        state.sandbox = restored;
        if (parts_.network) {
          state.link = co_await parts_.network->attach(state.sandbox);
          state.link->bind(container);
        }
        ops::metrics().sandbox_started();
      } else if (auto slot = co_await run_blocking(std::move(claim))) {
        state.slot = slot;
        state.sandbox = slot->sandbox;
        state.sandbox->attach_folders();
        state.link = slot->link;
        if (state.link) state.link->bind(container);
      } else {
        auto started = co_await parts_.start_sandbox(container, "");
        state.slot = std::move(started.slot);
        state.sandbox = std::move(started.sandbox);
        if (parts_.network) {
          state.link = co_await parts_.network->attach(state.sandbox);
          state.link->bind(container);
        }
        ops::metrics().sandbox_started();
      }
      container->sandbox_up = true;
      container->live_sandbox.store(state.sandbox);
      if (parts_.tree_changes) parts_.tree_changes->track(container->storage);
    } catch (const std::exception& e) {
      error = e.what();
      spdlog::error("starting a sandbox for container {} of {}: {}", container->id, container->owner, error);
    }
    state.end_starting();
    if (!error.empty()) {
      ops::metrics().execution_rejected("503", "sandbox_start");
      co_return ApiError::overloaded(
          "The sandbox could not be started (the host may be out of processes, memory "
          "or devices); try again later",
          parts_.settings()->capacity_retry_after_sec);
    }
  }
}

void ContainerLifecycle::start_sandbox_soon(std::shared_ptr<Container> container) {
  if (!parts_.runtime || shutting_down_) return;
  auto start = [this, container]() -> asio::awaitable<void> {
    if (shutting_down_ || container->deleted) co_return;
    co_await ensure_sandbox(container);  // its outcome is the first command's
  };
  asio::co_spawn(container->strand, std::move(start), asio::detached);
}

namespace {

// The hold is over: whatever ends it (a resume, a stop), its timer goes with it.
void end_hold(Container& container) {
  auto& state = container.on_strand;
  state.held = false;
  container.sandbox_held = false;
  if (auto timer = std::move(state.hold_end)) timer->cancel();
}

}  // namespace

asio::awaitable<bool> ContainerLifecycle::hold_paused(std::shared_ptr<Container> container,
                                                      std::chrono::seconds hold, const char* reason) {
  auto& state = container->on_strand;
  try {
    co_await parts_.runtime->pause(state.sandbox);
  } catch (const std::exception& e) {
    ops::metrics().memory_held(false);
    spdlog::warn("container {} of {}: pausing its sandbox in place (it is checkpointed instead): {}",
                 container->id, container->owner, e.what());
    co_return false;
  }
  state.held = true;
  container->sandbox_held = true;
  // A paused sandbox writes nothing: its watches go back to the host's share, as at a stop.
  if (parts_.tree_changes) parts_.tree_changes->forget(container->storage);
  ops::metrics().memory_held(true);
  ops::metrics().sandbox_stopped(reason);
  ops::log_event(spdlog::level::info, "sandbox_held",
                 {{"owner", container->owner},
                  {"container", container->id},
                  {"reason", reason},
                  {"seconds", std::to_string(hold.count())}});
  auto timer = std::make_shared<asio::steady_timer>(container->strand, hold);
  state.hold_end = timer;
  // The hold's end: the checkpoint a stop without a hold would have taken. (A shutdown
  // stops every sandbox, a held one with a checkpoint, before the timers go.)
  auto end = [this, container, timer]() -> asio::awaitable<void> {
    boost::system::error_code ec;
    co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec || shutting_down_ || container->on_strand.hold_end != timer) co_return;
    co_await stop_on_strand(container, "hold_ended");
  };
  asio::co_spawn(container->strand, std::move(end), asio::detached);
  co_return true;
}

asio::awaitable<bool> ContainerLifecycle::resume_held(std::shared_ptr<Container> container) {
  auto& state = container->on_strand;
  state.begin_starting(container->strand);
  const auto started = std::chrono::steady_clock::now();
  std::string failure;
  try {
    co_await parts_.runtime->resume(state.sandbox);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  state.end_starting();
  if (!failure.empty()) {
    spdlog::warn(
        "container {} of {}: resuming its held sandbox (it is checkpointed and restored instead): {}",
        container->id, container->owner, failure);
    co_await stop_on_strand(container, "hold_ended");
    co_return false;
  }
  end_hold(*container);
  container->sandbox_up = true;
  container->live_sandbox.store(state.sandbox);
  if (parts_.tree_changes) parts_.tree_changes->track(container->storage);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ops::metrics().memory_hold_resumed();
  ops::log_event(spdlog::level::info, "sandbox_resumed",
                 {{"owner", container->owner},
                  {"container", container->id},
                  {"ms", std::to_string(static_cast<int64_t>(seconds * 1000))}});
  co_return true;
}

asio::awaitable<void> ContainerLifecycle::stop_on_strand(std::shared_ptr<Container> container,
                                                         const char* reason) {
  auto& state = container->on_strand;
  co_await state.wait_until_started();
  // A held sandbox is stopped for its clients already: another stop they may undo
  // leaves it held as it is.
  const std::chrono::seconds hold = memory_.hold_at(reason);
  if (state.held && hold.count() > 0 && !container->deleted) co_return;
  // From here until the stop ends, the strand's other work (a command, a start, another
  // stop) waits for it as for a start, and no command takes the running sandbox from the
  // fast path: the steps below suspend, and a command run meanwhile in a sandbox being
  // checkpointed would break the checkpoint or be lost with it, and a start during the
  // flush below would take (and remove) the checkpoint the flush is sending. (An E2B
  // sandbox paused at its end time is seen paused, and may be resumed and called, while
  // this runs.)
  container->sandbox_up = false;
  container->live_sandbox.store(nullptr);
  state.begin_starting(container->strand);
  TransitionEnd stopped{[&state] { state.end_starting(); }};
  // Held paused in place instead, when the stop may soon be undone and nothing runs in
  // it now (a command's caller would wait for the resume).
  if (!state.held && hold.count() > 0 && state.sandbox && state.sandbox->running() && !container->deleted &&
      container->executing.load() == 0 && co_await hold_paused(container, hold, reason))
    co_return;
  const bool was_held = state.held;
  end_hold(*container);
  // Its memory first, while it still runs as it was (the checkpoint ends it; a held
  // sandbox is checkpointed paused, and its restore runs on).
  if (state.sandbox && state.sandbox->running() && !container->deleted && memory_.keeps_memory_at(reason))
    co_await memory_.checkpoint(container, state.sandbox);
  // A stopped sandbox writes nothing: its watches go back to the host's share (its next
  // command walks, and watches again).
  if (parts_.tree_changes) parts_.tree_changes->forget(container->storage);
  state.link.reset();  // its listeners close with the sandbox
  if (auto sandbox = std::move(state.sandbox)) {
    co_await sandbox->stop();
    if (!was_held) ops::metrics().sandbox_stopped(reason);  // (a held one was counted at its hold)
  }
  if (auto slot = std::move(state.slot)) {  // its binds come off (mounts: the blocking pool)
    auto release = [this, &slot] { parts_.pool.release(slot); };
    co_await run_blocking(std::move(release));
  }
  // Whatever the reason of the stop, what changed goes to the bucket (a failure keeps
  // the local copy and is retried; the container is not released meanwhile).
  if (parts_.durability) co_await parts_.durability->flush_if_changed(container);
}

asio::awaitable<void> ContainerLifecycle::stop(std::shared_ptr<Container> container, const char* reason) {
  co_await asio::co_spawn(container->strand, stop_on_strand(container, reason), asio::use_awaitable);
  if (parts_.leases) co_await flush_and_release(container);
}

asio::awaitable<void> ContainerLifecycle::remove(std::shared_ptr<Container> container) {
  container->deleted = true;
  co_await stop(container, "deleted");
  memory_.lost(*container);  // a checkpoint of an earlier stop goes with the container
  // Requests for it meanwhile wait, then find it gone (404).
  const Key key{container->owner, container->id};
  auto closing = co_await parts_.registry.begin_closing(key, container);
  TransitionEnd end{[this, &key, &closing] { parts_.registry.end(key, closing); }};
  auto forget_records = [this, &container] {
    parts_.metadata.delete_container(container->owner, container->id);
    if (parts_.leases) parts_.leases->drop(container->storage, /*deleted=*/true, /*lost=*/false);
  };
  co_await store_call(parts_.metadata.backend(), std::move(forget_records));
  if (parts_.durability) co_await parts_.durability->forget(container);
  auto discard = [this, &container] { parts_.storage.discard(*container); };
  co_await run_blocking(std::move(discard));
}

void ContainerLifecycle::settings_reloaded() {
  asio::post(reaper_strand_, [this] { reaper_timer_.cancel(); });
}

asio::awaitable<void> ContainerLifecycle::reap_idle() {
  while (!shutting_down_) {
    // The TTL in force now: a reload changes it, and wakes this wait (settings_reloaded).
    const int64_t ttl = parts_.settings()->session_ttl_sec;
    reaper_timer_.expires_after(std::chrono::seconds(std::clamp<int64_t>(ttl / 4, 1, 30)));
    boost::system::error_code ec;
    co_await reaper_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (shutting_down_) break;
    const int64_t now = now_seconds();
    std::vector<std::shared_ptr<Container>> idle = parts_.registry.all();
    std::erase_if(idle,
                  [&](const auto& container) { return !expired(container->last_used_at.load(), ttl, now); });
    for (const auto& container : idle) {
      // The clock of this moment, not of the pass's start: the stops before this one took
      // time (a checkpoint takes seconds), and a request meanwhile made it recent again.
      if (!stops_idle({container->last_used_at.load(), container->executing.load()}, ttl, now_seconds()))
        continue;
      co_await stop(container, "idle");
    }
    // Unmount volumes nobody holds (the registry is then the only other owner), each as
    // a closing of that container (a request for it meanwhile waits for the unmount,
    // then opens it anew), the unmount itself on the blocking pool.
    for (const auto& container : idle) {
      const Key key{container->owner, container->id};
      auto may = [&](long uses) {
        return may_close({.still_open = true,
                          .in_transition = false,
                          .running = container->takes_room(),
                          .last_used_at = container->last_used_at.load(),
                          .held_elsewhere = uses > 2,  // `idle` and the registry: nobody else
                          .unflushed = parts_.durability && !parts_.durability->releasable(*container)},
                         ttl, now_seconds());
      };
      auto closing = parts_.registry.try_begin_closing(key, container, may);
      if (!closing) continue;
      auto unmount = [this, &container] { return parts_.storage.try_close(*container); };
      const bool unmounted = co_await run_blocking(std::move(unmount));
      if (!unmounted) parts_.registry.reopen(key, container);  // busy: it stays open
      parts_.registry.end(key, closing);
    }
  }
}

asio::awaitable<void> ContainerLifecycle::shutdown() {
  shutting_down_ = true;
  asio::post(reaper_strand_, [this] { reaper_timer_.cancel(); });
  const std::vector<std::shared_ptr<Container>> all = parts_.registry.all();
  // Side by side: one after the other, 40 sandboxes took most of Kubernetes' 30 s grace
  // (each stop waits for its PID 1's namespace to end and its cgroups to go), and a
  // kill -9 at the end of the grace leaves the rest mounted. Each stop is bounded
  // (runtime::kPid1ExitLimit).
  auto stop_one = [this](std::shared_ptr<Container> container) -> asio::awaitable<void> {
    try {
      co_await stop(container, "shutdown");
    } catch (const std::exception& e) {
      spdlog::error("stopping container {} of {} at shutdown: {}", container->id, container->owner, e.what());
    }
  };
  co_await all_of(parts_.io.get_executor(), all, stop_one);
  co_await parts_.pool.shutdown();
  parts_.registry.clear();
  // The unmounts too (each a loop device to detach), on the blocking pool's threads.
  auto close_one = [this](std::shared_ptr<Container> container) -> asio::awaitable<void> {
    auto close = [this, &container] { parts_.storage.close(*container); };
    try {
      co_await run_blocking(std::move(close));
    } catch (const std::exception& e) {
      spdlog::error("closing container {} of {} at shutdown: {}", container->id, container->owner, e.what());
    }
  };
  co_await all_of(parts_.io.get_executor(), all, close_one);
}

}  // namespace sandboxd::service
