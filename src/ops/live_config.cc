#include "ops/live_config.h"

#include <filesystem>

namespace sandboxd::ops {

std::vector<std::string> LiveConfig::reload(const Config& loaded) {
  auto current = get();
  auto next = std::make_shared<Config>(*current);
  // What applies to new work.
  next->code_execution_enabled = loaded.code_execution_enabled;
  next->code_execution_timeout_sec = loaded.code_execution_timeout_sec;
  next->session_ttl_sec = loaded.session_ttl_sec;
  next->max_concurrent_executions = loaded.max_concurrent_executions;
  next->queue_timeout_sec = loaded.queue_timeout_sec;
  next->retry_after_sec = loaded.retry_after_sec;
  next->capacity_retry_after_sec = loaded.capacity_retry_after_sec;
  next->quota_enabled = loaded.quota_enabled;
  next->quota_pods = loaded.quota_pods;
  next->quota_cpu_millis = loaded.quota_cpu_millis;
  next->quota_memory_bytes = loaded.quota_memory_bytes;
  next->limit_range_enabled = loaded.limit_range_enabled;
  next->limit_cpu_millis = loaded.limit_cpu_millis;
  next->limit_memory_bytes = loaded.limit_memory_bytes;
  next->memory_limit_bytes = loaded.memory_limit_bytes;
  next->tmp_size_bytes = loaded.tmp_size_bytes;
  next->output_limit_bytes = loaded.output_limit_bytes;
  next->pids_limit = loaded.pids_limit;
  next->open_files_limit = loaded.open_files_limit;
  next->max_upload_bytes = loaded.max_upload_bytes;
  next->download_generated = loaded.download_generated;
  next->download_uploaded = loaded.download_uploaded;
  next->max_history_turns = loaded.max_history_turns;
  next->model_names = loaded.model_names;
  next->max_tool_iterations = loaded.max_tool_iterations;
  next->model_timeout_sec = loaded.model_timeout_sec;
  next->tool_result_timeout_sec = loaded.tool_result_timeout_sec;
  next->model_ping_interval_sec = loaded.model_ping_interval_sec;
  next->max_nesting_depth = loaded.max_nesting_depth;
  // What the running server is built on: a new value waits for a restart.
  std::vector<std::string> kept;
  auto keep = [&](bool same, const char* key) {
    if (!same) kept.emplace_back(key);
  };
  keep(loaded.listen_host == current->listen_host && loaded.listen_port == current->listen_port,
       "server.listen");
  std::error_code ec;
  keep(std::filesystem::weakly_canonical(loaded.data_dir, ec).string() == current->data_dir,
       "server.dataDir");
  keep(loaded.header_timeout_sec == current->header_timeout_sec, "server.headerTimeoutSec");
  keep(loaded.web_root == current->web_root, "server.webRoot");
  keep(loaded.max_connections == current->max_connections &&
           loaded.max_connections_per_owner == current->max_connections_per_owner &&
           loaded.max_connections_per_ip == current->max_connections_per_ip &&
           loaded.max_unauthenticated_connections_per_ip == current->max_unauthenticated_connections_per_ip,
       "server.maxConnections*");
  bool same_tokens = loaded.tokens.size() == current->tokens.size();
  for (size_t i = 0; same_tokens && i < loaded.tokens.size(); ++i)
    same_tokens = loaded.tokens[i].token == current->tokens[i].token &&
                  loaded.tokens[i].owner == current->tokens[i].owner;
  keep(same_tokens, "auth.tokens");
  keep(loaded.admin_token == current->admin_token, "auth.adminToken");
  keep(loaded.cluster_replica_id == current->cluster_replica_id &&
           loaded.cluster_advertise_url == current->cluster_advertise_url &&
           loaded.cluster_lease_seconds == current->cluster_lease_seconds &&
           loaded.cluster_shutdown_grace_sec == current->cluster_shutdown_grace_sec,
       "cluster");
  keep(loaded.model_base_url == current->model_base_url && loaded.model_api_key == current->model_api_key,
       "model.baseUrl/apiKey");
  keep(loaded.workspace_size_bytes == current->workspace_size_bytes, "codeInterpreter.workspaceSizeLimit");
  keep(loaded.sandbox_host_uid == current->sandbox_host_uid && loaded.cgroup_mode == current->cgroup_mode &&
           loaded.skills_dir == current->skills_dir &&
           loaded.prestarted_sandboxes == current->prestarted_sandboxes &&
           loaded.runtime_provider == current->runtime_provider && loaded.isolation == current->isolation &&
           loaded.gvisor_platform == current->gvisor_platform &&
           loaded.max_connections_per_sandbox == current->max_connections_per_sandbox &&
           loaded.sandboxes_pids_max == current->sandboxes_pids_max &&
           loaded.sandboxes_memory_max == current->sandboxes_memory_max &&
           loaded.sandboxes_cpu_millis == current->sandboxes_cpu_millis,
       "runtime");
  // Every sandbox (pre-started ones too) is built with its listeners.
  bool same_services = loaded.internal_services.size() == current->internal_services.size();
  for (size_t i = 0; same_services && i < loaded.internal_services.size(); ++i) {
    const auto &a = loaded.internal_services[i], &b = current->internal_services[i];
    same_services = a.name == b.name && a.host == b.host && a.port == b.port;
  }
  same_services = same_services && loaded.network_peers.size() == current->network_peers.size();
  for (size_t i = 0; same_services && i < loaded.network_peers.size(); ++i)
    same_services = loaded.network_peers[i].source == current->network_peers[i].source;
  keep(same_services, "external.opensandbox.codeExecution.internal.services");
  keep(loaded.kubernetes.api_server == current->kubernetes.api_server &&
           loaded.kubernetes.ca_file == current->kubernetes.ca_file &&
           loaded.kubernetes.token_file == current->kubernetes.token_file &&
           loaded.kubernetes.namespace_name == current->kubernetes.namespace_name,
       "kubernetes");
  keep(loaded.metadata_backend == current->metadata_backend && loaded.postgres_url == current->postgres_url &&
           loaded.postgres_lock_timeout_sec == current->postgres_lock_timeout_sec &&
           loaded.postgres_statement_timeout_sec == current->postgres_statement_timeout_sec &&
           loaded.postgres_idle_in_transaction_timeout_sec ==
               current->postgres_idle_in_transaction_timeout_sec,
       "metadata");
  keep(loaded.image_repository == current->image_repository && loaded.image_tag == current->image_tag,
       "external.opensandbox.codeExecution.image");
  keep(loaded.storage_backend == current->storage_backend && loaded.s3.endpoint == current->s3.endpoint &&
           loaded.s3.region == current->s3.region && loaded.s3.bucket == current->s3.bucket &&
           loaded.s3.prefix == current->s3.prefix && loaded.s3.access_key_id == current->s3.access_key_id &&
           loaded.s3.secret_access_key == current->s3.secret_access_key &&
           loaded.s3.force_path_style == current->s3.force_path_style &&
           loaded.s3.part_bytes == current->s3.part_bytes &&
           loaded.s3.max_parts_in_flight == current->s3.max_parts_in_flight &&
           loaded.s3.single_put_max_bytes == current->s3.single_put_max_bytes &&
           loaded.flush_interval_sec == current->flush_interval_sec,
       "storage");
  current_.store(std::move(next));
  return kept;
}

}  // namespace sandboxd::ops
