#include "ops/metrics.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>

#include "ops/egress_metrics.h"

namespace sandboxd::ops {
namespace {

const std::vector<double> kLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                            0.5,   1,      2.5,   5,    10,    30,   60,  300};

std::string escape(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

std::string number(double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void sample(std::string& out, const std::string& name, const std::string& labels, double value) {
  out.append(name);
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(number(value)).append("\n");
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  std::lock_guard lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  std::lock_guard lock(mutex_);
  const std::string prefix = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    sample(out, name + "_bucket", prefix + "le=\"" + number(bounds_[i]) + "\"",
           static_cast<double>(cumulative));
  }
  sample(out, name + "_bucket", prefix + "le=\"+Inf\"", static_cast<double>(count_));
  sample(out, name + "_sum", labels, sum_);
  sample(out, name + "_count", labels, static_cast<double>(count_));
}

Metrics::Metrics()
    : admission_wait_(kLatencyBounds),
      execution_duration_(kLatencyBounds),
      flush_duration_(kLatencyBounds),
      restore_duration_(kLatencyBounds),
      checkpoint_duration_(kLatencyBounds),
      memory_restore_duration_(kLatencyBounds) {}

void Metrics::memory_checkpointed(bool ok, uint64_t bytes, double seconds) {
  if (!ok) {
    ++checkpoints_failed_;
    return;
  }
  ++checkpoints_ok_;
  checkpoint_bytes_ += bytes;
  checkpoint_duration_.observe(seconds);
}

void Metrics::memory_held(bool ok) { ++(ok ? holds_ok_ : holds_failed_); }

void Metrics::memory_restored(bool ok, double seconds) {
  if (!ok) {
    ++restores_failed_;
    return;
  }
  ++restores_ok_;
  memory_restore_duration_.observe(seconds);
}

void Metrics::storage_flushed(bool ok, double seconds) {
  ++(ok ? flushes_ok_ : flushes_failed_);
  flush_duration_.observe(seconds);
}

void Metrics::storage_restored(double seconds) { restore_duration_.observe(seconds); }

void Metrics::lease_taken_over(TakeoverBy by, uint64_t containers) {
  (by == TakeoverBy::request ? takeovers_request_ : takeovers_background_) += containers;
}

void Metrics::leftovers_removed(uint64_t sandboxes) { leftovers_removed_ += sandboxes; }

void Metrics::egress_connection(bool allowed, uint64_t bytes_out, uint64_t bytes_in) {
  ++(allowed ? egress_allowed_ : egress_refused_);
  egress_bytes_out_ += bytes_out;
  egress_bytes_in_ += bytes_in;
}

std::string Metrics::label_text(const Labels& labels) {
  std::string out;
  for (const auto& [key, value] : labels) {
    if (!out.empty()) out.push_back(',');
    out.append(key).append("=\"").append(escape(value)).append("\"");
  }
  return out;
}

void Metrics::count(std::map<std::string, uint64_t>& family, const Labels& labels) {
  std::lock_guard lock(mutex_);
  ++family[label_text(labels)];
}

void Metrics::execution_rejected(const std::string& status, const std::string& reason) {
  count(rejected_, {{"status", status}, {"reason", reason}});
}

void Metrics::execution_completed(const std::string& outcome, double seconds) {
  count(completed_, {{"outcome", outcome}});
  execution_duration_.observe(seconds);
}

void Metrics::admission_waited(double seconds) { admission_wait_.observe(seconds); }
void Metrics::sandbox_started() { ++started_; }
void Metrics::output_walk(bool skipped) { ++(skipped ? output_walks_skipped_ : output_walks_); }
void Metrics::sandbox_stopped(const std::string& reason) { count(stopped_, {{"reason", reason}}); }

void Metrics::http_request(const std::string& route, unsigned code, double seconds) {
  count(http_requests_, {{"route", route}, {"code", std::to_string(code)}});
  Histogram* histogram;
  {
    std::lock_guard lock(mutex_);
    auto& slot = http_duration_[route];
    if (!slot) slot = std::make_unique<Histogram>(kLatencyBounds);
    histogram = slot.get();
  }
  histogram->observe(seconds);
}

std::string Metrics::render(const Gauges& g) const {
  std::string out;
  out.reserve(16 * 1024);
  header(out, "sandboxd_executions_active", "gauge", "Commands running now.");
  sample(out, "sandboxd_executions_active", "", g.executions_active);
  header(out, "sandboxd_executions_queued", "gauge", "Commands waiting for an execution slot.");
  sample(out, "sandboxd_executions_queued", "", g.executions_queued);
  header(out, "sandboxd_executions_limit", "gauge", "Execution slots (capacity.maxConcurrentExecutions).");
  sample(out, "sandboxd_executions_limit", "", g.executions_limit);
  header(out, "sandboxd_sandboxes_running", "gauge", "Sandboxes running now.");
  sample(out, "sandboxd_sandboxes_running", "", static_cast<double>(g.sandboxes_running));
  header(out, "sandboxd_files_bytes", "gauge", "Bytes of files stored in containers.");
  sample(out, "sandboxd_files_bytes", "", static_cast<double>(g.files_bytes));
  header(out, "sandboxd_quota_executions_per_owner", "gauge",
         "Commands one owner may run at once (capacity.maxConcurrentExecutionsPerOwner; unset: the whole "
         "limit).");
  sample(out, "sandboxd_quota_executions_per_owner", "", g.executions_owner_share);
  header(out, "sandboxd_quota_running_sandboxes_per_owner", "gauge",
         "Sandboxes one owner may run at once (quotas.runningSandboxesPerOwner; 0: none).");
  sample(out, "sandboxd_quota_running_sandboxes_per_owner", "",
         static_cast<double>(g.running_sandboxes_per_owner));
  header(out, "sandboxd_quota_containers_per_owner", "gauge",
         "Containers one owner may keep (quotas.containersPerOwner; 0: none).");
  sample(out, "sandboxd_quota_containers_per_owner", "", static_cast<double>(g.containers_per_owner));
  auto quota = [&](const char* name, const char* help, uint64_t value) {
    header(out, name, "gauge", help);
    sample(out, name, "", static_cast<double>(value));
  };
  quota("sandboxd_quota_stored_bytes_per_owner",
        "Bytes of files one owner may store (quotas.storedBytesPerOwner; 0: none).",
        g.stored_bytes_per_owner);
  quota("sandboxd_quota_threads_per_owner",
        "Chat threads one owner may keep (quotas.threadsPerOwner; 0: none).", g.threads_per_owner);
  quota("sandboxd_quota_skills_per_owner",
        "Custom skills one owner may keep (quotas.skillsPerOwner; 0: none).", g.skills_per_owner);
  quota("sandboxd_quota_skill_versions_per_owner",
        "Versions of custom skills one owner may keep (quotas.skillVersionsPerOwner; 0: none).",
        g.skill_versions_per_owner);
  header(out, "sandboxd_http_connections", "gauge", "HTTP connections open now, by state.");
  sample(
      out, "sandboxd_http_connections", "state=\"authenticated\"",
      static_cast<double>(g.connections_open - std::min(g.connections_open, g.connections_unauthenticated)));
  sample(out, "sandboxd_http_connections", "state=\"unauthenticated\"",
         static_cast<double>(g.connections_unauthenticated));
  header(out, "sandboxd_http_connections_refused_total", "counter",
         "HTTP connections refused, by the cap that refused them.");
  for (const auto& [cap, refused] : g.connections_refused)
    sample(out, "sandboxd_http_connections_refused_total", "cap=\"" + cap + "\"",
           static_cast<double>(refused));
  if (g.ready >= 0) {
    header(out, "sandboxd_ready", "gauge",
           "1 if the last GET /ready answered ready, 0 if not (its body says why).");
    sample(out, "sandboxd_ready", "", g.ready);
  }
  header(out, "sandboxd_lease_takeovers_total", "counter",
         "Containers this replica took over from replicas whose heartbeat ran out, by what moved them.");
  sample(out, "sandboxd_lease_takeovers_total", "by=\"request\"",
         static_cast<double>(takeovers_request_.load()));
  sample(out, "sandboxd_lease_takeovers_total", "by=\"background\"",
         static_cast<double>(takeovers_background_.load()));
  header(out, "sandboxd_leftovers_removed_total", "counter",
         "Sandboxes a killed predecessor left (cgroups, mounts), removed at start.");
  sample(out, "sandboxd_leftovers_removed_total", "", static_cast<double>(leftovers_removed_.load()));
  header(out, "sandboxd_egress_connections_total", "counter",
         "Outside connections from sandboxes (network.egress), by whether the policy allowed them.");
  sample(out, "sandboxd_egress_connections_total", "result=\"allowed\"",
         static_cast<double>(egress_allowed_.load()));
  sample(out, "sandboxd_egress_connections_total", "result=\"refused\"",
         static_cast<double>(egress_refused_.load()));
  header(out, "sandboxd_egress_bytes_total", "counter",
         "Bytes of allowed outside connections from sandboxes, out (to the destination) and in.");
  sample(out, "sandboxd_egress_bytes_total", "direction=\"out\"",
         static_cast<double>(egress_bytes_out_.load()));
  sample(out, "sandboxd_egress_bytes_total", "direction=\"in\"",
         static_cast<double>(egress_bytes_in_.load()));
  header(
      out, "sandboxd_egress_refused_total", "counter",
      "Outside connections from sandboxes refused, by why (policy, invalid, resolve, connect, sandbox_limit, "
      "owner_limit).");
  for (const auto& [reason, count] : egress_refusals())
    sample(out, "sandboxd_egress_refused_total", "reason=\"" + reason + "\"", static_cast<double>(count));
  header(out, "sandboxd_memory_checkpoints_total", "counter",
         "Sandboxes checkpointed at a stop (runtime.keepMemory), by result.");
  sample(out, "sandboxd_memory_checkpoints_total", "result=\"ok\"",
         static_cast<double>(checkpoints_ok_.load()));
  sample(out, "sandboxd_memory_checkpoints_total", "result=\"failed\"",
         static_cast<double>(checkpoints_failed_.load()));
  header(out, "sandboxd_memory_checkpoint_bytes_total", "counter", "Bytes of the checkpoint images written.");
  sample(out, "sandboxd_memory_checkpoint_bytes_total", "", static_cast<double>(checkpoint_bytes_.load()));
  header(out, "sandboxd_memory_checkpoint_seconds", "histogram", "Time to checkpoint a sandbox.");
  checkpoint_duration_.render(out, "sandboxd_memory_checkpoint_seconds", "");
  header(out, "sandboxd_memory_restores_total", "counter",
         "Sandbox starts from a checkpoint, by result (failed: started fresh over the same files).");
  sample(out, "sandboxd_memory_restores_total", "result=\"ok\"", static_cast<double>(restores_ok_.load()));
  sample(out, "sandboxd_memory_restores_total", "result=\"failed\"",
         static_cast<double>(restores_failed_.load()));
  header(out, "sandboxd_memory_restore_seconds", "histogram",
         "Time to restore a sandbox from its checkpoint.");
  memory_restore_duration_.render(out, "sandboxd_memory_restore_seconds", "");
  header(out, "sandboxd_memory_holds_total", "counter",
         "Stops that paused the sandbox in place (runtime.pauseHoldSeconds), by result (failed: "
         "checkpointed at once).");
  sample(out, "sandboxd_memory_holds_total", "result=\"ok\"", static_cast<double>(holds_ok_.load()));
  sample(out, "sandboxd_memory_holds_total", "result=\"failed\"", static_cast<double>(holds_failed_.load()));
  header(out, "sandboxd_memory_hold_resumes_total", "counter", "Sandboxes held paused in place and resumed.");
  sample(out, "sandboxd_memory_hold_resumes_total", "", static_cast<double>(hold_resumes_.load()));
  header(out, "sandboxd_sandboxes_started_total", "counter", "Sandboxes started.");
  sample(out, "sandboxd_sandboxes_started_total", "", static_cast<double>(started_.load()));
  header(out, "sandboxd_output_walks_total", "counter",
         "Commands whose changed outputs were found by walking their container's folders.");
  sample(out, "sandboxd_output_walks_total", "", static_cast<double>(output_walks_.load()));
  header(
      out, "sandboxd_output_walks_skipped_total", "counter",
      "Commands that needed no walk: the kernel saw no change under their container's uploads and outputs.");
  sample(out, "sandboxd_output_walks_skipped_total", "", static_cast<double>(output_walks_skipped_.load()));
  if (g.network_peers) {
    auto gauge = [&](const char* name, const char* type, const char* help, double value) {
      header(out, name, type, help);
      sample(out, name, "", value);
    };
    gauge("sandboxd_network_peers_watch_current", "gauge",
          "1 while every Kubernetes watch of the NetworkPolicy peers is open and listed; 0: the last set is "
          "in force.",
          g.network_peers_current ? 1 : 0);
    gauge("sandboxd_network_peers_synced", "gauge",
          "1 once the NetworkPolicy peers were listed from the Kubernetes API.",
          g.network_peers_synced ? 1 : 0);
    gauge("sandboxd_network_peers_seconds_not_current", "gauge",
          "Seconds since the peer watch stopped being current (0 while current).",
          g.network_peers_seconds_not_current);
    gauge("sandboxd_network_peers_names", "gauge",
          "Service names the NetworkPolicy peers let a sandbox resolve.",
          static_cast<double>(g.network_peers_names));
    gauge("sandboxd_network_peers_addresses", "gauge", "Pod addresses the NetworkPolicy peers select.",
          static_cast<double>(g.network_peers_addresses));
    gauge("sandboxd_network_peers_relists_total", "counter",
          "Lists of a watched Kubernetes resource (first and after 410 Gone).",
          static_cast<double>(g.network_peers_relists));
    gauge("sandboxd_network_peers_reconnects_total", "counter",
          "Watches of the Kubernetes API opened again after a failure.",
          static_cast<double>(g.network_peers_reconnects));
    gauge("sandboxd_network_peers_updates_total", "counter",
          "Resolved sets of the NetworkPolicy peers published.",
          static_cast<double>(g.network_peers_updates));
  }
  if (g.storage_bucket) {
    header(
        out, "sandboxd_storage_pending_flush_bytes", "gauge",
        "Bytes of workspace and outputs changed but not yet in the sessions bucket (as of the last flush).");
    sample(out, "sandboxd_storage_pending_flush_bytes", "",
           static_cast<double>(g.storage_pending_flush_bytes));
    header(out, "sandboxd_storage_flushes_total", "counter",
           "Flushes of containers to the sessions bucket, by outcome.");
    sample(out, "sandboxd_storage_flushes_total", "outcome=\"ok\"", static_cast<double>(flushes_ok_.load()));
    sample(out, "sandboxd_storage_flushes_total", "outcome=\"failed\"",
           static_cast<double>(flushes_failed_.load()));
    header(out, "sandboxd_storage_flush_failures_total", "counter",
           "Flushes to the sessions bucket that failed (retried).");
    sample(out, "sandboxd_storage_flush_failures_total", "", static_cast<double>(flushes_failed_.load()));
    header(out, "sandboxd_storage_flush_duration_seconds", "histogram",
           "Duration of flushes to the sessions bucket.");
    flush_duration_.render(out, "sandboxd_storage_flush_duration_seconds", "");
    header(out, "sandboxd_storage_restore_duration_seconds", "histogram",
           "Duration of restores of containers from the sessions bucket.");
    restore_duration_.render(out, "sandboxd_storage_restore_duration_seconds", "");
  }
  std::lock_guard lock(mutex_);
  auto family = [&](const char* name, const char* help, const std::map<std::string, uint64_t>& values) {
    header(out, name, "counter", help);
    for (const auto& [labels, value] : values) sample(out, name, labels, static_cast<double>(value));
  };
  family("sandboxd_executions_rejected_total", "Executions refused, by HTTP status and reason.", rejected_);
  family("sandboxd_executions_completed_total", "Executions finished, by outcome.", completed_);
  family("sandboxd_sandboxes_stopped_total", "Sandboxes stopped, by reason.", stopped_);
  family("sandboxd_http_requests_total", "HTTP requests, by route and status code.", http_requests_);
  header(out, "sandboxd_admission_wait_seconds", "histogram", "Time executions waited for a slot.");
  admission_wait_.render(out, "sandboxd_admission_wait_seconds", "");
  header(out, "sandboxd_execution_duration_seconds", "histogram", "Duration of executions.");
  execution_duration_.render(out, "sandboxd_execution_duration_seconds", "");
  header(out, "sandboxd_http_request_duration_seconds", "histogram", "Duration of HTTP requests, by route.");
  for (const auto& [route, histogram] : http_duration_)
    histogram->render(out, "sandboxd_http_request_duration_seconds", label_text({{"route", route}}));
  return out;
}

Metrics& metrics() {
  static Metrics registry;
  return registry;
}

}  // namespace sandboxd::ops
