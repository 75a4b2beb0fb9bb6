#include "app/serve.h"

#include <signal.h>

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "api/cluster_relay.h"
#include "api/routes.h"
#include "api/sandbox_network.h"
#include "api/surfaces.h"
#include "api/thread_chat.h"
#include "app/host_share.h"
#include "app/memory_release.h"
#include "base/blocking.h"
#include "base/ids.h"
#include "cluster/container_durability.h"
#include "cluster/container_leases.h"
#include "cluster/snapshot_bucket.h"
#include "e2b/api/surfaces.h"
#include "e2b/service/processes.h"
#include "e2b/service/sandboxes.h"
#include "e2b/service/snapshots.h"
#include "images/store.h"
#include "kubernetes/peer_watch.h"
#include "model/upstream_client.h"
#include "ops/health_check.h"
#include "ops/live_config.h"
#include "ops/logging.h"
#include "ops/metrics.h"
#include "ops/systemd_notify.h"
#include "runtime/host_capacity.h"
#include "runtime/runtime.h"
#include "runtime/trust_bundle.h"
#include "runtime/userns.h"
#include "runtime/volume.h"
#include "server/auth.h"
#include "server/egress_interception.h"
#include "server/http_server.h"
#include "service/container_service.h"
#include "service/directory_watches.h"
#include "service/discovery.h"
#include "service/skill_mounts.h"
#include "service/store_call.h"
#include "service/store_check.h"
#include "service/tool_tasks.h"
#include "store/e2b_records.h"
#include "store/file_store.h"
#include "store/lease_store.h"
#include "store/manifest_store.h"
#include "store/metadata.h"

