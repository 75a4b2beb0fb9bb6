// sandboxd's configuration: one YAML file, every key optional (docs/configuration.md). Unknown keys
// and bad values are refused with the key's path in the message.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/egress_policy.h"
#include "ops/network_peers.h"

namespace sandboxd::ops {

struct TokenEntry {
  std::string token;
  std::string owner;
};

struct InternalService {
  std::string name;
  std::string host;
  uint16_t port = 0;
};

// The name the sandboxd API has inside every sandbox (ANTHROPIC_BASE_URL points at it).
inline constexpr const char* kApiHostName = "sandboxd.internal";
// Allow-listed services per sandbox (each is a listener in the sandbox, as is the API).
inline constexpr size_t kMaxInternalServices = 31;

// NetworkPolicy peers in the services list (each resolved through the Kubernetes API).
inline constexpr size_t kMaxNetworkPeers = 32;

// Where the Kubernetes API is. Empty values: the pod's in-cluster configuration
// (KUBERNETES_SERVICE_HOST/PORT and the service account's files).
struct KubernetesSettings {
  std::string api_server;      // kubernetes.apiServer: https://host:port
  std::string ca_file;         // kubernetes.caFile: the API server's CA bundle (PEM)
  std::string token_file;      // kubernetes.tokenFile: the bearer token, re-read on every connection
  std::string namespace_name;  // kubernetes.namespace: a podSelector alone selects in this namespace
};

// A DNS host name: labels of letters, digits and '-', separated by dots.
bool valid_service_name(const std::string& name);

struct Config {
  // server
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 8080;
  std::string data_dir = "./sandboxd-data";
  uint64_t max_upload_bytes = 512ull << 20;
  int header_timeout_sec = 15;  // the whole request header must arrive in this time
  std::string web_root;         // server.webRoot: the web page's files; empty = found beside the binary
  // server.publicUrl: the scheme://host[:port] clients reach this server by (behind a
  // proxy, or a name of its own); MCP lets browser pages of that origin, and requests
  // naming that host, through its DNS-rebinding check. Empty: none but loopback names
  // and the listen address.
  std::string public_url;
  // e2b.sandboxDomain: requests whose Host is PORT-SANDBOXID.<this> go to that sandbox
  // (E2B's addressing; empty: off).
  std::string e2b_sandbox_domain;
  // Slow bodies and connection caps (see server::ServerLimits).
  int body_idle_timeout_sec = 60;               // longest wait for the next body bytes
  uint64_t body_min_rate_bytes_per_sec = 1024;  // a body's minimum average rate (0: none)
  int body_rate_grace_sec = 10;                 // the time credit a body starts with
  uint64_t max_connections = 0;                 // 0: half the process's open-file limit
  uint64_t max_connections_per_owner = 256;
  // Per client address (server.maxConnectionsPerIp, maxUnauthenticatedConnectionsPerIp;
  // 0: no cap, for a server behind a proxy that all clients reach it through).
  uint64_t max_connections_per_ip = 1024;
  uint64_t max_unauthenticated_connections_per_ip = 256;  // none of its requests authenticated yet
  // auth
  std::vector<TokenEntry> tokens;  // empty: one development token is generated at start
  std::string admin_token;
  // model (the upstream; used by /messages)
  std::string model_provider = "anthropic";
  std::string model_base_url;
  std::string model_api_key;
  std::map<std::string, std::string> model_names;  // "default" -> upstream name
  int max_tool_iterations = 20;
  int model_timeout_sec = 600;  // one upstream call, connect to last byte
  // How long code paused on a client tool (programmatic tool calling) waits for the
  // client's tool_result before the call fails in the code (about Anthropic's 4.5 min).
  int tool_result_timeout_sec = 270;
  int model_ping_interval_sec = 5;  // SSE pings while a command runs in a streamed turn
  // How deep code execution may nest: code in a sandbox calling /messages with the
  // code_execution tool is depth 1, code that call runs calling it again depth 2, ...
  int max_nesting_depth = 2;
  // features
  bool code_execution_enabled = true;
  int code_execution_timeout_sec = 60;
  // external.opensandbox
  int session_ttl_sec = 600;
  std::vector<InternalService> internal_services;
  std::vector<NetworkPeer> network_peers;  // the services list's NetworkPolicy peers
  // network.egress: outside destinations allowed (none by default), denied, and the DNS
  // servers ("address:port") allowed names are resolved with (empty: the host's).
  std::vector<EgressRule> egress_allow, egress_deny;
  std::vector<std::string> egress_resolvers;
  // Outside connections open at once per sandbox, and per owner (all its sandboxes on
  // this server); past either the next one is refused at once.
  int egress_max_connections_per_sandbox = 32;
  int egress_max_connections_per_owner = 128;
  // network.egress.rules: headers set on HTTPS requests to the hosts they name (TLS
  // terminated for those hosts only), and upstreamCaFile: one more CA file those hosts'
  // certificates are verified with (the host's trust store always).
  std::vector<HeaderRule> egress_header_rules;
  std::string egress_upstream_ca_file;
  EgressPolicy egress_policy() const { return EgressPolicy(egress_allow, egress_deny); }
  KubernetesSettings kubernetes;
  std::string image_repository = "zylon-sandbox-templates/code-execution";
  std::string image_tag = "1.1.0";
  // opensandbox.runtime
  bool quota_enabled = false;
  uint64_t quota_pods = 50;
  uint64_t quota_cpu_millis = 20000;
  uint64_t quota_memory_bytes = 40ull << 30;
  bool limit_range_enabled = false;
  uint64_t limit_cpu_millis = 1000;
  uint64_t limit_memory_bytes = 512ull << 20;
  // capacity
  int max_concurrent_executions = 16;
  int max_concurrent_executions_per_owner = 0;  // 0: no hard cap (slots go round the owners that wait)
  int queue_timeout_sec = 30;
  int retry_after_sec = 2;
  int capacity_retry_after_sec = 10;
  // codeInterpreter
  uint64_t memory_limit_bytes = 0;  // codeInterpreter.memoryLimitMb; 0 = none
  uint64_t workspace_size_bytes = 100ull << 20;
  uint64_t tmp_size_bytes = 64ull << 20;
  uint64_t output_limit_bytes = 1ull << 20;
  uint64_t pids_limit = 512;
  uint64_t open_files_limit = 0;
  // workspace (organisation settings)
  bool download_generated = true;
  bool download_uploaded = false;
  int max_history_turns = 20;  // workspace.maxHistoryTurns: turns of a thread sent upstream
  // quotas (per owner)
  uint64_t running_sandboxes_per_owner = 20;      // quotas.runningSandboxesPerOwner (0: none)
  uint64_t containers_per_owner = 2000;           // quotas.containersPerOwner: stored containers (0: none)
  uint64_t stored_bytes_per_owner = 50ull << 30;  // quotas.storedBytesPerOwner: uploads and outputs (0: none)
  uint64_t threads_per_owner = 2000;              // quotas.threadsPerOwner: chat threads (0: none)
  uint64_t skills_per_owner = 100;                // quotas.skillsPerOwner: custom skills (0: none)
  uint64_t skill_versions_per_owner = 500;  // quotas.skillVersionsPerOwner: all their versions (0: none)
  // logging
  bool log_json = false;                   // logging.format: json (JSON lines) or text
  uint64_t audit_max_bytes = 64ull << 20;  // logging.auditMaxSize: the audit log rotates past it
  int audit_files = 5;                     // logging.auditFiles: rotated audit logs kept
  // runtime
  uint32_t sandbox_host_uid = 101000;
  std::string cgroup_mode = "auto";
  // The built-in skills (one folder per skill, served as source "anthropic"); empty: the
  // folder found next to the executable or in the source tree (store/skill_store.h).
  std::string skills_dir;
  uint64_t skill_max_bytes = 30ull << 20;  // runtime.skillMaxSize: one skill version, uncompressed
  int skill_max_files = 1000;              // runtime.skillMaxFiles: files and folders together
  int prestarted_sandboxes = 2;            // started ahead, handed to new containers on demand
  int max_connections_per_sandbox = 64;    // relayed connections (API and services) at once
  // All sandboxes together (runtime.sandboxesPidsMax, sandboxesMemoryMax, sandboxesCpuMax):
  // limits on this instance's parent cgroup. 0 = a share of the host
  // (runtime/host_capacity.h); kNoLimit ("none") = no limit.
  static constexpr uint64_t kNoLimit = UINT64_MAX;
  uint64_t sandboxes_pids_max = 0;
  uint64_t sandboxes_memory_max = 0;
  uint64_t sandboxes_cpu_millis = 0;
  // "sandboxd" runs code in sandboxd's own sandboxes; "none" runs no code at all (the
  // files API works; code execution answers "code_execution provider is not configured.").
  std::string runtime_provider = "sandboxd";
  // runtime.isolation: "native" (Linux namespaces over the host's kernel) or "gvisor"
  // (every sandbox under runsc, docs/isolation-tiers.md); start-only.
  std::string isolation = "native";
  // runtime.gvisorPlatform: runsc's --platform (ptrace works everywhere; systrap and kvm
  // where the installed runsc and the host offer them).
  std::string gvisor_platform = "ptrace";
  // runtime.keepMemory: on a tier that can (gvisor), a sandbox that stops (idle, stop,
  // pause, shutdown, drain) is checkpointed and its next start restores it; false: its
  // files only, as on the native tier. Applies to the next stop.
  bool keep_memory = true;
  // runtime.pauseHoldSeconds: a stop that keeps memory for a client (idle, stop, E2B
  // pause) first pauses the sandbox in place for this long (its memory stays in it, and
  // the next command resumes it in milliseconds), then checkpoints it; 0: at once. Never
  // in cluster mode (another replica may take the container over) nor for a shutdown,
  // a drain or room for another sandbox. Applies to the next stop.
  int pause_hold_sec = 120;
  // cluster (docs/storage.md): several replicas share the metadata and serve each container
  // from one replica at a time (a lease). On when cluster_replica_id is set.
  std::string cluster_replica_id;       // cluster.replicaId: unique among the replicas
  std::string cluster_advertise_url;    // cluster.advertiseUrl: http://HOST:PORT the others relay to
  int cluster_lease_seconds = 15;       // cluster.leaseSeconds: a lease not renewed for this long is free
  int cluster_shutdown_grace_sec = 30;  // cluster.shutdownGraceSec: SIGTERM to exit, at most
  // cluster.takeoverPerSecond: containers a replica takes over a second from replicas whose
  // heartbeat ran out; cluster.takeoverBatch: the most its background takeover takes at once.
  int cluster_takeover_per_second = 500;
  int cluster_takeover_batch = 100;
  bool cluster_enabled() const { return !cluster_replica_id.empty(); }
  // storage (docs/storage.md): where file bodies are durable. "local": the host's disk only;
  // "s3": the sessions bucket holds every upload (before its 200) and the workspace and
  // outputs (flushed), the local disk is the working copy.
  std::string storage_backend = "local";
  struct S3 {
    std::string endpoint;  // http(s)://host[:port]
    std::string region = "us-east-1";
    std::string bucket;
    std::string prefix;                            // keys start with it ("sandboxd/")
    std::string access_key_id, secret_access_key;  // env SANDBOXD_S3_ACCESS_KEY_ID / _SECRET_ACCESS_KEY win
    bool force_path_style = false;
    uint64_t part_bytes = 8ull << 20;  // storage.s3.partSize: multipart threshold and part size
    // storage.s3.maxPartsInFlight: parts of one upload sent at once; an upload holds up
    // to (this + 1) x partSize in memory.
    int max_parts_in_flight = 4;
    // storage.s3.singlePutMaxSize: a body with a Content-Length past partSize and up to
    // this streams as one PUT (0: always multipart; S3 takes at most 5Gi in one PUT).
    uint64_t single_put_max_bytes = 5ull << 30;
  } s3;
  int flush_interval_sec = 30;  // storage.flushIntervalSec: the loss window of workspace/outputs
  // metadata: where containers, files, threads and skills are indexed. "sqlite" (the
  // data directory's sandboxd.db) or "postgres" (metadata.postgres.url, or the
  // SANDBOXD_POSTGRES_URL environment variable, which wins over the file).
  std::string metadata_backend = "sqlite";
  std::string postgres_url;
  // metadata.postgres.*TimeoutSec: the bounds sandboxd sets on each of its sessions
  // (store/database.h PostgresTimeouts); 0 turns one off.
  int postgres_lock_timeout_sec = 5;
  int postgres_statement_timeout_sec = 30;
  int postgres_idle_in_transaction_timeout_sec = 10;
  // metadata.fileCache: the file records held in memory for the containers this process
  // alone writes (store/file_cache.h): at most this many records and bytes of them
  // (records 0: none held, every read asks the database).
  int64_t file_cache_records = 200'000;
  uint64_t file_cache_bytes = 64ull << 20;
};

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The embedded defaults.
Config default_config();
// Parses YAML text. Throws ConfigError("key.path: problem").
Config parse_config(const std::string& yaml_text);
Config load_config_file(const std::string& path);

// Kubernetes-style quantities: "512Mi", "40Gi", "100M", "1.5Gi", plain bytes.
std::optional<uint64_t> parse_bytes(const std::string& text);
// CPU: "500m" -> 500, "2" -> 2000, "0.5" -> 500 (millicores).
std::optional<uint64_t> parse_cpu_millis(const std::string& text);

}  // namespace sandboxd::ops
