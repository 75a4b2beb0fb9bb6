// Where a container's durable copy meets the lease that says which replica serves it
// (issue 13: the s3 storage backend's hooks, called by the cluster's lease handling).
// Until the bucket backend is wired in, LocalDurability stands in: single-host storage
// has nothing to restore or flush, every local copy is the copy.
#pragma once

#include "base/error.h"

namespace sandboxd::api {

struct Container;

class DurabilityHooks {
 public:
  virtual ~DurabilityHooks() = default;
  // Right after this replica takes a container's lease (its first claim, or again after
  // another replica held it): makes the local copy current (restores it from the bucket
  // when missing or stale) before any command or file call uses it.
  virtual Result<void> ensure_local(Container& container) = 0;
  // Before the lease is released (the sandbox stopped: idle, stop, delete, eviction,
  // drain, shutdown): the final flush. A failure keeps the lease (and the local copy).
  virtual Result<void> flush(Container& container) = 0;
};

class LocalDurability final : public DurabilityHooks {
 public:
  Result<void> ensure_local(Container&) override { return {}; }
  Result<void> flush(Container&) override { return {}; }
};

}  // namespace sandboxd::api
