// A container's life here (container_lifecycle.cc): opening it (its record, its lease,
// its storage), starting its sandbox under the capacity policy, stopping it (idle,
// quota, restart, a lease lost), removing it, draining and shutting down, and its
// activity (touch). Disk, database, lease and mount work runs on the blocking or store
// pool, never on an I/O thread and never under the registry's lock.
//
// Owns the idle reaper (its strand and timer), the shutting-down flag and touch()'s
// queued writes; everything else it uses is the service's (ContainerParts). A
// container's sandbox (its `on_strand` part) is started and stopped on the container's
// strand only: ensure_sandbox and stop_on_strand run there, everything else hops.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "service/container.h"
#include "service/container_memory.h"
#include "service/container_parts.h"
#include "store/metadata.h"

namespace sandboxd::service {

class ContainerLifecycle {
 public:
  ContainerLifecycle(ContainerParts& parts, ContainerMemory& memory);
  // Waits for touch()'s queued writes (they use the metadata, destroyed after this).
  ~ContainerLifecycle();
  ContainerLifecycle(const ContainerLifecycle&) = delete;
  ContainerLifecycle& operator=(const ContainerLifecycle&) = delete;

  // The container (owner, id); with `create`, made if missing. 404 for a missing (or
  // another owner's) container. An open container (with no lease to confirm) at once;
  // otherwise this request opens it off the I/O threads (the database, the lease, the
  // volume's mount: on the store pool with PostgreSQL, on the blocking pool with
  // SQLite) while other requests for the same container wait for that outcome without
  // holding a thread, and requests for other containers wait for nothing.
  asio::awaitable<Result<std::shared_ptr<Container>>> async_open(std::string owner, std::string id,
                                                                 bool create);
  // list() as a store call.
  asio::awaitable<std::vector<store::ContainerRecord>> async_list(std::string owner, size_t limit,
                                                                  std::string after_id);
  std::vector<store::ContainerRecord> list(const std::string& owner, size_t limit,
                                           const std::string& after_id);
  // The container if it is open (its volume mounted) now; nothing is mounted for it.
  std::shared_ptr<Container> find_open(const std::string& owner, const std::string& id) const;
  // The open containers with this id (an operator's `stop` names no owner).
  std::vector<std::shared_ptr<Container>> find_open_any_owner(const std::string& id) const;
  // Every open container (its volume mounted).
  std::vector<std::shared_ptr<Container>> open_containers() const;

  // The running sandbox, started if need be (on the container's strand only). Under the
  // capacity policy (make_room); from the memory a stop kept, else a pre-started
  // sandbox, else a fresh one.
  asio::awaitable<Result<std::shared_ptr<runtime::Sandbox>>> ensure_sandbox(
      std::shared_ptr<Container> container);
  // Starts the container's sandbox now, in the background, as its first command would
  // (quotas and capacity apply; a start that fails is the next command's to report):
  // for a surface whose clients expect a running sandbox once they made one (E2B).
  void start_sandbox_soon(std::shared_ptr<Container> container);
  // `reason` labels the stop in the metrics (api, idle, deleted, restart, shutdown).
  asio::awaitable<void> stop(std::shared_ptr<Container> container, const char* reason = "api");
  // The stop itself (on the container's strand only): after a start under way ends, the
  // memory kept where `reason` keeps it, the sandbox stopped, and what changed flushed to
  // the bucket. The lease stays (stop() lets it go).
  asio::awaitable<void> stop_on_strand(std::shared_ptr<Container> container, const char* reason);
  asio::awaitable<void> remove(std::shared_ptr<Container> container);

  // Refreshes last activity (expires_at rolls). The index's copy is written at most
  // once a second, inline with SQLite, in the background with PostgreSQL (not awaited;
  // the destructor waits for those still queued).
  void touch(Container& container);
  int64_t expires_at(const Container& container) const;

