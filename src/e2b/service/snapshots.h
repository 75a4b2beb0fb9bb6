// E2B's snapshots and forks (docs/e2b.md, "Snapshots and forks"): a snapshot is a copy
// of a sandbox's state kept apart from any container, so that it outlives the sandbox:
// its files (the volume's image: service/container_snapshots.cc) on both tiers, and on
// a tier that keeps memory (gvisor) its processes and memory as well. A sandbox created
// from one starts as a copy of it; a fork is a snapshot taken once and `count` sandboxes
// made from it, each succeeding or failing on its own. The source runs on, keeping its
// id and end time (on the gvisor tier it is checkpointed and restored in place: its
// processes go on where they were).
//
// On a single host snapshots live under <dataDir>/snapshots/<id>/ (root's only); in
// cluster mode in the sessions bucket (service::SnapshotBucket, cluster/snapshot_bucket.h),
// so that any replica makes sandboxes from one and it outlives the replica that took it:
// there a snapshot is captured into a folder of its own, uploaded, and its folder goes;
// a sandbox made from one is seeded from a copy fetched for it (no replica keeps one).
// Their records are in the metadata database beside the sandboxes' (store/e2b_records.h),
// so that they survive a restart, written after the state is stored and removed before
// it goes: a record always names a complete copy. They count against the owner's stored
// bytes (quotas.storedBytesPerOwner) until they are deleted. A snapshot or fork is taken
// where its source's container is held (the routes relay to its holder); a fork's
// sandboxes are made there too, from a local copy.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "e2b/service/sandboxes.h"
#include "service/cluster_hooks.h"
#include "store/e2b_records.h"

namespace sandboxd::e2b {

using Snapshot = store::E2bSnapshotRecord;

class Snapshots {
 public:
  // The most snapshots one owner keeps, and forks one request makes (E2B's own cap:
  // SandboxForkRequest.count is 1 to 100).
  static constexpr size_t kMaxPerOwner = 100;
  static constexpr int64_t kMaxForks = 100;

  Snapshots(Sandboxes& sandboxes, store::E2bRecords& records, std::string data_dir);
  // Cluster mode: where snapshots are kept (set once, before serving; null on one host).
  void set_bucket(service::SnapshotBucket* bucket) { bucket_ = bucket; }

  // E2B's snapshot id: "<name or id>:default" (a template id with its tag, as E2B's).
  static std::string snapshot_id(const Snapshot& snapshot);
  // The name or id an E2B snapshot id (with or without ":default") names; nullopt for
  // anything that cannot be one of this server's.
  static std::optional<std::string> key_of(std::string_view snapshot_id);

  // Removes what a fork, a snapshot or a deletion that stopped half way left: a folder
  // with no record (blocking; before serving). (In the bucket, a replica that stopped
  // between storing a snapshot's objects and its record leaves objects no record names:
  // docs/storage.md.)
  void start();

  // Snapshots the owner's sandbox. `name` ('' none): a later snapshot under the same name
  // replaces the earlier one. 404 for a missing sandbox, 400 for a bad name, 403 past the
  // owner's snapshots or stored bytes.
  asio::awaitable<Result<Snapshot>> create(std::string owner, std::string sandbox_id, std::string name);
  asio::awaitable<store::E2bSnapshotPage> list(store::E2bSnapshotQuery query);
  // 404 when the owner has no such snapshot.
  asio::awaitable<Result<void>> remove(std::string owner, std::string snapshot_id);
  // A new sandbox whose state starts as the snapshot's (request.template_id names it);
  // nullopt when the owner has no such snapshot (the caller answers as for an unknown
  // template).
  asio::awaitable<std::optional<Result<Sandbox>>> create_sandbox(std::string owner, NewSandbox request);
  // The sandbox snapshotted once and `count` sandboxes made from it, each its own
  // outcome. 404 for a missing sandbox, 409 for a paused one, 400 for a bad count.
  asio::awaitable<Result<std::vector<Result<Sandbox>>>> fork(std::string owner, std::string sandbox_id,
                                                             int64_t count, int64_t timeout_sec);

 private:
  std::string folder_of(const std::string& id) const;
  // The owner's sandbox's container, ready to be copied (held here: the route relays a
  // request to the container's holder).
  asio::awaitable<Result<std::shared_ptr<Container>>> source(const Sandbox& sandbox);
  asio::awaitable<void> remove_folder(std::string folder);
  // A snapshot's stored state: its folder, or in cluster mode its objects in the bucket.
  asio::awaitable<void> remove_state(std::string owner, std::string id);
  // 403 (as E2B words a quota) when the owner's stored bytes and what a copy of the
  // container would take pass quotas.storedBytesPerOwner; nullopt otherwise.
  asio::awaitable<std::optional<ApiError>> past_stored_bytes(const std::string& owner,
                                                             const Container& container);
  // A sandbox made from the state in `folder`.
  asio::awaitable<Result<Sandbox>> create_from(std::string owner, std::string folder, NewSandbox request);
  template <typename Fn>
  auto store(Fn fn);

  Sandboxes& sandboxes_;
  ContainerService& containers_;
  store::E2bRecords& records_;
  service::SnapshotBucket* bucket_ = nullptr;
  std::string root_;  // <dataDir>/snapshots
  std::mutex creating_mutex_;
  std::map<std::string, size_t> creating_;  // snapshots being made, by owner (for the cap)
};

}  // namespace sandboxd::e2b
