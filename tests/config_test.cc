// The configuration on its own (ops/config.h, ops/live_config.h): keys read and refused
// with their path, sizes and CPU quantities, the checks across keys, what a reload applies
// and what it keeps for a restart, and docs/configuration.md's tables against the key
// table (every key and its "reload" column), so the two cannot drift apart. Pure logic:
// no root, no server.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "ops/config.h"
#include "ops/config_reload.h"
#include "ops/live_config.h"

namespace {

using sandboxd::ops::Config;
using sandboxd::ops::ConfigError;
using sandboxd::ops::LiveConfig;
using sandboxd::ops::parse_config;
using sandboxd::ops::Reload;

// The message parse_config refuses `yaml` with ("" when it accepts it).
std::string refusal(const std::string& yaml) {
  try {
    parse_config(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigParse, AnEmptyFileIsEveryDefault) {
  const Config empty = parse_config(""), defaults;
  EXPECT_EQ(empty.listen_port, defaults.listen_port);
  EXPECT_EQ(empty.max_upload_bytes, defaults.max_upload_bytes);
  EXPECT_EQ(empty.max_concurrent_executions, 16);
  EXPECT_EQ(empty.stored_bytes_per_owner, 50ull << 30);
  EXPECT_TRUE(empty.tokens.empty());
}

TEST(ConfigParse, KeysOfEveryKindAreRead) {
  const Config c = parse_config(
      "server:\n  listen: \"[::1]:9090\"\n  maxUploadSize: 2Mi\n"
      "auth:\n  tokens:\n    - { token: secret-alice, owner: alice }\n"
      "capacity: { maxConcurrentExecutions: 3, maxConcurrentExecutionsPerOwner: 1 }\n"
      "opensandbox:\n  runtime:\n    resourceQuota: { enabled: true, cpu: 1500m, memory: 1G }\n"
      "codeInterpreter: { memoryLimitMb: 256 }\n"
      "model: { models: { default: claude-x } }\n"
      "storage: { s3: { partSize: 16Mi } }\n"
      "runtime: { sandboxesPidsMax: none, sandboxesCpuMax: 2 }\n");
  EXPECT_EQ(c.listen_host, "::1");
  EXPECT_EQ(c.listen_port, 9090);
  EXPECT_EQ(c.max_upload_bytes, 2u << 20);
  ASSERT_EQ(c.tokens.size(), 1u);
  EXPECT_EQ(c.tokens[0].owner, "alice");
  EXPECT_EQ(c.max_concurrent_executions, 3);
  EXPECT_EQ(c.max_concurrent_executions_per_owner, 1);
  EXPECT_TRUE(c.quota_enabled);
  EXPECT_EQ(c.quota_cpu_millis, 1500u);
  EXPECT_EQ(c.quota_memory_bytes, 1000000000u);
  EXPECT_EQ(c.memory_limit_bytes, 256u << 20);
  EXPECT_EQ(c.model_names.at("default"), "claude-x");
  EXPECT_EQ(c.s3.part_bytes, 16u << 20);
  EXPECT_EQ(c.sandboxes_pids_max, Config::kNoLimit);
  EXPECT_EQ(c.sandboxes_cpu_millis, 2000u);
}

TEST(ConfigParse, EveryRefusalNamesTheKey) {
  const std::map<std::string, std::string> refused = {
      {"server:\n  nope: 1\n", "server.nope: unknown key"},
      {"nope: 1\n", "nope: unknown key"},
      {"server: 3\n", "server: must be a mapping"},
      {"capacity:\n  maxConcurrentExecutions: 0\n",
       "capacity.maxConcurrentExecutions: must be between 1 and 100000"},
      {"capacity:\n  queueTimeoutSec: soon\n", "capacity.queueTimeoutSec: must be an integer, not 'soon'"},
      {"server:\n  maxUploadSize: 12 parsecs\n",
       "server.maxUploadSize: must be a size such as 512Mi or 40Gi"},
      {"opensandbox:\n  runtime:\n    limitRange:\n      cpu: 0\n",
       "opensandbox.runtime.limitRange.cpu: must be a CPU"},
      {"features:\n  codeExecution:\n    enabled: yes\n",
       "features.codeExecution.enabled: must be true or false"},
      {"auth:\n  tokens:\n    - { token: short, owner: a }\n",
       "auth.tokens[0].token: must be at least 8 characters"},
      {"auth:\n  tokens:\n    - { token: same-token, owner: a }\n    - { token: same-token, owner: b }\n",
       "auth.tokens[1].token: duplicate token"},
      {"auth:\n  tokens:\n    - { token: secret-alice, owner: a }\n  adminToken: secret-alice\n",
       "auth.adminToken: must be at least 16 characters"},
      {"codeInterpreter:\n  workspaceSizeLimit: 1Mi\n",
       "codeInterpreter.workspaceSizeLimit: must be at least 8Mi"},
      {"runtime:\n  cgroupMode: v3\n", "runtime.cgroupMode: must be auto, v1 or v2"},
      {"cluster:\n  replicaId: r1\n", "cluster.advertiseUrl: required when cluster.replicaId is set"},
      {"storage:\n  s3:\n    partSize: 1Mi\n", "storage.s3.partSize: must be between 5Mi"},
      {"metadata:\n  backend: postgres\n",
       "metadata.postgres.url: required when metadata.backend is 'postgres'"},
      {"server: [unclosed\n", "not valid YAML"},
  };
  for (const auto& [yaml, message] : refused) {
    const std::string said = refusal(yaml);
    EXPECT_NE(said.find(message), std::string::npos) << yaml << "\nsaid: " << said;
  }
}

TEST(ConfigParse, SizesAndCpuQuantities) {
  using sandboxd::ops::parse_bytes;
  using sandboxd::ops::parse_cpu_millis;
  EXPECT_EQ(parse_bytes("512Mi"), 512ull << 20);
  EXPECT_EQ(parse_bytes("1.5Ki"), 1536u);
  EXPECT_EQ(parse_bytes("2G"), 2000000000u);
  EXPECT_EQ(parse_bytes("100"), 100u);
  for (const char* bad : {"", "-1", "Mi", "1 Mi", "1mi", "1e30", "nan", "inf"})
    EXPECT_FALSE(parse_bytes(bad)) << bad;
  EXPECT_EQ(parse_cpu_millis("500m"), 500u);
  EXPECT_EQ(parse_cpu_millis("2"), 2000u);
  EXPECT_EQ(parse_cpu_millis("0.25"), 250u);
  for (const char* bad : {"", "-1", "2 cores", "1e9", "m"}) EXPECT_FALSE(parse_cpu_millis(bad)) << bad;
}

// ------------------------------------------------------------------------------ reload

TEST(ConfigReload, NewWorkKeysApplyAndRestartKeysAreNamedAndKept) {
  LiveConfig live(
      parse_config("capacity: { maxConcurrentExecutions: 4 }\nserver: { headerTimeoutSec: 15 }\n"));
  const auto restart = live.reload(
      parse_config("capacity: { maxConcurrentExecutions: 2, maxConcurrentExecutionsPerOwner: 1 }\n"
                   "quotas: { storedBytesPerOwner: 1Gi }\n"
                   "server: { headerTimeoutSec: 3, bodyIdleTimeoutSec: 5 }\n"
                   "logging: { format: json }\n"));
  const auto now = live.get();
  EXPECT_EQ(now->max_concurrent_executions, 2);
  EXPECT_EQ(now->max_concurrent_executions_per_owner, 1) << "applied to new work, as the admission line is";
  EXPECT_EQ(now->stored_bytes_per_owner, 1ull << 30);
  EXPECT_EQ(now->header_timeout_sec, 15) << "kept for a restart";
  EXPECT_EQ(now->body_idle_timeout_sec, 60);
  EXPECT_FALSE(now->log_json);
  EXPECT_EQ(restart, (std::vector<std::string>{"server.headerTimeoutSec", "server.bodyIdleTimeoutSec",
                                               "logging.format"}));
}

TEST(ConfigReload, AnUnchangedFileNamesNothing) {
  const std::string yaml =
      "server: { listen: \"127.0.0.1:0\", dataDir: /tmp/./sandboxd-config-test }\n"
      "auth:\n  tokens:\n    - { token: secret-alice, owner: alice }\n"
      "external:\n  opensandbox:\n    codeExecution:\n      internal:\n        services:\n"
      "          - { name: db.internal, host: 10.0.0.12, port: 5432 }\n"
      "storage: { backend: s3, s3: { endpoint: \"http://127.0.0.1:9\", bucket: sessions, accessKeyId: k, "
      "secretAccessKey: s } }\n";
  Config started = parse_config(yaml);
  started.data_dir = "/tmp/sandboxd-config-test";  // as serve() holds it: the canonical path
  LiveConfig live(started);
  EXPECT_EQ(live.reload(parse_config(yaml)), std::vector<std::string>{});
}

TEST(ConfigReload, ARestartKeyOfAListOrANestedSectionIsNamedByItsPath) {
  LiveConfig live(parse_config("auth:\n  tokens:\n    - { token: secret-alice, owner: alice }\n"));
  const auto restart = live.reload(
      parse_config("auth:\n  tokens:\n    - { token: secret-alice, owner: alicia }\n"
                   "external:\n  opensandbox:\n    codeExecution:\n      internal:\n        services:\n"
                   "          - { name: db.internal, host: 10.0.0.12, port: 5432 }\n"
                   "storage: { s3: { maxPartsInFlight: 2 } }\n"));
  EXPECT_EQ(restart,
            (std::vector<std::string>{"auth.tokens", "external.opensandbox.codeExecution.internal.services",
                                      "storage.s3.maxPartsInFlight"}));
  EXPECT_EQ(live.get()->tokens[0].owner, "alice");
  EXPECT_TRUE(live.get()->internal_services.empty());
  EXPECT_EQ(live.get()->s3.max_parts_in_flight, 4);
}

// Every key with Reload::new_work, set in a file to something else than its default,
// changes the live configuration; nothing is named for a restart.
TEST(ConfigReload, EveryNewWorkKeyChangesTheLiveConfiguration) {
  const std::string yaml =
      "server: { maxUploadSize: 1Mi, publicUrl: \"https://sandboxes.example.com\" }\n"
      "model: { maxNestingDepth: 1, models: { default: m }, maxToolIterations: 3, timeoutSec: 9, "
      "toolResultTimeoutSec: 8, pingIntervalSec: 7 }\n"
      "features: { codeExecution: { enabled: false, timeout: 5 } }\n"
      "external: { opensandbox: { sessionTTLSeconds: 11 } }\n"
      "opensandbox: { runtime: { resourceQuota: { enabled: true, pods: 3, cpu: 3, memory: 3Gi }, "
      "limitRange: { enabled: true, cpu: 2, memory: 2Gi } } }\n"
      "capacity: { maxConcurrentExecutionsPerOwner: 2, maxConcurrentExecutions: 5, queueTimeoutSec: 4, "
      "retryAfterSec: 6, capacityRetryAfterSec: 12 }\n"
      "codeInterpreter: { memoryLimitMb: 100, tmpSizeLimit: 9Mi, outputLimit: 2Ki, pidsLimit: 99, "
      "openFilesLimit: 77 }\n"
      "workspace: { maxHistoryTurns: 4, downloads: { generatedResources: false, uploadedResources: true } }\n"
      "quotas: { storedBytesPerOwner: 1Gi, threadsPerOwner: 1, skillsPerOwner: 1, skillVersionsPerOwner: 1, "
      "containersPerOwner: 1, runningSandboxesPerOwner: 1 }\n"
      "runtime: { skillMaxSize: 2Ki, skillMaxFiles: 2, keepMemory: false, pauseHoldSeconds: 7 }\n"
      "network: { egress: { allow: [pypi.internal], deny: [10.0.0.0/8], resolvers: [10.0.0.2], "
      "maxConnectionsPerSandbox: 5, maxConnectionsPerOwner: 9, "
      "rules: [ { host: pypi.internal, headers: { X-Key: k } } ] } }\n";
  size_t new_work = 0;
  for (const auto& key : sandboxd::ops::key_reload_policies()) {
    if (key.reload != Reload::new_work) continue;
    ++new_work;
    // Only this key from the file: the reloaded configuration differs from the defaults.
    EXPECT_NE(yaml.find(key.path.substr(key.path.rfind('.') + 1) + ":"), std::string::npos)
        << key.path << " is new work: set it in this test's file";
  }
  EXPECT_EQ(new_work, 47u) << "a key changed its reload: this test's file and the docs go with it";
  LiveConfig live(Config{});
  EXPECT_EQ(live.reload(parse_config(yaml)), std::vector<std::string>{});
  const auto c = live.get();
  EXPECT_EQ(c->max_upload_bytes, 1u << 20);
  EXPECT_FALSE(c->keep_memory);
  EXPECT_EQ(c->pause_hold_sec, 7);
  EXPECT_TRUE(c->egress_policy().allows_name("pypi.internal", 443));
  EXPECT_TRUE(c->egress_policy().denies_address(0x0A000001, 443));
  EXPECT_EQ(c->egress_resolvers, std::vector<std::string>{"10.0.0.2:53"});
  EXPECT_EQ(c->egress_max_connections_per_sandbox, 5);
  EXPECT_EQ(c->egress_max_connections_per_owner, 9);
  ASSERT_EQ(c->egress_header_rules.size(), 1u);
  EXPECT_EQ(c->egress_header_rules[0].host, "pypi.internal");
  EXPECT_EQ(c->public_url, "https://sandboxes.example.com");
  EXPECT_EQ(c->max_nesting_depth, 1);
  EXPECT_EQ(c->model_names.at("default"), "m");
  EXPECT_EQ(c->max_tool_iterations, 3);
  EXPECT_EQ(c->model_timeout_sec, 9);
  EXPECT_EQ(c->tool_result_timeout_sec, 8);
  EXPECT_EQ(c->model_ping_interval_sec, 7);
  EXPECT_FALSE(c->code_execution_enabled);
  EXPECT_EQ(c->code_execution_timeout_sec, 5);
  EXPECT_EQ(c->session_ttl_sec, 11);
  EXPECT_TRUE(c->quota_enabled);
  EXPECT_EQ(c->quota_pods, 3u);
  EXPECT_EQ(c->quota_cpu_millis, 3000u);
  EXPECT_EQ(c->quota_memory_bytes, 3ull << 30);
  EXPECT_TRUE(c->limit_range_enabled);
  EXPECT_EQ(c->limit_cpu_millis, 2000u);
  EXPECT_EQ(c->limit_memory_bytes, 2ull << 30);
  EXPECT_EQ(c->max_concurrent_executions_per_owner, 2);
  EXPECT_EQ(c->max_concurrent_executions, 5);
  EXPECT_EQ(c->queue_timeout_sec, 4);
  EXPECT_EQ(c->retry_after_sec, 6);
  EXPECT_EQ(c->capacity_retry_after_sec, 12);
  EXPECT_EQ(c->memory_limit_bytes, 100u << 20);
  EXPECT_EQ(c->tmp_size_bytes, 9u << 20);
  EXPECT_EQ(c->output_limit_bytes, 2u << 10);
  EXPECT_EQ(c->pids_limit, 99u);
  EXPECT_EQ(c->open_files_limit, 77u);
  EXPECT_EQ(c->max_history_turns, 4);
  EXPECT_FALSE(c->download_generated);
  EXPECT_TRUE(c->download_uploaded);
  EXPECT_EQ(c->stored_bytes_per_owner, 1ull << 30);
  EXPECT_EQ(c->threads_per_owner, 1u);
  EXPECT_EQ(c->skills_per_owner, 1u);
  EXPECT_EQ(c->skill_versions_per_owner, 1u);
  EXPECT_EQ(c->containers_per_owner, 1u);
  EXPECT_EQ(c->running_sandboxes_per_owner, 1u);
  EXPECT_EQ(c->skill_max_bytes, 2u << 10);
  EXPECT_EQ(c->skill_max_files, 2);
}

// ------------------------------------------------------------- the docs' table and the keys

// The keys of docs/configuration.md's "Every key" tables with their "reload" column: a
// `### \`section\`` heading names the prefix, a row's first cell the key (or several,
// comma-separated).
std::map<std::string, std::string> documented_reload() {
  std::ifstream in(std::string(SANDBOXD_SOURCE_DIR) + "/docs/configuration.md");
  EXPECT_TRUE(in) << "docs/configuration.md";
  std::map<std::string, std::string> out;
  const std::regex heading("^### `([^`]+)`.*");
  const std::regex key("`([^`]+)`");
  std::string line, section;
  bool reload_table = false;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, heading)) {
      section = m[1];
      reload_table = false;
      continue;
    }
    if (line.starts_with("## ")) section.clear();
    if (line.starts_with("| key | default | reload |")) {
      reload_table = true;
      continue;
    }
    if (!reload_table || !line.starts_with("| `")) {
      if (!line.starts_with("|")) reload_table = false;
      continue;
    }
    std::vector<std::string> cells;
    std::stringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) {
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      cells.push_back(cell);
    }
    EXPECT_GE(cells.size(), 4u) << line;
    if (cells.size() < 4) continue;
    const std::string& names = cells[0];
    for (auto it = std::sregex_iterator(names.begin(), names.end(), key); it != std::sregex_iterator();
         ++it) {
      const std::string path = section + "." + (*it)[1].str();
      EXPECT_FALSE(out.contains(path)) << path << " is in the docs twice";
      out[path] = cells[2];
    }
  }
  return out;
}

TEST(ConfigDocs, TheDocsTableAndTheKeyTableHaveTheSameKeysAndReload) {
  const auto documented = documented_reload();
  EXPECT_GT(documented.size(), 50u) << "the tables were read";
  std::map<std::string, std::string> table;
  for (const auto& key : sandboxd::ops::key_reload_policies())
    table[key.path] = key.reload == Reload::new_work ? "new work" : "restart";
  for (const auto& [path, reload] : table) {
    auto found = documented.find(path);
    if (found == documented.end()) {
      ADD_FAILURE() << path << " is a key (src/ops/config.cc) missing from docs/configuration.md";
      continue;
    }
    EXPECT_EQ(found->second, reload) << path << ": the docs' reload column against the key table";
  }
  for (const auto& [path, reload] : documented)
    EXPECT_TRUE(table.contains(path)) << path << " is documented but is no key of src/ops/config.cc";
}

}  // namespace