namespace sandboxd::app {
namespace {

namespace fs = std::filesystem;
namespace asio = boost::asio;

std::string random_token() { return "sbx_dev_" + random_base36(32); }

// The owners' tokens; with none configured, one made up for owner "dev" and printed.
std::vector<std::pair<std::string, std::string>> owner_tokens(const ops::Config& config) {
  std::vector<std::pair<std::string, std::string>> tokens;
  for (const auto& entry : config.tokens) tokens.emplace_back(entry.token, entry.owner);
  if (tokens.empty()) {
    std::string token = random_token();
    tokens.emplace_back(token, "dev");
    std::printf("sandboxd: no auth.tokens configured; development token for owner 'dev':\n  %s\n",
                token.c_str());
    std::fflush(stdout);
  }
  return tokens;
}

// The header rules' CA (server/egress_interception.h), made once into the data dir and
// loaded at each start after. Null when it cannot be: header rules' HTTPS is refused.
std::shared_ptr<server::InterceptionCa> load_interception_ca(const ops::Config& config) {
  try {
    return server::InterceptionCa::load_or_create((fs::path(config.data_dir) / "egress-ca").string());
  } catch (const std::exception& e) {
    spdlog::error("{}; HTTPS connections that a header rule applies to are refused", e.what());
    return nullptr;
  }
}

// The sandbox runtime, unless the operator runs none, or this host cannot run one (then
// the service still serves files, and code execution answers with the contract's "not
// configured" error blocks). The sandbox image (external.opensandbox.codeExecution.image):
// an installed image, or the host's for the built-in default name; any other missing
// image leaves code execution unavailable with a reason that names it (`image_problem`:
// /ready, tool results).
void start_runtime(const ops::Config& config, const std::shared_ptr<server::InterceptionCa>& interception_ca,
                   std::optional<runtime::Runtime>& sandbox_runtime, std::string& image_problem) {
  if (config.runtime_provider != "sandboxd") return;
  const ops::Config defaults;
  auto image = images::select_image(
      config.data_dir, config.image_repository, config.image_tag,
      config.image_repository == defaults.image_repository && config.image_tag == defaults.image_tag);
  image_problem = image.problem;
  if (!image_problem.empty()) {
    spdlog::error("{}; code execution is unavailable", image_problem);
    return;
  }
  spdlog::info("sandbox image: {}", image.label);
  runtime::RuntimeOptions runtime_options;
  // Every sandbox trusts the CA (runtime/trust_bundle.h), whatever the policy of the
  // moment: a reload may open egress, and add rules, for sandboxes already running.
  // The folder is written again at each start, from the CA and the sandboxes' system.
  if (interception_ca) {
    const std::string trust_dir = (fs::path(config.data_dir) / "egress-trust").string();
    try {
      runtime::write_trust_folder(trust_dir, image.rootfs, interception_ca->certificate_pem());
      runtime_options.trust_dir = trust_dir;
    } catch (const std::exception& e) {
      spdlog::error("{}; sandboxes do not trust the egress CA (a header rule's host fails their TLS checks)",
                    e.what());
    }
  }
  // The instance is tied to the data directory: a restarted server finds (and removes)
  // exactly what its predecessor left.
  runtime_options.instance = "s" + server::sha256_hex(config.data_dir).substr(0, 16);
  runtime_options.host_uid = runtime_options.host_gid = config.sandbox_host_uid;
  runtime_options.cgroups.mode = config.cgroup_mode;
  runtime_options.cgroups.total = sandboxes_total(config);
  // The kernel's OOM killer takes sandbox processes (1000) long before the server.
  if (!runtime::set_oom_score_adj(0, runtime::kServerOomScoreAdj))
    spdlog::warn("cannot lower the server's oom_score_adj");
  runtime_options.image_root = image.rootfs;
  runtime_options.service_dir = config.data_dir;
  runtime_options.isolation =
      config.isolation == "gvisor" ? runtime::Isolation::kGvisor : runtime::Isolation::kNative;
  runtime_options.gvisor.platform = config.gvisor_platform;
  try {
    sandbox_runtime.emplace(runtime_options);
    spdlog::info("sandbox isolation: {}{}", config.isolation,
                 config.isolation == "gvisor" ? " (runsc --platform=" + config.gvisor_platform + ")" : "");
  } catch (const std::exception& e) {
    spdlog::error("the sandbox runtime cannot start on this host ({}); code execution is unavailable",
                  e.what());
  }
}

// Whatever a killed predecessor left: sandboxes (by cgroup) and mounts under the data
// directory (volumes, spares, the data directory's own private bind).
void remove_leftovers(std::optional<runtime::Runtime>& sandbox_runtime, const std::string& data_dir) {
  if (sandbox_runtime) {
    if (size_t stale = sandbox_runtime->cleanup_stale(data_dir); stale > 0) {
      spdlog::warn("removed {} sandbox(es) left by a previous sandboxd", stale);
      ops::metrics().leftovers_removed(stale);
    }
  } else {
    for (const auto& mount_point : runtime::Volume::mounts_under(data_dir))
      runtime::Volume::unmount(mount_point);
  }
}

// The private bind of the data directory, and anything a part of the service left
// mounted below it (deepest first), come off on every way out, a start that fails
// included (an unreachable database): nothing of this run stays mounted on the host.
struct UnmountOnExit {
  const std::string& dir;
  ~UnmountOnExit() {
    ops::set_audit(nullptr);  // its file is under the data directory's bind
    try {
      for (const auto& mount_point : runtime::Volume::mounts_under(dir)) {
        try {
          runtime::Volume::unmount(mount_point);
        } catch (const std::exception& e) {
          spdlog::warn("unmounting {}: {}", mount_point, e.what());
        }
      }
    } catch (const std::exception& e) {
      spdlog::warn("listing the mounts under {}: {}", dir, e.what());
    }
  }
};

server::ServerLimits server_limits(const ops::Config& config) {
  server::ServerLimits limits;
  limits.header_timeout = std::chrono::seconds(config.header_timeout_sec);
  limits.body_idle_timeout = std::chrono::seconds(config.body_idle_timeout_sec);
  limits.body_min_rate = config.body_min_rate_bytes_per_sec;
  limits.body_rate_grace = std::chrono::seconds(config.body_rate_grace_sec);
  limits.max_connections =
      config.max_connections ? config.max_connections : server::default_max_connections();
  limits.max_connections_per_owner = config.max_connections_per_owner;
  limits.max_connections_per_address = config.max_connections_per_ip;
  limits.max_unauthenticated_per_address = config.max_unauthenticated_connections_per_ip;
  return limits;
}

// Each request: one access-log line, its metrics, and an audit record of an owner's.
void observe_requests(server::HttpServer& http) {
  http.set_observer([](const server::RequestRecord& r) {
    ops::log_event_batched(spdlog::level::info, "request",
                           {{"id", r.request_id},
                            {"method", r.method},
                            {"target", r.target},
                            {"status", int64_t{r.status}},
                            {"ms", r.seconds * 1000},
                            {"bytes", static_cast<int64_t>(r.bytes)},
                            {"owner", r.owner.empty() ? std::string_view("-") : r.owner},
                            {"route", r.route}});
    ops::metrics().http_request(std::string(r.route), r.status, r.seconds);
    // Who did what to which container, and how it ended: every owner's request.
    if (r.authenticated_route && !r.owner.empty())
      if (auto* log = ops::audit())
        log->record("request", {{"owner", r.owner},
                                {"method", r.method},
                                {"target", r.target},
                                {"route", r.route},
                                {"status", int64_t{r.status}},
                                {"id", r.request_id}});
  });
}

// NetworkPolicy peers in the services list: what they select, watched through the
// Kubernetes API and resolved for every sandbox while it runs. Null without peers.
std::shared_ptr<kubernetes::PeerWatch> watch_network_peers(asio::io_context& io, const ops::Config& config) {
  if (config.network_peers.empty()) return nullptr;
  std::string why;
  auto endpoint = kubernetes::find_api_endpoint(config.kubernetes, why);
  if (!endpoint)
    throw std::runtime_error(
        "external.opensandbox.codeExecution.internal.services: the NetworkPolicy peers need the Kubernetes "
        "API: " +
        why);
  auto peer_watch = std::make_shared<kubernetes::PeerWatch>(io, *endpoint, config.network_peers);
  peer_watch->start();
  spdlog::info("network peers: watching the Kubernetes API at {}:{} ({} peer(s), namespace {})",
               endpoint->host, endpoint->port, config.network_peers.size(), endpoint->namespace_name);
  return peer_watch;
}

// The bucket and the cluster's leases, when configured (each optional).
struct DurableParts {
  // storage.backend s3: the sessions bucket holds the durable copy (the manifest in the
  // metadata database); the local disk is the working copy.
  std::optional<store::ManifestStore> manifest;
  std::optional<cluster::ContainerDurability> durability;
  // Cluster mode: the metadata is shared with the other replicas, and each container is
  // served under a lease (one replica at a time).
  std::optional<store::LeaseStore> lease_store;
  std::optional<cluster::ContainerLeases> leases;
};

void start_durable_parts(DurableParts& parts, asio::io_context& io, const ops::Config& config,
                         const std::function<std::shared_ptr<store::db::Database>()>& metadata_database,
                         store::Metadata& metadata, service::ContainerService& containers) {
  auto& [manifest, durability, lease_store, leases] = parts;
  if (config.storage_backend == "s3") {
    manifest.emplace(metadata_database());
    durability.emplace(io, config, *manifest, metadata, cluster::load_instance_id(config.data_dir));
    containers.set_durability(&*durability);
    durability->start([&containers] { return containers.lifecycle().open_containers(); });
    spdlog::info("storage: sessions bucket {} at {} (prefix '{}'), flush every {} s", config.s3.bucket,
                 config.s3.endpoint, config.s3.prefix, config.flush_interval_sec);
  }
  if (!config.cluster_enabled()) return;
  // Every write to a container's file records and to its manifest passes the lease's
  // fence in its own transaction.
  lease_store.emplace(metadata_database());
  leases.emplace(io, *lease_store,
                 cluster::ContainerLeases::Settings{
                     config.cluster_replica_id, config.cluster_advertise_url,
                     std::chrono::seconds(config.cluster_lease_seconds), config.retry_after_sec,
                     static_cast<double>(config.cluster_takeover_per_second), config.cluster_takeover_batch});
  auto* held = &*leases;
  metadata.set_write_fence(
      [held](store::db::Connection& conn, const std::string& storage) { held->check_fence(conn, storage); });
  if (manifest)
    manifest->set_write_fence([held](store::db::Connection& conn, const std::string& storage) {
      return held->check_fence(conn, storage);
    });
  containers.set_cluster(held);
  spdlog::info("cluster: replica {} at {}, leases of {}s", config.cluster_replica_id,
               config.cluster_advertise_url, config.cluster_lease_seconds);
}

// SIGHUP: the file is read and checked again; what can change while serving applies to
// new work, and a file with a problem changes nothing (the reason is logged; false).
bool reload(const std::string& config_path, ops::LiveConfig& live_config, ops::Admission& admission) {
  if (config_path.empty()) {
    spdlog::warn("SIGHUP: running on the embedded defaults, there is no configuration file to reload");
    return false;
  }
  ops::Config loaded;
  try {
    loaded = ops::load_config_file(config_path);
  } catch (const std::exception& e) {
    spdlog::error("SIGHUP: {} not reloaded, the current configuration stays: {}", config_path, e.what());
    return false;
  }
  for (const auto& key : live_config.reload(loaded))
    spdlog::warn("SIGHUP: {} changed in {}; that takes a restart, the current value stays", key, config_path);
  // The line of commands is built once; it takes the limits the reload kept.
  const auto now = live_config.get();
  admission.set_limits(now->max_concurrent_executions, std::chrono::seconds(now->queue_timeout_sec),
                       now->max_concurrent_executions_per_owner);
  return true;
}

// What a graceful stop ends, in order.
struct RunningParts {
  asio::io_context& io;
  server::HttpServer& http;
  service::ContainerService& containers;
  e2b::Sandboxes& e2b_sandboxes;
  api::SandboxNetwork& network;
  std::shared_ptr<model::UpstreamClient> upstream;  // may be null
  cluster::ContainerLeases* leases = nullptr;
  cluster::ContainerDurability* durability = nullptr;
  int shutdown_grace_sec = 0;
};

// SIGTERM/SIGINT: stop accepting, let the requests in flight finish (bounded), then
// stop the sandboxes, flush and release; cluster.shutdownGraceSec bounds it all: in
// cluster mode two thirds for the requests in flight, the rest to stop the sandboxes,
// flush and release the leases; on a single host half of it, the rest to stop the
// sandboxes (side by side, each within runtime::kPid1ExitLimit) and unmount their
// volumes. A command still running then ends with its sandbox: waiting for the whole
// grace left nothing for the stops, and the kill -9 that follows the grace (Kubernetes,
// systemd) leaves mounts and loop devices behind.
asio::awaitable<void> shut_down(RunningParts parts) {
  asio::steady_timer pause(parts.io);
  if (parts.leases) parts.leases->set_draining();
  const int grace = parts.shutdown_grace_sec;
  const int in_flight_wait = std::max(1, parts.leases ? grace * 2 / 3 : grace / 2);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(in_flight_wait);
  while (parts.http.requests_in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    pause.expires_after(std::chrono::milliseconds(50));
    co_await pause.async_wait(asio::use_awaitable);
  }
  if (parts.upstream) parts.upstream->shutdown();
  co_await parts.e2b_sandboxes.stop();               // no end-time pass from here on
  co_await parts.containers.lifecycle().shutdown();  // each stop flushes to the bucket
  if (parts.leases) parts.leases->stop();
  if (parts.durability) parts.durability->stop();
  parts.io.stop();
}

// SIGHUP reloads (and wakes the idle reaper); SIGTERM/SIGINT shut down.
void handle_signals(asio::signal_set& signals, const std::string& config_path, ops::LiveConfig& live_config,
                    const RunningParts& parts) {
  signals.async_wait(
      [&signals, &config_path, &live_config, parts](const boost::system::error_code& ec, int signo) {
        if (ec) return;
        if (signo == SIGHUP) {
          if (reload(config_path, live_config, parts.containers.admission())) {
            parts.containers.lifecycle().settings_reloaded();
            // Said once the running sandboxes have the listeners the egress policy now
            // names, so that what follows the line sees the new policy everywhere.
            auto apply = [](api::SandboxNetwork& network, std::string path) -> asio::awaitable<void> {
              co_await network.egress_policy_reloaded();
              spdlog::info("SIGHUP: configuration reloaded from {}", path);
            };
            asio::co_spawn(parts.io, apply(parts.network, config_path), asio::detached);
          }
          handle_signals(signals, config_path, live_config, parts);
          return;
        }
        spdlog::info("signal {}: shutting down", signo);
        ops::notify_systemd_stopping();
        parts.http.stop_accepting();
        asio::co_spawn(parts.io, shut_down(parts), asio::detached);
      });
}

}  // namespace

int serve(ops::Config config, const std::string& config_path) {
  signal(SIGPIPE, SIG_IGN);
  // One access-log line per request: flushed every second (and at once for warnings),
  // so a log file is current without a write per request.
  ops::configure_logging(config.log_json);
  spdlog::flush_every(std::chrono::seconds(1));
  spdlog::flush_on(spdlog::level::warn);
  fs::create_directories(config.data_dir);
  config.data_dir = fs::canonical(config.data_dir).string();

  const auto tokens = owner_tokens(config);
  std::shared_ptr<server::InterceptionCa> interception_ca = load_interception_ca(config);
  std::optional<runtime::Runtime> sandbox_runtime;
  std::string image_problem;
  start_runtime(config, interception_ca, sandbox_runtime, image_problem);
  remove_leftovers(sandbox_runtime, config.data_dir);
  runtime::Volume::make_private_mount(config.data_dir);
  UnmountOnExit unmount_on_exit{config.data_dir};

  // Append-only, in the data directory, rotated by size.
  ops::set_audit(std::make_unique<ops::AuditLog>((fs::path(config.data_dir) / "audit.log").string(),
                                                 config.audit_max_bytes,
                                                 static_cast<size_t>(config.audit_files)));
  // The metadata database: sandboxd.db in the data directory, each store on a SQLite
  // connection of its own (as always), or one PostgreSQL pool the stores share.
  const std::string sqlite_path = (fs::path(config.data_dir) / "sandboxd.db").string();
  std::shared_ptr<store::db::Database> postgres;
  if (config.metadata_backend == "postgres") {
    store::db::PostgresTimeouts timeouts;
    timeouts.lock = std::chrono::seconds(config.postgres_lock_timeout_sec);
    timeouts.statement = std::chrono::seconds(config.postgres_statement_timeout_sec);
    timeouts.idle_in_transaction = std::chrono::seconds(config.postgres_idle_in_transaction_timeout_sec);
    postgres = store::db::open_postgres(config.postgres_url, 8, timeouts);
    spdlog::info("metadata: PostgreSQL");
  }
  auto metadata_database = [&] { return postgres ? postgres : store::db::open_sqlite(sqlite_path); };
  store::Metadata metadata(metadata_database());
  store::FileStore files(metadata, config.sandbox_host_uid, config.sandbox_host_uid);
  // What tells a command that wrote nothing under uploads/ and outputs/ apart without a
  // walk (store/tree_changes.h); without inotify every command walks.
  store::TreeChanges tree_changes;
  if (tree_changes.enabled())
    files.set_tree_changes(&tree_changes);
  else
    spdlog::warn("inotify_init1: {}; every command walks its container's folders to find its outputs",
                 std::strerror(errno));

  {  // the service's objects end before the data directory's bind is unmounted
    // The I/O threads: one per core, at least two. With two (a host of one or two cores)
    // the io_context is told it is run as by one thread (concurrency hint 1; it still
    // locks, so two threads may run it): a handler posted from an I/O thread then runs
    // on that thread right after the one that posted it, instead of waking the other
    // thread for it (a futex or an interrupt of its epoll_wait, and both threads
    // contending for the scheduler's lock, at every strand hop, timer cancel and
    // immediate completion of a request: about 25 wake-ups per command, and half the
    // server's system time). The other thread still runs the reactor in turn, the
    // events it receives and the completions the blocking and store pools hand back.
    // With more cores the default hint spreads every handler over every thread.
    const unsigned io_threads = std::max(2u, std::thread::hardware_concurrency());
    asio::io_context io(io_threads == 2 ? 1 : BOOST_ASIO_CONCURRENCY_HINT_DEFAULT);
    ops::LiveConfig live_config(config);
    service::ContainerService containers(io, live_config, sandbox_runtime ? &*sandbox_runtime : nullptr,
                                         metadata);
    containers.set_unavailable_reason(image_problem);
    if (tree_changes.enabled()) {
      containers.set_tree_changes(&tree_changes);
      service::drain_tree_changes(io, tree_changes);
    }
    DurableParts durable;
    start_durable_parts(durable, io, config, metadata_database, metadata, containers);
    auto& manifest = durable.manifest;
    auto& durability = durable.durability;
    auto& leases = durable.leases;
    if (!config.cluster_enabled() && !durability) {
      // (Not in cluster mode: the shared index names containers that other replicas'
      // disks hold, and a missing upload here is not a missing upload. Not with the
      // bucket: a local copy that is missing is restored, not a loss to report.)
      service::check_store(metadata, (fs::path(config.data_dir) / "containers").string());
    }
    // File records in memory, for the containers this process alone writes: on a single
    // host all of them; in cluster mode those whose lease it holds, under the lease's
    // epoch, forgotten when it lets the lease go. (After the start-up check, which reads
    // every container once.)
    const store::FileCacheLimits file_cache{static_cast<size_t>(config.file_cache_records),
                                            static_cast<size_t>(config.file_cache_bytes)};
    if (leases) {
      metadata.enable_file_cache(
          file_cache, [&leases](const std::string& storage) { return leases->cache_epoch(storage); });
      leases->set_on_let_go(
          [&metadata](const std::string& storage) { metadata.forget_cached_files(storage); });
    } else {
      metadata.enable_file_cache(file_cache);
    }
    // Before the server: the MCP sessions its routes hold keep watches (resources/subscribe)
    // until the routes go, and each gives its share back to this.
    service::DirectoryWatches directory_watches;
    server::HttpServer http(io, server_limits(config));
    observe_requests(http);
    // Sandboxes reach the API (and the allow-listed services) through listeners in their
    // own network namespace; the owners' tokens are checked by the same object.
    std::shared_ptr<kubernetes::PeerWatch> peer_watch = watch_network_peers(io, config);
    api::SandboxNetwork network(io, http, live_config, tokens, interception_ca, peer_watch);
    containers.set_network(&network);
    // A token (a route may accept a credential of its own first: envd's signed file
    // URLs, e2b/api/envd.cc).
    http.set_authenticator(
        [&network](server::RequestContext& ctx) -> Result<void> { return network.authenticate(ctx); });
    // The upstream model's client (its own event-loop thread) exists only when one is
    // configured; /messages answers with a clear 400 otherwise.
    std::shared_ptr<model::UpstreamClient> upstream;
    if (!config.model_base_url.empty()) upstream = model::UpstreamClient::create();
    ops::HealthCheck health(io, config.data_dir);
    store::SkillStore skills(metadata_database(), config.data_dir,
                             store::find_builtin_skills_dir(config.skills_dir));
    service::SkillMounts skill_mounts(config.data_dir);
    // With the bucket, skills are the cluster's: every version in the bucket, a copy
    // made on each replica's first use, deleted everywhere.
    std::optional<store::SkillBucket> skill_bucket;
    if (durability) {
      skill_bucket.emplace(durability->bucket_client(), config.s3.prefix);
      skills.set_bucket(&*skill_bucket);
      service::keep_skill_copies_current(io, skills);
    }
    // E2B's API: its sandboxes' records in the metadata database, so a cluster's replicas
    // share them; a request for a sandbox another replica serves is relayed to it (the
    // cluster routing below), and a sandbox is ended at its end time by the replica that
    // serves it.
    // Their records are held in memory as the file records are: on a single host all of
    // them, in cluster mode those of the containers held here under a confirmed lease
    // (forgotten as the lease is let go).
    store::E2bRecords e2b_records(metadata_database());
    e2b_records.enable_cache();
    e2b::Sandboxes e2b_sandboxes(io, containers, e2b_records, config.data_dir);
    if (leases) {
      e2b_sandboxes.set_cache_scope(
          [&leases](const std::string& storage) { return leases->cache_epoch(storage); });
      leases->set_on_let_go([&metadata, &e2b_records](const std::string& storage) {
        metadata.forget_cached_files(storage);
        e2b_records.forget_storage(storage);
      });
    }
    if (leases)
      e2b_sandboxes.set_may_end_here([&leases, &metadata](std::string storage) -> asio::awaitable<bool> {
        auto holder = co_await service::store_call(
            metadata.backend(), [&leases, &storage] { return leases->holder_of(storage); });
        if (holder.elsewhere) co_return false;
        if (holder.takeover) co_return co_await leases->takeover_turn();
        co_return true;
      });
    e2b::Processes e2b_processes;
    // The processes a checkpoint of their sandbox keeps come back to it with the restore.
    e2b_processes.watch_memory(containers);
    service::ToolTasks tool_tasks;
    e2b_sandboxes.start();
    // Its snapshots and forks: copies of a sandbox's state under <dataDir>/snapshots, or
    // with the bucket in the bucket (any replica makes sandboxes from them).
    e2b::Snapshots e2b_snapshots(e2b_sandboxes, e2b_records, config.data_dir);
    std::optional<cluster::SnapshotBucket> snapshot_bucket;
    if (durability) {
      snapshot_bucket.emplace(durability->bucket_client(), config.s3.prefix, config.s3.part_bytes,
                              config.retry_after_sec);
      e2b_snapshots.set_bucket(&*snapshot_bucket);
    }
    e2b_snapshots.start();
    // What bursts freed goes back to the kernel instead of staying in the server's RSS.
    start_memory_release(io);
    // One context for every surface: the core's see it as their api::ApiContext, E2B's
    // (a library of its own, src/e2b/) as one with E2B's service beside it.
    e2b::ApiContext api{{{containers, files, live_config},
                         health,
                         directory_watches,
                         tool_tasks,
                         upstream,
                         durability ? &*durability : nullptr,
                         leases ? &*leases : nullptr,
                         nullptr,
                         peer_watch.get()},
                        e2b_sandboxes,
                        e2b_snapshots,
                        e2b_processes};
    api.skills = &skills;
    api.skill_mounts = &skill_mounts;
    api::install_surfaces(http, api, metadata_database());
    e2b::install_surfaces(http, api, tokens);
    if (leases) {
      api::install_cluster_routing(http, api, *leases);
      leases->register_replica();
      leases->start();
    }

    auto endpoint = http.listen(config.listen_host, config.listen_port);
    std::printf("sandboxd: listening on http://%s:%u (data in %s, cgroup %s)\n",
                endpoint.address().to_string().c_str(), endpoint.port(), config.data_dir.c_str(),
                sandbox_runtime ? sandbox_runtime->cgroups().version().c_str() : "none (no code execution)");
    std::fflush(stdout);
    ops::notify_systemd_when_ready(io.get_executor(), config.runtime_provider == "sandboxd",
                                   [&] { return containers.execution().probe(); });

    asio::signal_set signals(io, SIGTERM, SIGINT, SIGHUP);
    handle_signals(
        signals, config_path, live_config,
        RunningParts{io, http, containers, e2b_sandboxes, network, upstream, leases ? &*leases : nullptr,
                     durability ? &*durability : nullptr, config.cluster_shutdown_grace_sec});

    std::vector<std::thread> pool;
    for (unsigned i = 1; i < io_threads; ++i) pool.emplace_back([&io] { io.run(); });
    io.run();
    for (auto& t : pool) t.join();
    // Disk work handed off by handlers (walks, hashing) ends before the stores it uses.
    blocking_pool().join();
    if (durability) cluster::bucket_transfer_pool().join();  // (uploads' parts and their aborts)
    runtime::join_userns_holders();     // (likewise the sandboxes' user namespace holders)
    metadata.set_write_fence(nullptr);  // it refers to the leases, which end here
    if (leases) metadata.enable_file_cache(store::FileCacheLimits{0, 0});  // (so does the cache's scope)
    if (leases)  // (e2b_records ends before the leases)
      leases->set_on_let_go(
          [&metadata](const std::string& storage) { metadata.forget_cached_files(storage); });
    if (manifest) manifest->set_write_fence(nullptr);
  }
  spdlog::info("sandboxd stopped");
  return 0;  // (then unmount_on_exit)
}

}  // namespace sandboxd::app