  // The configuration was reloaded: the idle reaper looks again at once, with the TTL
  // (and the interval between its passes) now in force.
  void settings_reloaded();
  struct DrainOutcome {
    size_t released = 0, kept = 0;  // kept: still held (a flush failed)
  };
  // Refuses new containers, lets running commands finish (up to `grace`, then they are
  // cancelled), stops every sandbox and releases every lease; the server keeps running.
  asio::awaitable<DrainOutcome> drain(std::chrono::seconds grace);
  // Stops every sandbox and unmounts every volume (graceful shutdown).
  asio::awaitable<void> shutdown();

  // Cluster mode: another replica took the container over; its sandbox here stops (no
  // flush, no release: this copy is no longer the container's). When the container
  // turns out deleted meanwhile, its mount and local copy go too.
  void lease_lost(const std::string& storage);

 private:
  using Key = ContainerRegistry::Key;
  using Transition = ContainerRegistry::Transition;
  asio::awaitable<Result<std::shared_ptr<Container>>> run_opening(Key key, bool create,
                                                                  std::shared_ptr<Container> open,
                                                                  std::shared_ptr<Transition> transition);
  // What opening does that waits (blocking: a pool thread): confirms the lease of a
  // container open here (`open`), or finds (or makes) and mounts it. Touches no map.
  Result<std::shared_ptr<Container>> open_blocking(const std::string& owner, const std::string& id,
                                                   bool create, const std::shared_ptr<Container>& open);
  // The container was deleted through another replica (this one found its record or
  // lease gone): its sandbox stops, nothing more is flushed, its mount and local copy go.
  asio::awaitable<void> forget_locally(std::shared_ptr<Container> container);
  // Under opensandbox.runtime.resourceQuota, reserves room for one more sandbox, stopping
  // the least recently used idle one if need be; 503 (overloaded) when none is idle.
  // Also keeps each owner under quotas.runningSandboxesPerOwner, stopping that owner's
  // least recently used idle sandbox if need be; 429 (rate limited) when none is idle.
  // The caller releases the reservation (registry.release_room) once its sandbox runs.
  asio::awaitable<Result<void>> make_room(std::shared_ptr<Container> for_container);
  // 503 overloaded_error for an unexpected host failure (the detail goes to the log).
  ApiError host_out_of_something(const std::string& what, const std::exception& e) const;
  // A container that has a record, its storage made ready (blocking).
  Result<std::shared_ptr<Container>> load(const store::ContainerRecord& record);
  // open_blocking() of a container that has a record: its lease, then its volume.
  Result<std::shared_ptr<Container>> open_existing(const store::ContainerRecord& record);
  asio::awaitable<void> reap_idle();
  // Cluster mode: the lease before serving an open container (ensure_local when fresh).
  // `existing`: the container has a record (see LeaseKeeper::claim).
  Result<void> claim_lease(Container& container, bool existing);
  // Cluster mode: the final flush, then the lease goes (kept when the flush fails).
  asio::awaitable<void> flush_and_release(std::shared_ptr<Container> container);
  asio::awaitable<void> check_still_there(std::shared_ptr<Container> container);
  // A stop that holds (ContainerMemory::hold_at): pauses the sandbox in place and sets
  // the hold's end, which checkpoints it. False when it could not be paused (the caller
  // checkpoints it at once). On the container's strand, within its stop's transition.
  asio::awaitable<bool> hold_paused(std::shared_ptr<Container> container, std::chrono::seconds hold,
                                    const char* reason);
  // The next start of a held container: resumes its sandbox. False when it could not (it
  // is then stopped, checkpointed as it is, and the caller starts it from there).
  asio::awaitable<bool> resume_held(std::shared_ptr<Container> container);

  ContainerParts& parts_;
  ContainerMemory& memory_;
  std::atomic<bool> shutting_down_{false};
  // touch()'s PostgreSQL writes still queued (shared with them).
  std::shared_ptr<std::atomic<int>> background_touches_ = std::make_shared<std::atomic<int>>(0);
  // The reaper's pass runs on its strand; a reload or a shutdown wakes it there.
  asio::strand<asio::io_context::executor_type> reaper_strand_;
  asio::steady_timer reaper_timer_;
};

}  // namespace sandboxd::service
