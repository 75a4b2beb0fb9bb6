// Containers and their sandboxes: the service behind the containers, tools, files and
// thread endpoints. A container is a persistent file space (owner, id) on disk — an
// ext4 volume for workspace and outputs (the size limit) and a folder for uploads —
// and at most one running sandbox, started on demand and stopped when idle for
// sessionTTLSeconds (files kept).
//
// ContainerService is the composition the surfaces and the cluster hold: it owns the
// shared parts (ContainerParts) and the classes that each do one job with them, and
// gives those to its callers (containers.lifecycle().stop(c),
// containers.execution().exec(...)):
//   container_parts.h      what they share: config, runtime, metadata, registry,
//                          storage, pool, spares, admission, the cluster's hooks
//   container_lifecycle.h  opening, starting, stopping, removing, draining, the reaper
//   container_execution.h  running a command, a process or a Python cell (admission)
//   container_memory.h     a sandbox's memory across stops (checkpoint, restore)
//   container_snapshots.h  a container's state copied out and in (E2B's snapshots)
// and below them:
//   container_registry.h   the open containers, their transitions, the capacity's books
//   container_storage.h    a container's volume and folders (blocking: the pool's)
//   capacity_policy.h      whether one more sandbox may start (a pure function)
//   reaper_policy.h        which idle sandboxes stop and which containers close (pure)
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ops/admission.h"
#include "ops/config.h"
#include "ops/live_config.h"
#include "ops/owner_admission.h"
#include "runtime/runtime.h"
#include "service/cluster_hooks.h"
#include "service/container.h"
#include "service/container_execution.h"
#include "service/container_lifecycle.h"
#include "service/container_memory.h"
#include "service/container_parts.h"
#include "service/container_snapshots.h"
#include "service/python_kernel.h"
#include "service/sandbox_networking.h"
#include "store/file_store.h"
#include "store/metadata.h"

namespace sandboxd::service {

// A running sandbox as an operator sees it (`sandboxd ps`).
struct SandboxStatus {
  std::string owner, container;
  pid_t pid = -1;  // host pid of its PID 1
  double age_seconds = 0;
  uint64_t memory_bytes = 0;
  int executing = 0;  // commands running now
  int64_t last_used_at = 0;
};

class ContainerService {
 public:
  // `runtime` may be null: no code-execution provider (files work, commands do not).
  ContainerService(asio::io_context& io, ops::LiveConfig& config, runtime::Runtime* runtime,
                   store::Metadata& metadata);

  // 1-128 characters of [A-Za-z0-9._:-].
  static bool valid_id(std::string_view id);
  static std::string default_id() { return "default"; }
  std::string new_id() const;  // "cntr_" + random
  static std::string format_time(int64_t unix_seconds);

  ContainerLifecycle& lifecycle() { return lifecycle_; }
  ContainerExecution& execution() { return execution_; }
  ContainerSnapshots& snapshots() { return snapshots_; }

  store::Metadata& metadata() { return parts_.metadata; }
  // The configuration in effect now (a snapshot).
  std::shared_ptr<const ops::Config> settings() const { return parts_.settings(); }
  size_t running_sandboxes() const;
  // Every running container sandbox, and how many pre-started ones wait.
  asio::awaitable<std::vector<SandboxStatus>> sandboxes();
  size_t prestarted_ready() const;
  bool code_execution_available() const { return parts_.runtime != nullptr; }
  // Sandboxes started from now on get the API and the allow-listed services.
  void set_network(SandboxNetworking* network) {
    parts_.network = network;
    parts_.pool.set_network(network);
  }
  // Why code execution is unavailable (no runtime): a missing sandbox image, else the
  // contract's "provider is not configured".
  void set_unavailable_reason(std::string reason) { parts_.unavailable_reason = std::move(reason); }
  std::string unavailable_reason() const { return parts_.why_unavailable(); }
  const ops::Admission& admission() const { return *parts_.admission; }
  ops::Admission& admission() { return *parts_.admission; }

  // Cluster mode (docs/storage.md): a container is served under its lease, taken when it
  // opens (a lease newly taken makes the local copy be checked against the bucket's
  // manifest before use: durability->ensure_local), released when its sandbox stops
  // (after durability->flush succeeded). Set once, before serving.
  void set_cluster(LeaseKeeper* leases);
  LeaseKeeper* leases() const { return parts_.leases; }  // null in single-host mode
  // storage.backend s3: the bucket copy (restore before use, flush after stops).
  void set_durability(BucketCopy* durability) { parts_.durability = durability; }
  BucketCopy* durability() const { return parts_.durability; }
  // The watches of a container's uploads/ and outputs/ (store/tree_changes.h): kept
  // while its sandbox runs, removed when it stops. Set once, before serving.
  void set_tree_changes(store::TreeChanges* changes) { parts_.tree_changes = changes; }
  // What a surface with processes of its own in sandboxes (E2B) is told of a sandbox's
  // memory (container_memory.h). Set once, before serving.
  void set_memory_listener(SandboxMemoryListener* listener) { memory_.set_listener(listener); }

 private:
  // Declared first so it goes last: the classes below use it until they are gone.
  ContainerParts parts_;
  ContainerMemory memory_;
  ContainerLifecycle lifecycle_;
  ContainerExecution execution_;
  ContainerSnapshots snapshots_;
};

}  // namespace sandboxd::service
