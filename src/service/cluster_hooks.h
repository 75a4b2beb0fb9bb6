// What the container service needs of the cluster's part (src/cluster/): this replica's
// container leases and each container's copy in the sessions bucket. Interfaces here,
// implementations there: the service builds, and reads, without the cluster, and a
// single host sets neither (every call site checks for null).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "store/lease_store.h"

namespace sandboxd::service {

struct Container;

// Which replica serves a container: a container is served under this replica's lease.
class LeaseKeeper {
 public:
  virtual ~LeaseKeeper() = default;
  // Taken (or kept) before this replica serves the container. `fresh`: it was not held
  // here a moment ago, so the local copy must be made current. 503 when another replica
  // holds it, or when this replica is draining.
  struct Claim {
    int64_t epoch = 0;
    bool fresh = false;
  };
  // `existing_container`: the container has a record (not one being made); a claim that
  // finds the record gone is a 404 (deleted through another replica). A lease row held
  // by another session past the database's lock timeout is a 503 for this container.
  virtual Result<Claim> claim(const std::string& storage, bool existing_container) = 0;
  // Held here and confirmed recently enough that claim() needs no database.
  virtual bool confirmed(const std::string& storage) const = 0;
  // Gives a held lease up at once (after the final flush). True when it was held.
  virtual bool release(const std::string& storage) = 0;
  // Forgets a lease that is gone: taken over (`lost`), or the container deleted
  // (`deleted`: its row goes too).
  virtual void drop(const std::string& storage, bool deleted, bool lost) = 0;
  // A write met the fence (another replica took the container, or it was deleted): the
  // lease is forgotten and on_lost runs.
  virtual void fenced(const store::FencedError& fenced) = 0;
  virtual std::vector<std::string> held() const = 0;
  // Called (on any thread, no lock held) when this replica finds a lease it held taken
  // over or gone. Set once, before serving.
  virtual void set_on_lost(std::function<void(const std::string& storage)> on_lost) = 0;
  // Refuse new claims from now on (drain, shutdown).
  virtual void set_draining() = 0;
};

// The durable copy of a container in the sessions bucket; the local volume stays the
// working copy.
class BucketCopy {
 public:
  virtual ~BucketCopy() = default;
  // Restores the container from the bucket when its local copy is missing or stale.
  // Cheap once done. 503 (overloaded, Retry-After) when the bucket cannot be read.
  virtual boost::asio::awaitable<Result<void>> ensure_local(std::shared_ptr<Container> container) = 0;
  // The next ensure_local checks the local copy against the bucket again.
  virtual void invalidate_local(Container& container) = 0;
  // Something changed outside a command (an edit, a file deleted through the API).
  virtual void note_change(Container& container) = 0;
  // After a sandbox stopped: a flush if anything changed (a failure is retried).
  virtual boost::asio::awaitable<void> flush_if_changed(std::shared_ptr<Container> container) = 0;
  // Whether the container may be let go (unmounted, lease released): nothing unflushed.
  virtual bool releasable(const Container& container) const = 0;
  // A deleted container: its rows and objects go.
  virtual boost::asio::awaitable<void> forget(std::shared_ptr<Container> container) = 0;
  // Called when a write of the bucket copy met the fence (the lease keeper forgets the
  // lease). Set once, before serving.
  virtual void set_on_fenced(std::function<void(const store::FencedError&)> on_fenced) = 0;
};

}  // namespace sandboxd::service
