// Per-owner quotas on what an owner keeps (quotas.* in the configuration): the bytes of
// its files in every container (uploads and outputs, not only each container's volume),
// its chat threads, its custom skills and their versions. Sized from the metadata (one
// indexed query, never a walk of the disk); past a quota the answer is 403
// permission_error naming the key, as for quotas.containersPerOwner, and the refusal is
// counted in /metrics (sandboxd_executions_rejected_total, by reason).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/error.h"
#include "ops/config.h"
#include "store/metadata.h"

namespace sandboxd::service {

class OwnerQuotas {
  struct OwnerUploads {
    uint64_t in_flight = 0;  // bytes received by uploads not yet committed
    int64_t committed = 0;   // bytes uploads committed added to the metadata (since start)
  };

 public:
  // One upload's charge against its owner's stored bytes while its body streams in.
  // A declared size counts from the start, bytes past it as they arrive, so concurrent
  // uploads of one owner cannot together pass the quota; the charge ends with the object.
  class UploadCharge {
   public:
    ~UploadCharge();
    UploadCharge(const UploadCharge&) = delete;
    UploadCharge& operator=(const UploadCharge&) = delete;
    // `bytes` more of the body; 403 when they would take the owner past the quota (the
    // caller stops reading and drops the partial file).
    Result<void> add(uint64_t bytes);
    // The body is in place (its record written): it now counts in the metadata.
    void committed();

   private:
    friend class OwnerQuotas;
    bool fits(const OwnerUploads& owner, uint64_t bytes) const;
    UploadCharge(OwnerQuotas& quotas, std::string owner, uint64_t limit, uint64_t stored, uint64_t replaced,
                 int64_t committed_at);
    OwnerQuotas& quotas_;
    std::string owner_;
    uint64_t limit_;
    uint64_t stored_;             // the owner's bytes in the metadata when measured, minus...
    uint64_t replaced_;           // ...the previous version of the key, which the upload replaces
    int64_t committed_at_begin_;  // the owner's committed uploads' count when measured
    uint64_t charged_ = 0;        // counted in the owner's in_flight: the declared size, or more
    uint64_t received_ = 0;       // the body's bytes so far (add is called by one thread at a time)
    bool committed_ = false;
  };

  // What an owner stores now: its files' bytes in the metadata (an aggregate query, run
  // on the blocking pool), and where its committed uploads' count stood then.
  struct StoredBytes {
    std::string owner;
    uint64_t limit = 0;  // quotas.storedBytesPerOwner (0: none; nothing is queried)
    uint64_t stored = 0;
    int64_t committed_at = 0;
  };
  // `limit`: quotas.storedBytesPerOwner. (Parameters by value: the coroutine starts
  // when awaited.)
  boost::asio::awaitable<StoredBytes> stored_bytes(store::Metadata& metadata, uint64_t limit,
                                                   std::string owner);
  // Starts charging an upload to `path` of container storage `storage`, from what
  // `stored_bytes` found. `declared`: the body's size when the request says it (refused
  // at once when it cannot fit). With no quota it refuses nothing.
  Result<std::unique_ptr<UploadCharge>> begin_upload(const StoredBytes& owner, store::Metadata& metadata,
                                                     const std::string& storage, const std::string& path,
                                                     std::optional<uint64_t> declared);

  // Whether the owner, holding `have` of something, may make one more: 403 naming `key`
  // (e.g. "quotas.threadsPerOwner") at `cap` (0: no cap). `what` names the things
  // ("threads"), `reason` labels the refusal in the metrics.
  static Result<void> room_for_one_more(uint64_t have, uint64_t cap, const char* what, const char* key,
                                        const char* reason);
  // Held from a count to the insert that follows it, so that concurrent creations of one
  // owner cannot pass a cap together.
  std::mutex& creation_mutex() { return creation_mutex_; }

 private:
  std::mutex mutex_;
  std::map<std::string, OwnerUploads> uploads_;  // every owner that uploaded (a few numbers each)
  std::mutex creation_mutex_;
};

}  // namespace sandboxd::service
