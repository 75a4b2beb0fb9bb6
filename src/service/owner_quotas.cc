#include "service/owner_quotas.h"

#include <algorithm>

#include "base/blocking.h"
#include "ops/metrics.h"

namespace sandboxd::service {
namespace {

ApiError stored_bytes_refusal(uint64_t limit) {
  ops::metrics().execution_rejected("403", "stored_bytes_quota");
  return ApiError::permission("Storage quota reached: this owner's files may take at most " +
                              std::to_string(limit) +
                              " bytes (quotas.storedBytesPerOwner); delete some files first");
}

}  // namespace

OwnerQuotas::UploadCharge::UploadCharge(OwnerQuotas& quotas, std::string owner, uint64_t limit,
                                        uint64_t stored, uint64_t replaced, int64_t committed_at)
    : quotas_(quotas),
      owner_(std::move(owner)),
      limit_(limit),
      stored_(stored),
      replaced_(replaced),
      committed_at_begin_(committed_at) {}

OwnerQuotas::UploadCharge::~UploadCharge() {
  if (committed_ || charged_ == 0) return;
  std::lock_guard lock(quotas_.mutex_);
  quotas_.uploads_[owner_].in_flight -= charged_;
}

bool OwnerQuotas::UploadCharge::fits(const OwnerUploads& owner, uint64_t bytes) const {
  // What the owner holds now: the metadata as it was, what uploads committed since
  // added, and every body still arriving (this one included), less the version this
  // upload replaces.
  if (limit_ == 0) return true;
  const int64_t since = owner.committed - committed_at_begin_;
  const int64_t used =
      static_cast<int64_t>(stored_ - replaced_) + since + static_cast<int64_t>(owner.in_flight);
  return used + static_cast<int64_t>(bytes) <= static_cast<int64_t>(limit_);
}

Result<void> OwnerQuotas::UploadCharge::add(uint64_t bytes) {
  received_ += bytes;
  if (received_ <= charged_) return {};  // within the size the request declared
  const uint64_t more = received_ - charged_;
  std::lock_guard lock(quotas_.mutex_);
  OwnerUploads& owner = quotas_.uploads_[owner_];
  if (!fits(owner, more)) return stored_bytes_refusal(limit_);
  owner.in_flight += more;
  charged_ += more;
  return {};
}

void OwnerQuotas::UploadCharge::committed() {
  std::lock_guard lock(quotas_.mutex_);
  OwnerUploads& owner = quotas_.uploads_[owner_];
  owner.in_flight -= charged_;
  owner.committed += static_cast<int64_t>(received_) - static_cast<int64_t>(replaced_);
  committed_ = true;
}

boost::asio::awaitable<OwnerQuotas::StoredBytes> OwnerQuotas::stored_bytes(store::Metadata& metadata,
                                                                           uint64_t limit,
                                                                           std::string owner) {
  StoredBytes out{owner, limit, 0, 0};
  if (out.limit == 0) co_return out;
  {
    // Uploads committed from here on are counted by the charge (committed_at), those
    // before by the query: the mark is taken first, so that none is missed.
    std::lock_guard lock(mutex_);
    out.committed_at = uploads_[owner].committed;
  }
  auto query = [&metadata, &owner] { return metadata.owner_bytes(owner); };
  out.stored = co_await run_blocking(std::move(query));
  co_return out;
}

Result<std::unique_ptr<OwnerQuotas::UploadCharge>> OwnerQuotas::begin_upload(
    const StoredBytes& owner, store::Metadata& metadata, const std::string& storage, const std::string& path,
    std::optional<uint64_t> declared) {
  uint64_t replaced = 0;
  if (owner.limit > 0)
    if (auto previous = metadata.find_file(storage, path)) replaced = std::min(previous->size, owner.stored);
  std::unique_ptr<UploadCharge> charge(
      new UploadCharge(*this, owner.owner, owner.limit, owner.stored, replaced, owner.committed_at));
  if (owner.limit == 0) return charge;
  // A body announced larger than the room left is refused before a byte is read; one
  // that fits holds its whole size from here. Were it charged only as it arrives,
  // concurrent uploads that together pass the quota could each be refused part way
  // through, none landing though one would fit; charged up front, the first ones that
  // fit go on and the rest are refused at once.
  std::lock_guard lock(mutex_);
  OwnerUploads& uploads = uploads_[owner.owner];
  if (!charge->fits(uploads, declared.value_or(0))) return stored_bytes_refusal(owner.limit);
  uploads.in_flight += declared.value_or(0);
  charge->charged_ = declared.value_or(0);
  return charge;
}

Result<void> OwnerQuotas::room_for_one_more(uint64_t have, uint64_t cap, const char* what, const char* key,
                                            const char* reason) {
  if (cap == 0 || have < cap) return {};
  ops::metrics().execution_rejected("403", reason);
  return ApiError::permission("Quota reached: this owner has " + std::to_string(have) + " " + what + " (" +
                              key + " is " + std::to_string(cap) + "); delete some first");
}

}  // namespace sandboxd::service
