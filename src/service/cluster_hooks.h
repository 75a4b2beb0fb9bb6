// What the container service needs of the cluster's part (src/cluster/): this replica's
// container leases and each container's copy in the sessions bucket. Interfaces here,
// implementations there: the service builds, and reads, without the cluster, and a
// single host sets neither (every call site checks for null).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "store/lease_store.h"
#include "store/metadata.h"

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

// One uploaded body on its way to the bucket while it streams to the local file
// (cluster/bucket_upload.h): the bytes are appended as they arrive, full parts sent
// between chunks, the object completed before the local file is committed.
class BucketObjectUpload {
 public:
  virtual ~BucketObjectUpload() = default;
  // The object's key in the bucket (its manifest row names it).
  virtual const std::string& key() const = 0;
  // Takes the next bytes (synchronous: called from the body reader).
  virtual void append(std::string_view data) = 0;
  // Sends what is ready to go: awaited after every chunk of the body.
  virtual boost::asio::awaitable<Result<void>> drain() = 0;
  // The rest, and the object is complete in the bucket.
  virtual boost::asio::awaitable<Result<void>> finish() = 0;
  // Drops whatever was sent: nothing stays in the bucket.
  virtual boost::asio::awaitable<void> discard() = 0;
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
  // An upload's body streamed to the bucket as it arrives (`declared_size`: the body's
  // length when the request announced it), and its manifest row once the local file is
  // committed (may throw store::FencedError, as every write of the manifest).
  virtual std::unique_ptr<BucketObjectUpload> begin_upload(const Container& container,
                                                           boost::asio::any_io_executor executor,
                                                           std::optional<uint64_t> declared_size) = 0;
  virtual void commit_upload(Container& container, const store::FileRecord& record,
                             const std::string& object_key) = 0;
  // Files removed through the API: their rows and objects go, before the answer.
  virtual void forget_files(Container& container, const std::vector<std::string>& paths) = 0;
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

// E2B's snapshots (e2b/service/snapshots.h) in the sessions bucket: a snapshot taken
// through one replica is made into sandboxes, listed and deleted through any, and
// outlives the replica that took it. Its objects are written before its record, and
// removed after it: a record always names a complete copy.
class SnapshotBucket {
 public:
  virtual ~SnapshotBucket() = default;
  // Stores the folder ContainerSnapshots::capture_state filled as the snapshot `id` of
  // `owner`; complete in the bucket when this succeeds, nothing of it left when it
  // fails (503 when the bucket cannot take it).
  virtual boost::asio::awaitable<Result<void>> upload(std::string owner, std::string id,
                                                      std::string folder) = 0;
  // The snapshot's state back into `folder` (made here; it must not exist), as
  // capture_state left it (ContainerSnapshots::seed_state reads it). 503 when the bucket
  // cannot give it.
  virtual boost::asio::awaitable<Result<void>> download(std::string owner, std::string id,
                                                        std::string folder) = 0;
  // Every object of the snapshot goes (a failure is logged: what stays is nobody's).
  virtual boost::asio::awaitable<void> remove(std::string owner, std::string id) = 0;
};

}  // namespace sandboxd::service
