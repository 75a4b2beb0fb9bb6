// Whether one more sandbox may start, as a pure function of what runs now: no clock, no
// lock, no container. The service takes a snapshot of the open containers (under its
// registry's lock), asks, and acts on the answer (stops the victim and asks again, or
// reserves the room, or answers the refusal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace sandboxd::service {

// One open container as the policy sees it.
struct SandboxCandidate {
  std::string owner;
  bool running = false;       // its sandbox is up (or held paused: Container::takes_room)
  bool executing = false;     // a command or a Python call runs in it now
  int64_t last_used_at = 0;   // unix seconds
  bool is_requester = false;  // the container the new sandbox is for (never its own victim)
};

// The limits in effect (a snapshot of the configuration).
struct CapacityLimits {
  // opensandbox.runtime.resourceQuota: pods, CPU and memory for all sandboxes together.
  bool quota_enabled = false;
  uint64_t quota_pods = 0, quota_cpu_millis = 0, quota_memory_bytes = 0;
  // What one sandbox counts against the quota's CPU and memory (0: nothing).
  uint64_t sandbox_cpu_millis = 0, sandbox_memory_bytes = 0;
  // quotas.runningSandboxesPerOwner (0: no limit).
  uint64_t running_per_owner = 0;
};

// The request: whose sandbox, and the starts already admitted but not running yet
// (counted as running).
struct CapacityRequest {
  std::string owner;
  uint64_t reserved = 0;           // every owner's
  uint64_t reserved_by_owner = 0;  // this owner's
};

struct CapacityDecision {
  enum class Kind {
    kAdmit,        // room now: reserve it and start
    kEvict,        // stop `victim` (an idle sandbox) first, then ask again
    kRefuseOwner,  // the owner is at running_per_owner with none of theirs idle (429)
    kRefuseQuota,  // the quota is full with none idle (503)
  };
  Kind kind = Kind::kAdmit;
  size_t victim = 0;           // an index into the candidates, for kEvict
  uint64_t running = 0;        // sandboxes counted against the quota (reservations included)
  uint64_t owner_running = 0;  // the same for the requesting owner
};

// The owner's share first (one owner's sandboxes never fill the host for everyone): past
// it, the owner's least recently used idle sandbox makes room. Then the quota: when one
// more does not fit, the least recently used idle sandbox of anyone makes room. Idle:
// running, with no execution under way, and not the requester's. Ties go to the first
// candidate.
CapacityDecision decide_capacity(std::span<const SandboxCandidate> candidates, const CapacityRequest& request,
                                 const CapacityLimits& limits);

}  // namespace sandboxd::service
