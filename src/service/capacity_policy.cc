#include "service/capacity_policy.h"

#include <optional>

namespace sandboxd::service {
namespace {

bool idle(const SandboxCandidate& candidate) {
  return candidate.running && !candidate.executing && !candidate.is_requester;
}

// The least recently used idle candidate that `eligible` accepts.
template <typename Eligible>
std::optional<size_t> least_recently_used(std::span<const SandboxCandidate> candidates, Eligible eligible) {
  std::optional<size_t> found;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!idle(candidates[i]) || !eligible(candidates[i])) continue;
    if (!found || candidates[i].last_used_at < candidates[*found].last_used_at) found = i;
  }
  return found;
}

}  // namespace

CapacityDecision decide_capacity(std::span<const SandboxCandidate> candidates, const CapacityRequest& request,
                                 const CapacityLimits& limits) {
  CapacityDecision decision;
  decision.running = request.reserved;
  decision.owner_running = request.reserved_by_owner;
  for (const auto& candidate : candidates) {
    decision.running += candidate.running ? 1 : 0;
    decision.owner_running += candidate.running && candidate.owner == request.owner ? 1 : 0;
  }
  if (limits.running_per_owner > 0 && decision.owner_running + 1 > limits.running_per_owner) {
    auto own =
        least_recently_used(candidates, [&](const SandboxCandidate& c) { return c.owner == request.owner; });
    if (!own) {
      decision.kind = CapacityDecision::Kind::kRefuseOwner;
      return decision;
    }
    decision.kind = CapacityDecision::Kind::kEvict;
    decision.victim = *own;
    return decision;
  }
  const uint64_t after = decision.running + 1;
  const bool fits =
      !limits.quota_enabled ||
      (after <= limits.quota_pods && after * limits.sandbox_cpu_millis <= limits.quota_cpu_millis &&
       after * limits.sandbox_memory_bytes <= limits.quota_memory_bytes);
  if (fits) {
    decision.kind = CapacityDecision::Kind::kAdmit;
    return decision;
  }
  auto anyone = least_recently_used(candidates, [](const SandboxCandidate&) { return true; });
  if (!anyone) {
    decision.kind = CapacityDecision::Kind::kRefuseQuota;
    return decision;
  }
  decision.kind = CapacityDecision::Kind::kEvict;
  decision.victim = *anyone;
  return decision;
}

}  // namespace sandboxd::service
