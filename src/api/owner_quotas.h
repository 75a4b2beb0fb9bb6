// Per-owner quotas on what an owner keeps (quotas.* in the configuration): the bytes of
// its files in every container (uploads and outputs, not only each container's volume),
// its chat threads, its custom skills and their versions. Sized from the metadata (one
// indexed query, never a walk of the disk); past a quota the answer is 403
// permission_error naming the key, as for quotas.containersPerOwner, and the refusal is
// counted in /metrics (sandboxd_executions_rejected_total, by reason).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/error.h"
#include "ops/config.h"
#include "store/metadata.h"

namespace sandboxd::api {

class OwnerQuotas {
  struct OwnerUploads {
    uint64_t in_flight = 0;  // bytes received by uploads not yet committed
    int64_t committed = 0;   // bytes added to the metadata by uploads committed since
    int active = 0;          // uploads charging now
  };

 public:
  // One upload's charge against its owner's stored bytes while its body streams in.
  // Bytes being received count at once, so concurrent uploads of one owner cannot
  // together pass the quota; the charge ends with the object.
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
    UploadCharge(OwnerQuotas& quotas, std::string owner, uint64_t limit, uint64_t stored, uint64_t replaced);
    OwnerQuotas& quotas_;
    std::string owner_;
    uint64_t limit_;
    uint64_t stored_;     // the owner's bytes in the metadata when the upload began, minus...
    uint64_t replaced_;   // ...the previous version of the key, which the upload replaces
    int64_t committed_at_begin_ = 0;
    uint64_t charged_ = 0;
    bool committed_ = false;
    bool counted_ = true;  // counted among the owner's active uploads
  };

  // Starts charging an upload of `owner` to `path` of container storage `storage`.
  // `declared`: the body's size when the request says it (refused at once when it
  // cannot fit). With quotas.storedBytesPerOwner 0 (no quota) it refuses nothing.
  Result<std::unique_ptr<UploadCharge>> begin_upload(store::Metadata& metadata, const ops::Config& config,
                                                     const std::string& owner, const std::string& storage,
                                                     const std::string& path, std::optional<uint64_t> declared);

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
  std::map<std::string, OwnerUploads> uploads_;  // owners with uploads in progress
  std::mutex creation_mutex_;
};

}  // namespace sandboxd::api
