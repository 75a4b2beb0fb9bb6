// sandboxd's metrics in the Prometheus text format (GET /metrics): counters and
// histograms recorded where things happen, gauges read when /metrics is scraped. One
// registry per process, as Prometheus clients keep it.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sandboxd::ops {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // `name{labels,le="…"}` lines, then _sum and _count.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative)
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();

  void execution_rejected(const std::string& status, const std::string& reason);
  // outcome: ok, nonzero, timeout, cancelled, failed
  void execution_completed(const std::string& outcome, double seconds);
  void admission_waited(double seconds);
  void sandbox_started();
  void sandbox_stopped(const std::string& reason);
  // How a command's changed outputs were found: by walking its container's folders, or
  // without a walk, the kernel having seen no change there (service/discovery.h).
  void output_walk(bool skipped);
  void http_request(const std::string& route, unsigned code, double seconds);
  // storage.backend s3: a flush of a container to the bucket, a restore from it.
  void storage_flushed(bool ok, double seconds);
  void storage_restored(double seconds);
  // Containers this replica took over from one whose heartbeat ran out: moved by a
  // request for the container, or by the paced takeover in the background.
  enum class TakeoverBy { request, background };
  void lease_taken_over(TakeoverBy by, uint64_t containers);
  // What a start removed of a killed predecessor's (sandboxes: their cgroups, mounts).
  void leftovers_removed(uint64_t sandboxes);
  // An outside connection from a sandbox (network.egress): allowed or refused, and the
  // bytes it moved each way.
  void egress_connection(bool allowed, uint64_t bytes_out, uint64_t bytes_in);
  // A sandbox's memory (runtime.keepMemory on the gvisor tier): a checkpoint taken at a
  // stop (its image's bytes) or failed, and a start that restored one or could not (and
  // started fresh over the same files).
  void memory_checkpointed(bool ok, uint64_t bytes, double seconds);
  void memory_restored(bool ok, double seconds);
  // A stop that paused the sandbox in place (runtime.pauseHoldSeconds) or could not (it
  // was checkpointed at once), and a start that resumed a sandbox so held.
  void memory_held(bool ok);
  void memory_hold_resumed() { ++hold_resumes_; }

  // Values read at scrape time.
  struct Gauges {
    int executions_active = 0, executions_queued = 0, executions_limit = 0;
    size_t sandboxes_running = 0;
    uint64_t files_bytes = 0;
    // The per-owner quotas in force (0: none).
    int executions_owner_share = 0;  // the per-owner cap in force
    uint64_t running_sandboxes_per_owner = 0, containers_per_owner = 0;
    uint64_t stored_bytes_per_owner = 0, threads_per_owner = 0, skills_per_owner = 0,
             skill_versions_per_owner = 0;
    // HTTP connections open now, and how many of them have not authenticated yet.
    size_t connections_open = 0, connections_unauthenticated = 0;
    // Connections refused so far, by the cap that refused them (total, address,
    // address_unauthenticated, owner).
    std::vector<std::pair<std::string, uint64_t>> connections_refused;
    // NetworkPolicy peers configured (rendered only then): their watch's state.
    bool network_peers = false, network_peers_current = false, network_peers_synced = false;
    double network_peers_seconds_not_current = 0;
    size_t network_peers_names = 0, network_peers_addresses = 0;
    uint64_t network_peers_relists = 0, network_peers_reconnects = 0, network_peers_updates = 0;
    // storage.backend s3 (the storage metrics are rendered only then).
    bool storage_bucket = false;
    uint64_t storage_pending_flush_bytes = 0;
    // The last GET /ready's answer: 1 ready, 0 not; -1 before the first (not rendered).
    int ready = -1;
  };
  std::string render(const Gauges& gauges) const;

 private:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  static std::string label_text(const Labels& labels);
  void count(std::map<std::string, uint64_t>& family, const Labels& labels);

  mutable std::mutex mutex_;
  std::map<std::string, uint64_t> rejected_, completed_, stopped_, http_requests_;
  std::atomic<uint64_t> started_{0};
  std::atomic<uint64_t> output_walks_{0}, output_walks_skipped_{0};
  std::atomic<uint64_t> flushes_ok_{0}, flushes_failed_{0};
  std::atomic<uint64_t> takeovers_request_{0}, takeovers_background_{0}, leftovers_removed_{0};
  std::atomic<uint64_t> checkpoints_ok_{0}, checkpoints_failed_{0}, checkpoint_bytes_{0};
  std::atomic<uint64_t> restores_ok_{0}, restores_failed_{0};
  std::atomic<uint64_t> holds_ok_{0}, holds_failed_{0}, hold_resumes_{0};
  std::atomic<uint64_t> egress_allowed_{0}, egress_refused_{0}, egress_bytes_out_{0}, egress_bytes_in_{0};
  Histogram admission_wait_, execution_duration_, flush_duration_, restore_duration_;
  Histogram checkpoint_duration_, memory_restore_duration_;
  std::map<std::string, std::unique_ptr<Histogram>> http_duration_;  // by route
};

// The process's registry.
Metrics& metrics();

}  // namespace sandboxd::ops
