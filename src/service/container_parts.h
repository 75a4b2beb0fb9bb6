// What the parts of the container service share: the configuration, the runtime, the
// metadata, the open containers' registry, their storage, the pre-started pool, the
// spare volumes, admission, and the cluster's hooks. ContainerService owns one and gives
// it by reference to ContainerMemory, ContainerLifecycle, ContainerExecution and
// ContainerSnapshots, which own the rest of what they use; none of them owns a part here.
//
// Locking: the registry, the storage, the pool, the spares and admission each keep
// their own lock (see their headers). The hooks (network, leases, durability,
// tree_changes) and unavailable_reason are set once, before serving, through
// ContainerService's setters, and only read afterwards (no lock).
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "base/error.h"
#include "base/sandbox_paths.h"
#include "ops/admission.h"
#include "ops/config.h"
#include "ops/live_config.h"
#include "runtime/runtime.h"
#include "service/cluster_hooks.h"
#include "service/container_registry.h"
#include "service/container_storage.h"
#include "service/sandbox_networking.h"
#include "service/sandbox_pool.h"
#include "service/spare_volumes.h"
#include "store/metadata.h"
#include "store/tree_changes.h"

namespace sandboxd::service {

namespace asio = boost::asio;

// The contract's error for code execution with no provider behind it.
inline constexpr std::string_view kNoProvider = "code_execution provider is not configured.";

class ContainerParts {
 public:
  // `runtime` may be null: no code-execution provider (files work, commands do not).
  ContainerParts(asio::io_context& io, ops::LiveConfig& config, runtime::Runtime* runtime,
                 store::Metadata& metadata);
  ContainerParts(const ContainerParts&) = delete;
  ContainerParts& operator=(const ContainerParts&) = delete;

  // The configuration in effect now (a snapshot).
  std::shared_ptr<const ops::Config> settings() const { return config.get(); }
  // Why code execution is unavailable (no runtime): a missing sandbox image, else the
  // contract's "provider is not configured".
  std::string why_unavailable() const {
    return unavailable_reason.empty() ? std::string(kNoProvider) : unavailable_reason;
  }
  // A container's sandbox as the settings in effect now make it (one snapshot for the
  // whole sandbox), with its network planned when there is one.
  runtime::SandboxOptions sandbox_options(const ContainerPaths& dirs, const std::string& name) const;
  // A sandbox started for `container` (from its checkpoint `restore_from`, when given):
  // over a slot carrying its folders where the runtime starts every sandbox so
  // (Runtime::starts_over_slots: the slot is to be given back with pool.release at the
  // sandbox's stop), else over the folders themselves. Throws what Runtime::start throws,
  // and a mount's failure (a slot taken is given back first).
  struct StartedSandbox {
    std::shared_ptr<runtime::Sandbox> sandbox;
    std::shared_ptr<Slot> slot;  // or null
  };
  asio::awaitable<StartedSandbox> start_sandbox(std::shared_ptr<Container> container,
                                                std::string restore_from);
  // A name no other sandbox of this process had: `prefix` and a counter.
  std::string next_sandbox_name(const std::string& prefix);

  asio::io_context& io;
  ops::LiveConfig& config;
  runtime::Runtime* const runtime;
  store::Metadata& metadata;
  // Set once, before serving (ContainerService's setters); null where unused.
  SandboxNetworking* network = nullptr;        // the sandboxes' network
  LeaseKeeper* leases = nullptr;               // cluster mode: this replica's leases
  BucketCopy* durability = nullptr;            // storage.backend s3: the bucket copy
  store::TreeChanges* tree_changes = nullptr;  // the watches of uploads/ and outputs/
  std::string unavailable_reason;
  std::shared_ptr<ops::Admission> admission;
  ContainerRegistry registry;

 private:
  std::atomic<uint64_t> sandbox_counter_{0};

 public:
  // Each with its own lock; declared last so they go first (their threads and
  // coroutines use the settings above).
  SpareVolumes spares;
  ContainerStorage storage;
  SandboxPool pool;
};

}  // namespace sandboxd::service
