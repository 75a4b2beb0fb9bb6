#include "api/owner_quotas.h"

#include <algorithm>

#include "ops/metrics.h"

namespace sandboxd::api {
namespace {

ApiError stored_bytes_refusal(uint64_t limit) {
  ops::metrics().execution_rejected("403", "stored_bytes_quota");
  return ApiError::permission("Storage quota reached: this owner's files may take at most " + std::to_string(limit) +
                              " bytes (quotas.storedBytesPerOwner); delete some files first");
}

}  // namespace

OwnerQuotas::UploadCharge::UploadCharge(OwnerQuotas& quotas, std::string owner, uint64_t limit, uint64_t stored,
                                        uint64_t replaced)
    : quotas_(quotas), owner_(std::move(owner)), limit_(limit), stored_(stored), replaced_(replaced) {}

OwnerQuotas::UploadCharge::~UploadCharge() {
  if (!counted_) return;
  std::lock_guard lock(quotas_.mutex_);
  auto it = quotas_.uploads_.find(owner_);
  if (it == quotas_.uploads_.end()) return;
  if (!committed_) it->second.in_flight -= charged_;
  if (--it->second.active == 0) quotas_.uploads_.erase(it);
}

bool OwnerQuotas::UploadCharge::fits(const OwnerUploads& owner, uint64_t bytes) const {
  // What the owner holds now: the metadata as it was, what uploads committed since
  // added, and every body still arriving (this one included), less the version this
  // upload replaces.
  if (limit_ == 0) return true;
  const int64_t since = owner.committed - committed_at_begin_;
  const int64_t used = static_cast<int64_t>(stored_ - replaced_) + since + static_cast<int64_t>(owner.in_flight);
  return used + static_cast<int64_t>(bytes) <= static_cast<int64_t>(limit_);
}

Result<void> OwnerQuotas::UploadCharge::add(uint64_t bytes) {
  std::lock_guard lock(quotas_.mutex_);
  OwnerUploads& owner = quotas_.uploads_[owner_];
  if (!fits(owner, bytes)) return stored_bytes_refusal(limit_);
  owner.in_flight += bytes;
  charged_ += bytes;
  return {};
}

void OwnerQuotas::UploadCharge::committed() {
  std::lock_guard lock(quotas_.mutex_);
  OwnerUploads& owner = quotas_.uploads_[owner_];
  owner.in_flight -= charged_;
  owner.committed += static_cast<int64_t>(charged_) - static_cast<int64_t>(replaced_);
  committed_ = true;
}

Result<std::unique_ptr<OwnerQuotas::UploadCharge>> OwnerQuotas::begin_upload(
    store::Metadata& metadata, const ops::Config& config, const std::string& owner, const std::string& storage,
    const std::string& path, std::optional<uint64_t> declared) {
  const uint64_t limit = config.stored_bytes_per_owner;
  uint64_t stored = 0, replaced = 0;
  if (limit > 0) {  // (0: no quota; the charge then refuses nothing)
    stored = metadata.owner_bytes(owner);
    if (auto previous = metadata.find_file(storage, path)) replaced = std::min(previous->size, stored);
  }
  std::unique_ptr<UploadCharge> charge(new UploadCharge(*this, owner, limit, stored, replaced));
  std::lock_guard lock(mutex_);
  OwnerUploads& uploads = uploads_[owner];
  ++uploads.active;
  charge->committed_at_begin_ = uploads.committed;
  // A body announced larger than the room left is refused before a byte is read (the
  // charge's destructor takes the lock: it goes after this block).
  if (!charge->fits(uploads, declared.value_or(0))) {
    Result<std::unique_ptr<UploadCharge>> refused = stored_bytes_refusal(limit);
    --uploads.active;
    if (uploads.active == 0) uploads_.erase(owner);
    charge->counted_ = false;  // nothing left to release
    return refused;
  }
  return charge;
}

Result<void> OwnerQuotas::room_for_one_more(uint64_t have, uint64_t cap, const char* what, const char* key,
                                            const char* reason) {
  if (cap == 0 || have < cap) return {};
  ops::metrics().execution_rejected("403", reason);
  return ApiError::permission("Quota reached: this owner has " + std::to_string(have) + " " + what + " (" + key +
                              " is " + std::to_string(cap) + "); delete some first");
}

}  // namespace sandboxd::api
