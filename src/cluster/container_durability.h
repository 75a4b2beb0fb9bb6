// The durable copy of every container in the sessions bucket (storage.backend s3,
// docs/storage.md). The local volume stays the working copy; this class keeps the bucket
// in step with it and brings it back:
//
// - uploads: the file transfer streams each body to the bucket as well
//   (begin_upload, cluster/bucket_upload.h) and records it here (commit_upload) before the
//   200;
// - flush: workspace, outputs (and deletions of uploads) go up incrementally: the
//   walk is compared with the manifest by size, mode and mtime, changed files are
//   uploaded (MD5 computed as they stream), rows and objects of vanished files are
//   deleted. When a sandbox stops for any reason and, while code runs, at most
//   storage.flushIntervalSec after a change. A failed flush keeps the local copy, is
//   retried with backoff, and keeps the container from being released;
// - restore (ensure_local): a container whose local copy is missing or stale is
//   restored from the bucket before its first command or file call: same paths, ids,
//   etags, modes and mtimes, owned by the agent.
//
// A marker in the container's host folder records the manifest generation the local
// copy matches and which instance wrote it; the copy is stale when the manifest moved
// on under another writer (another replica held the container).
//
// Disk walks and curl run on the blocking pool (base/blocking.h), never on an I/O
// thread. The cluster helper calls ensure_local / flush around lease changes.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cluster/bucket_upload.h"
#include "ops/config.h"
#include "service/cluster_hooks.h"
#include "service/container_service.h"
#include "store/lease_store.h"
#include "store/manifest_store.h"
#include "store/metadata.h"
#include "store/s3_client.h"

namespace sandboxd::cluster {

namespace asio = boost::asio;
using service::Container;

class ContainerDurability : public service::BucketCopy {
 public:
  using OpenContainers = std::function<std::vector<std::shared_ptr<Container>>()>;

  // `instance_id`: this server's identity as a writer of manifests (stable across its
  // restarts: a local copy it wrote stays valid after a crash).
  ContainerDurability(asio::io_context& io, const ops::Config& config, store::ManifestStore& manifest,
                      store::Metadata& metadata, std::string instance_id);
  ~ContainerDurability();

  // The periodic flusher over the containers `open` lists.
  void start(OpenContainers open);
  void stop();

  // --- hooks for the container service and the cluster ----------------------------
  // Restores the container from the bucket when its local copy is missing or stale.
  // Cheap once done. 503 (overloaded, Retry-After) when the bucket cannot be read.
  asio::awaitable<Result<void>> ensure_local(std::shared_ptr<Container> container) override;
  // The next ensure_local checks the marker against the manifest again (a lease that
  // was away from this instance).
  void invalidate_local(Container& container) override { container.bucket.invalidate_local(); }
  // An incremental flush now; true when the bucket holds what is on disk (a container
  // whose local copy was never ensured is left alone: nothing local to send).
  asio::awaitable<bool> flush(std::shared_ptr<Container> container);
  // After a sandbox stopped: a flush if anything changed (a failure is retried).
  asio::awaitable<void> flush_if_changed(std::shared_ptr<Container> container) override;
  // Whether the container may be let go (unmounted, lease released): nothing unflushed.
  bool releasable(const Container& container) const override;
  // Something changed outside a command (a file deleted through the API).
  void note_change(Container& container) override { container.bucket.note_change(); }
  // Files deleted through the Files API: their manifest rows go now (fenced, as an
  // upload's row is written: throws store::FencedError when another replica holds the
  // container), their objects after that; a holder that dies before its next flush
  // cannot bring them back. Blocking (the database): on the blocking pool.
  void forget_files(Container& container, const std::vector<std::string>& paths) override;
  // A deleted container: its rows and objects go (every object under its prefix).
  asio::awaitable<void> forget(std::shared_ptr<Container> container) override;
  // Cluster mode: a flush or restore met the fence (another replica holds the
  // container, or it was deleted). Called on any thread. Set once, before serving.
  void set_on_fenced(std::function<void(const store::FencedError&)> on_fenced) override {
    on_fenced_ = std::move(on_fenced);
  }

  // --- uploads ----------------------------------------------------------------------
  // `declared_size`: the body's Content-Length, when it has one (see BucketUpload).
  std::unique_ptr<service::BucketObjectUpload> begin_upload(const Container& container,
                                                            asio::any_io_executor executor,
                                                            std::optional<uint64_t> declared_size) override;
  // The uploaded file's row (its object is in the bucket), before the 200.
  void commit_upload(Container& container, const store::FileRecord& record,
                     const std::string& object_key) override;

  // The bucket's client (the skills' copies share it: store/skill_bucket.h).
  std::shared_ptr<store::S3Client> bucket_client() const { return client_; }

  // --- operations -------------------------------------------------------------------
  // Empty when the bucket answers, else why not (for /ready).
  asio::awaitable<std::string> bucket_problem();
  // Bytes the last flushes of the open containers could not send.
  uint64_t pending_flush_bytes() const;

  // The marker file of a container (in its host folder, beside the volume).
  static std::string marker_path(const Container& container);

 private:
  // `fenced`: set when a row write met the fence (the flush then stops, its last object
  // deleted).
  bool flush_blocking(Container& container, std::optional<store::FencedError>& fenced);
  Result<void> restore_blocking(Container& container);
  // One file of the checkpoint of the container's memory (service/container_memory.h)
  // from the bucket into its memory folder; empty, or what failed.
  std::string restore_memory_file(const Container& container, const store::ManifestRow& row);
  void write_marker(const Container& container, int64_t generation);
  bool local_copy_valid(const Container& container);
  void delete_objects_later(std::vector<std::string> keys);
  asio::awaitable<void> flush_loop();

  asio::io_context& io_;
  const ops::Config config_;
  store::ManifestStore& manifest_;
  store::Metadata& metadata_;
  std::string instance_id_;
  std::shared_ptr<store::S3Client> client_;
  OpenContainers open_;
  std::function<void(const store::FencedError&)> on_fenced_;
  asio::steady_timer ticker_;
  std::atomic<bool> stopping_{false};
};

// This data directory's writer identity (made once, kept in <data_dir>/instance-id).
std::string load_instance_id(const std::string& data_dir);

}  // namespace sandboxd::cluster
