#include "ops/config.h"

#include "ops/config_env.h"
#include "ops/network_peers.h"

#include <cctype>

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace sandboxd::ops {
namespace {

std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

// Refuses keys the schema does not know, naming the first one.
void only_keys(const YAML::Node& node, const std::string& path, std::initializer_list<const char*> allowed) {
  if (!node) return;
  if (!node.IsMap()) throw ConfigError((path.empty() ? "(top level)" : path) + ": must be a mapping");
  std::set<std::string> known(allowed.begin(), allowed.end());
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) throw ConfigError((path.empty() ? "(top level)" : path) + ": keys must be plain names");
    std::string key = entry.first.Scalar();
    if (!known.count(key)) throw ConfigError(join(path, key) + ": unknown key");
  }
}

std::string scalar(const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) throw ConfigError(path + ": must be a scalar value");
  return node.Scalar();
}

bool read_bool(const YAML::Node& node, const std::string& path) {
  std::string v = scalar(node, path);
  if (v == "true") return true;
  if (v == "false") return false;
  throw ConfigError(path + ": must be true or false, not '" + v + "'");
}

int64_t read_int(const YAML::Node& node, const std::string& path, int64_t min, int64_t max) {
  std::string v = scalar(node, path);
  try {
    size_t pos = 0;
    long long value = std::stoll(v, &pos);
    if (pos != v.size()) throw std::invalid_argument("trailing");
    if (value < min || value > max)
      throw ConfigError(path + ": must be between " + std::to_string(min) + " and " + std::to_string(max));
    return value;
  } catch (const ConfigError&) {
    throw;
  } catch (...) {
    throw ConfigError(path + ": must be an integer, not '" + v + "'");
  }
}

uint64_t read_bytes(const YAML::Node& node, const std::string& path) {
  std::string v = scalar(node, path);
  auto bytes = parse_bytes(v);
  if (!bytes) throw ConfigError(path + ": must be a size such as 512Mi or 40Gi, not '" + v + "'");
  return *bytes;
}

uint64_t read_cpu(const YAML::Node& node, const std::string& path) {
  std::string v = scalar(node, path);
  auto millis = parse_cpu_millis(v);
  if (!millis || *millis == 0) throw ConfigError(path + ": must be a CPU quantity such as 500m or 2, not '" + v + "'");
  return *millis;
}

template <typename F>
void with(const YAML::Node& parent, const char* key, const std::string& path, F&& apply) {
  if (const YAML::Node child = parent[key]; child && !child.IsNull()) apply(child, join(path, key));
}

}  // namespace

namespace {

// The non-negative, finite number at the start of `text`, and where its unit starts.
std::optional<double> leading_number(const std::string& text, size_t& unit_at) {
  if (text.empty()) return std::nullopt;
  double value;
  try {
    value = std::stod(text, &unit_at);
  } catch (...) {
    return std::nullopt;
  }
  if (value < 0 || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace

std::optional<uint64_t> parse_bytes(const std::string& text) {
  size_t pos = 0;
  auto number = leading_number(text, pos);
  if (!number) return std::nullopt;
  const double value = *number;
  std::string unit = text.substr(pos);
  static const std::pair<const char*, double> units[] = {
      {"", 1},       {"k", 1e3},          {"K", 1e3},          {"M", 1e6},          {"G", 1e9},
      {"T", 1e12},   {"Ki", 1024.0},      {"Mi", 1048576.0},   {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
  for (const auto& [name, factor] : units) {
    if (unit == name) {
      double bytes = value * factor;
      if (bytes > 1.8e19) return std::nullopt;
      return static_cast<uint64_t>(std::llround(bytes));
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> parse_cpu_millis(const std::string& text) {
  size_t pos = 0;
  auto number = leading_number(text, pos);
  if (!number || *number > 1e6) return std::nullopt;
  const double value = *number;
  std::string unit = text.substr(pos);
  if (unit == "m") return static_cast<uint64_t>(std::llround(value));
  if (unit.empty()) return static_cast<uint64_t>(std::llround(value * 1000));
  return std::nullopt;
}

Config default_config() { return Config{}; }

bool valid_service_name(const std::string& name) {
  if (name.empty() || name.size() > 253 || name.front() == '.' || name.back() == '.') return false;
  size_t label = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    char ch = name[i];
    if (ch == '.') {
      if (label == 0 || name[i - 1] == '-') return false;
      label = 0;
      continue;
    }
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') return false;
    if (ch == '-' && label == 0) return false;
    if (++label > 63) return false;
  }
  return name.back() != '-';
}

namespace {
Config parse_config_checked(const std::string& yaml_text);

// cluster: { replicaId, advertiseUrl, leaseSeconds, shutdownGraceSec, takeoverPerSecond,
// takeoverBatch }. The advertised
// URL is plain http://HOST[:PORT] (the replicas' own network; no path: requests keep
// theirs when relayed).
void parse_cluster(const YAML::Node& n, const std::string& p, Config& c) {
  only_keys(n, p,
            {"replicaId", "advertiseUrl", "leaseSeconds", "shutdownGraceSec", "takeoverPerSecond",
             "takeoverBatch"});
  with(n, "replicaId", p, [&](const YAML::Node& v, const std::string& kp) {
    c.cluster_replica_id = scalar(v, kp);
    if (c.cluster_replica_id.empty() || c.cluster_replica_id.size() > 128) throw ConfigError(kp + ": must be 1-128 characters");
    for (unsigned char ch : c.cluster_replica_id)
      if (!std::isalnum(ch) && ch != '-' && ch != '_' && ch != '.')
        throw ConfigError(kp + ": must be letters, digits, '-', '_' and '.'");
  });
  with(n, "advertiseUrl", p, [&](const YAML::Node& v, const std::string& kp) {
    std::string url = scalar(v, kp);
    constexpr std::string_view kScheme = "http://";
    if (!url.starts_with(kScheme)) throw ConfigError(kp + ": must be an http:// URL (http://HOST:PORT)");
    std::string authority = url.substr(kScheme.size());
    if (!authority.empty() && authority.back() == '/') authority.pop_back();
    if (authority.empty() || authority.find_first_of("/?#@ ") != std::string::npos)
      throw ConfigError(kp + ": must be http://HOST:PORT with no path, query or user");
    c.cluster_advertise_url = url;
  });
  with(n, "leaseSeconds", p, [&](const YAML::Node& v, const std::string& kp) { c.cluster_lease_seconds = static_cast<int>(read_int(v, kp, 1, 3600)); });
  with(n, "shutdownGraceSec", p, [&](const YAML::Node& v, const std::string& kp) { c.cluster_shutdown_grace_sec = static_cast<int>(read_int(v, kp, 1, 3600)); });
  with(n, "takeoverPerSecond", p, [&](const YAML::Node& v, const std::string& kp) {
    c.cluster_takeover_per_second = static_cast<int>(read_int(v, kp, 1, 100000));
  });
  with(n, "takeoverBatch", p, [&](const YAML::Node& v, const std::string& kp) {
    c.cluster_takeover_batch = static_cast<int>(read_int(v, kp, 1, 10000));
  });
  if (!c.cluster_replica_id.empty() && c.cluster_advertise_url.empty())
    throw ConfigError(p + ".advertiseUrl: required when cluster.replicaId is set (where the other replicas reach this one)");
  if (c.cluster_replica_id.empty() && !c.cluster_advertise_url.empty())
    throw ConfigError(p + ".replicaId: required when cluster.advertiseUrl is set");
}
}  // namespace

// Whatever yaml-cpp throws on a strange document (a complex key, a bad conversion) is
// a ConfigError too: a bad file stops the start with a message, never a crash.
Config parse_config(const std::string& yaml_text) {
  try {
    return parse_config_checked(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(std::string("not a valid configuration: ") + e.what());
  }
}

namespace {

// storage: {backend, s3: {...}, flushIntervalSec}. The S3 secrets may come from the
// environment instead (a Kubernetes Secret): SANDBOXD_S3_ACCESS_KEY_ID and
// SANDBOXD_S3_SECRET_ACCESS_KEY win over the file.
void parse_storage(const YAML::Node& root, Config& c) {
  with(root, "storage", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"backend", "s3", "flushIntervalSec"});
    with(n, "backend", p, [&](const YAML::Node& v, const std::string& kp) {
      c.storage_backend = scalar(v, kp);
      if (c.storage_backend != "local" && c.storage_backend != "s3") throw ConfigError(kp + ": must be 'local' or 's3'");
    });
    with(n, "flushIntervalSec", p, [&](const YAML::Node& v, const std::string& kp) { c.flush_interval_sec = static_cast<int>(read_int(v, kp, 1, 86400)); });
    with(n, "s3", p, [&](const YAML::Node& s3, const std::string& sp) {
      only_keys(s3, sp, {"endpoint", "region", "bucket", "prefix", "accessKeyId", "secretAccessKey", "forcePathStyle", "partSize",
                         "maxPartsInFlight", "singlePutMaxSize"});
      with(s3, "endpoint", sp, [&](const YAML::Node& v, const std::string& kp) {
        c.s3.endpoint = scalar(v, kp);
        const bool http = c.s3.endpoint.rfind("http://", 0) == 0, https = c.s3.endpoint.rfind("https://", 0) == 0;
        const size_t host_at = http ? 7 : https ? 8 : 0;
        if (!host_at || c.s3.endpoint.size() == host_at || c.s3.endpoint.find_first_of("?# \t", host_at) != std::string::npos ||
            c.s3.endpoint.find('/', host_at) < c.s3.endpoint.size() - 1)
          throw ConfigError(kp + ": must be an http:// or https:// URL of the S3 service (scheme, host and port only)");
      });
      with(s3, "region", sp, [&](const YAML::Node& v, const std::string& kp) {
        c.s3.region = scalar(v, kp);
        if (c.s3.region.empty() || c.s3.region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
          throw ConfigError(kp + ": must be a region name such as us-east-1");
      });
      with(s3, "bucket", sp, [&](const YAML::Node& v, const std::string& kp) {
        c.s3.bucket = scalar(v, kp);
        if (c.s3.bucket.size() < 3 || c.s3.bucket.size() > 63 ||
            c.s3.bucket.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string::npos)
          throw ConfigError(kp + ": must be a bucket name (3-63 characters of a-z, 0-9, '.' and '-')");
      });
      with(s3, "prefix", sp, [&](const YAML::Node& v, const std::string& kp) {
        c.s3.prefix = scalar(v, kp);
        if (c.s3.prefix.size() > 200 || (!c.s3.prefix.empty() && c.s3.prefix.front() == '/') || c.s3.prefix.find("//") != std::string::npos ||
            c.s3.prefix.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-") != std::string::npos)
          throw ConfigError(kp + ": must be at most 200 characters of letters, digits, '/', '.', '_' and '-', not starting with '/'");
      });
      with(s3, "accessKeyId", sp, [&](const YAML::Node& v, const std::string& kp) { c.s3.access_key_id = scalar(v, kp); });
      with(s3, "secretAccessKey", sp, [&](const YAML::Node& v, const std::string& kp) { c.s3.secret_access_key = scalar(v, kp); });
      with(s3, "forcePathStyle", sp, [&](const YAML::Node& v, const std::string& kp) { c.s3.force_path_style = read_bool(v, kp); });
      with(s3, "partSize", sp, [&](const YAML::Node& v, const std::string& kp) {
        c.s3.part_bytes = read_bytes(v, kp);
        if (c.s3.part_bytes < (5u << 20) || c.s3.part_bytes > (512u << 20))
          throw ConfigError(kp + ": must be between 5Mi (S3's smallest part) and 512Mi");
      });
      with(s3, "maxPartsInFlight", sp, [&](const YAML::Node& v, const std::string& kp) {
        c.s3.max_parts_in_flight = static_cast<int>(read_int(v, kp, 1, 16));
      });
      with(s3, "singlePutMaxSize", sp, [&](const YAML::Node& v, const std::string& kp) {
        c.s3.single_put_max_bytes = read_bytes(v, kp);
        if (c.s3.single_put_max_bytes > (5ull << 30)) throw ConfigError(kp + ": must be at most 5Gi (S3's largest PUT)");
      });
    });
  });
  if (const char* key = std::getenv("SANDBOXD_S3_ACCESS_KEY_ID"); key && *key) c.s3.access_key_id = key;
  if (const char* secret = std::getenv("SANDBOXD_S3_SECRET_ACCESS_KEY"); secret && *secret) c.s3.secret_access_key = secret;
  if (c.storage_backend != "s3") return;
  if (c.s3.endpoint.empty()) throw ConfigError("storage.s3.endpoint: required when storage.backend is s3");
  if (c.s3.bucket.empty()) throw ConfigError("storage.s3.bucket: required when storage.backend is s3");
  if (c.s3.access_key_id.empty())
    throw ConfigError("storage.s3.accessKeyId: required when storage.backend is s3 (or SANDBOXD_S3_ACCESS_KEY_ID)");
  if (c.s3.secret_access_key.empty())
    throw ConfigError("storage.s3.secretAccessKey: required when storage.backend is s3 (or SANDBOXD_S3_SECRET_ACCESS_KEY)");
}

Config parse_config_checked(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(std::string("not valid YAML: ") + e.what());
  }
  apply_environment_overrides(root);  // SANDBOXD_* variables win over the file (ops/config_env.h)
  Config c;
  if (!root || root.IsNull()) return c;
  only_keys(root, "", {"server", "auth", "model", "features", "external", "opensandbox", "capacity",
                       "codeInterpreter", "workspace", "runtime", "logging", "quotas", "cluster", "storage", "metadata",
                       "kubernetes"});
  std::string peers_path;  // where the NetworkPolicy peers are, for the message if they cannot be resolved

  with(root, "server", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"listen", "dataDir", "maxUploadSize", "headerTimeoutSec", "webRoot", "bodyIdleTimeoutSec",
                     "bodyMinRateBytesPerSec", "bodyRateGraceSec", "maxConnections", "maxConnectionsPerOwner",
                     "maxConnectionsPerIp", "maxUnauthenticatedConnectionsPerIp"});
    with(n, "webRoot", p, [&](const YAML::Node& v, const std::string& kp) { c.web_root = scalar(v, kp); });
    with(n, "headerTimeoutSec", p, [&](const YAML::Node& v, const std::string& kp) { c.header_timeout_sec = static_cast<int>(read_int(v, kp, 1, 3600)); });
    with(n, "bodyIdleTimeoutSec", p, [&](const YAML::Node& v, const std::string& kp) { c.body_idle_timeout_sec = static_cast<int>(read_int(v, kp, 1, 3600)); });
    with(n, "bodyMinRateBytesPerSec", p, [&](const YAML::Node& v, const std::string& kp) { c.body_min_rate_bytes_per_sec = static_cast<uint64_t>(read_int(v, kp, 0, int64_t{1} << 40)); });
    with(n, "bodyRateGraceSec", p, [&](const YAML::Node& v, const std::string& kp) { c.body_rate_grace_sec = static_cast<int>(read_int(v, kp, 0, 3600)); });
    with(n, "maxConnections", p, [&](const YAML::Node& v, const std::string& kp) { c.max_connections = static_cast<uint64_t>(read_int(v, kp, 0, 1000000)); });
    with(n, "maxConnectionsPerOwner", p, [&](const YAML::Node& v, const std::string& kp) { c.max_connections_per_owner = static_cast<uint64_t>(read_int(v, kp, 1, 1000000)); });
    with(n, "maxConnectionsPerIp", p, [&](const YAML::Node& v, const std::string& kp) { c.max_connections_per_ip = static_cast<uint64_t>(read_int(v, kp, 0, 1000000)); });
    with(n, "maxUnauthenticatedConnectionsPerIp", p, [&](const YAML::Node& v, const std::string& kp) { c.max_unauthenticated_connections_per_ip = static_cast<uint64_t>(read_int(v, kp, 0, 1000000)); });
    with(n, "listen", p, [&](const YAML::Node& v, const std::string& kp) {
      std::string listen = scalar(v, kp);
      auto colon = listen.rfind(':');
      if (colon == std::string::npos) throw ConfigError(kp + ": must be HOST:PORT");
      c.listen_host = listen.substr(0, colon);
      if (c.listen_host.size() > 2 && c.listen_host.front() == '[') c.listen_host = c.listen_host.substr(1, c.listen_host.size() - 2);
      YAML::Node port_node(listen.substr(colon + 1));
      c.listen_port = static_cast<uint16_t>(read_int(port_node, kp + " (port)", 0, 65535));
    });
    with(n, "dataDir", p, [&](const YAML::Node& v, const std::string& kp) { c.data_dir = scalar(v, kp); });
    with(n, "maxUploadSize", p, [&](const YAML::Node& v, const std::string& kp) { c.max_upload_bytes = read_bytes(v, kp); });
  });

  with(root, "auth", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"tokens", "adminToken"});
    with(n, "tokens", p, [&](const YAML::Node& list, const std::string& kp) {
      if (!list.IsSequence()) throw ConfigError(kp + ": must be a list of {token, owner}");
      for (size_t i = 0; i < list.size(); ++i) {
        std::string ip = kp + "[" + std::to_string(i) + "]";
        only_keys(list[i], ip, {"token", "owner"});
        if (!list[i]["token"] || !list[i]["owner"]) throw ConfigError(ip + ": needs token and owner");
        TokenEntry entry{scalar(list[i]["token"], ip + ".token"), scalar(list[i]["owner"], ip + ".owner")};
        if (entry.token.size() < 8) throw ConfigError(ip + ".token: must be at least 8 characters");
        if (entry.owner.empty()) throw ConfigError(ip + ".owner: must not be empty");
        for (const auto& other : c.tokens)
          if (other.token == entry.token) throw ConfigError(ip + ".token: duplicate token");
        c.tokens.push_back(entry);
      }
    });
    with(n, "adminToken", p, [&](const YAML::Node& v, const std::string& kp) {
      c.admin_token = scalar(v, kp);
      if (!c.admin_token.empty() && c.admin_token.size() < 16) throw ConfigError(kp + ": must be at least 16 characters");
      for (const auto& entry : c.tokens)
        if (entry.token == c.admin_token) throw ConfigError(kp + ": must differ from every owner's token");
    });
  });

  with(root, "model", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p,
              {"provider", "baseUrl", "apiKey", "models", "maxToolIterations", "timeoutSec",
               "pingIntervalSec", "maxNestingDepth", "toolResultTimeoutSec"});
    with(n, "maxNestingDepth", p, [&](const YAML::Node& v, const std::string& kp) { c.max_nesting_depth = static_cast<int>(read_int(v, kp, 0, 10)); });
    with(n, "provider", p, [&](const YAML::Node& v, const std::string& kp) {
      c.model_provider = scalar(v, kp);
      if (c.model_provider != "anthropic") throw ConfigError(kp + ": only 'anthropic' is supported");
    });
    with(n, "baseUrl", p, [&](const YAML::Node& v, const std::string& kp) {
      c.model_base_url = scalar(v, kp);
      if (!c.model_base_url.empty() && c.model_base_url.rfind("http://", 0) != 0 &&
          c.model_base_url.rfind("https://", 0) != 0)
        throw ConfigError(kp + ": must be an http:// or https:// URL");
    });
    with(n, "apiKey", p, [&](const YAML::Node& v, const std::string& kp) { c.model_api_key = scalar(v, kp); });
    with(n, "models", p, [&](const YAML::Node& v, const std::string& kp) {
      if (!v.IsMap()) throw ConfigError(kp + ": must be a mapping of name to upstream model");
      for (const auto& entry : v) {
        std::string name = scalar(entry.first, kp + " (a model's name)");
        c.model_names[name] = scalar(entry.second, kp + "." + name);
      }
    });
    with(n, "maxToolIterations", p, [&](const YAML::Node& v, const std::string& kp) { c.max_tool_iterations = static_cast<int>(read_int(v, kp, 1, 1000)); });
    with(n, "timeoutSec", p, [&](const YAML::Node& v, const std::string& kp) { c.model_timeout_sec = static_cast<int>(read_int(v, kp, 1, 86400)); });
    with(n, "toolResultTimeoutSec", p, [&](const YAML::Node& v, const std::string& kp) {
      c.tool_result_timeout_sec = static_cast<int>(read_int(v, kp, 1, 86400));
    });
    with(n, "pingIntervalSec", p, [&](const YAML::Node& v, const std::string& kp) { c.model_ping_interval_sec = static_cast<int>(read_int(v, kp, 1, 3600)); });
  });

  with(root, "features", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"codeExecution"});
    with(n, "codeExecution", p, [&](const YAML::Node& ce, const std::string& cp) {
      only_keys(ce, cp, {"enabled", "timeout"});
      with(ce, "enabled", cp, [&](const YAML::Node& v, const std::string& kp) { c.code_execution_enabled = read_bool(v, kp); });
      with(ce, "timeout", cp, [&](const YAML::Node& v, const std::string& kp) { c.code_execution_timeout_sec = static_cast<int>(read_int(v, kp, 1, 86400)); });
    });
  });

  with(root, "external", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"opensandbox"});
    with(n, "opensandbox", p, [&](const YAML::Node& os, const std::string& op) {
      only_keys(os, op, {"sessionTTLSeconds", "codeExecution"});
      with(os, "sessionTTLSeconds", op, [&](const YAML::Node& v, const std::string& kp) { c.session_ttl_sec = static_cast<int>(read_int(v, kp, 1, 31 * 86400)); });
      with(os, "codeExecution", op, [&](const YAML::Node& ce, const std::string& cp) {
        only_keys(ce, cp, {"internal", "image"});
        with(ce, "internal", cp, [&](const YAML::Node& in, const std::string& ip) {
          only_keys(in, ip, {"services"});
          with(in, "services", ip, [&](const YAML::Node& list, const std::string& sp) {
            if (!list.IsSequence()) throw ConfigError(sp + ": must be a list");
            for (size_t i = 0; i < list.size(); ++i) {
              std::string ep = sp + "[" + std::to_string(i) + "]";
              if (!list[i].IsMap()) throw ConfigError(ep + ": must be a mapping {name, host, port}");
              if (is_network_peer(list[i])) {
                if (c.network_peers.size() >= kMaxNetworkPeers)
                  throw ConfigError(sp + ": at most " + std::to_string(kMaxNetworkPeers) + " NetworkPolicy peers");
                c.network_peers.push_back(parse_network_peer(list[i], ep));
                peers_path = sp;
                continue;
              }
              only_keys(list[i], ep, {"name", "host", "port"});
              if (!list[i]["name"] || !list[i]["host"] || !list[i]["port"]) throw ConfigError(ep + ": needs name, host and port");
              InternalService service{scalar(list[i]["name"], ep + ".name"), scalar(list[i]["host"], ep + ".host"),
                                      static_cast<uint16_t>(read_int(list[i]["port"], ep + ".port", 1, 65535))};
              if (!valid_service_name(service.name))
                throw ConfigError(ep + ".name: must be a host name (letters, digits, '-' and '.', at most 253 characters)");
              if (service.name == "localhost" || service.name == kApiHostName)
                throw ConfigError(ep + ".name: '" + service.name + "' is reserved");
              for (const auto& other : c.internal_services)
                if (other.name == service.name) throw ConfigError(ep + ".name: '" + service.name + "' is listed twice");
              if (service.host.empty() || service.host.size() > 253) throw ConfigError(ep + ".host: must be a host name or address");
              if (c.internal_services.size() >= kMaxInternalServices)
                throw ConfigError(sp + ": at most " + std::to_string(kMaxInternalServices) + " services");
              c.internal_services.push_back(std::move(service));
            }
          });
        });
        with(ce, "image", cp, [&](const YAML::Node& im, const std::string& ip) {
          only_keys(im, ip, {"repository", "tag"});
          with(im, "repository", ip, [&](const YAML::Node& v, const std::string& kp) { c.image_repository = scalar(v, kp); });
          with(im, "tag", ip, [&](const YAML::Node& v, const std::string& kp) { c.image_tag = scalar(v, kp); });
        });
      });
    });
  });

  with(root, "opensandbox", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"runtime"});
    with(n, "runtime", p, [&](const YAML::Node& rt, const std::string& rp) {
      only_keys(rt, rp, {"resourceQuota", "limitRange"});
      with(rt, "resourceQuota", rp, [&](const YAML::Node& q, const std::string& qp) {
        only_keys(q, qp, {"enabled", "pods", "cpu", "memory"});
        with(q, "enabled", qp, [&](const YAML::Node& v, const std::string& kp) { c.quota_enabled = read_bool(v, kp); });
        with(q, "pods", qp, [&](const YAML::Node& v, const std::string& kp) { c.quota_pods = static_cast<uint64_t>(read_int(v, kp, 1, 1000000)); });
        with(q, "cpu", qp, [&](const YAML::Node& v, const std::string& kp) { c.quota_cpu_millis = read_cpu(v, kp); });
        with(q, "memory", qp, [&](const YAML::Node& v, const std::string& kp) { c.quota_memory_bytes = read_bytes(v, kp); });
      });
      with(rt, "limitRange", rp, [&](const YAML::Node& l, const std::string& lp) {
        only_keys(l, lp, {"enabled", "cpu", "memory"});
        with(l, "enabled", lp, [&](const YAML::Node& v, const std::string& kp) { c.limit_range_enabled = read_bool(v, kp); });
        with(l, "cpu", lp, [&](const YAML::Node& v, const std::string& kp) { c.limit_cpu_millis = read_cpu(v, kp); });
        with(l, "memory", lp, [&](const YAML::Node& v, const std::string& kp) { c.limit_memory_bytes = read_bytes(v, kp); });
      });
    });
  });

  with(root, "capacity", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"maxConcurrentExecutions", "maxConcurrentExecutionsPerOwner", "queueTimeoutSec", "retryAfterSec",
                     "capacityRetryAfterSec"});
    with(n, "maxConcurrentExecutionsPerOwner", p, [&](const YAML::Node& v, const std::string& kp) { c.max_concurrent_executions_per_owner = static_cast<int>(read_int(v, kp, 0, 100000)); });
    with(n, "maxConcurrentExecutions", p, [&](const YAML::Node& v, const std::string& kp) { c.max_concurrent_executions = static_cast<int>(read_int(v, kp, 1, 100000)); });
    with(n, "queueTimeoutSec", p, [&](const YAML::Node& v, const std::string& kp) { c.queue_timeout_sec = static_cast<int>(read_int(v, kp, 0, 3600)); });
    with(n, "retryAfterSec", p, [&](const YAML::Node& v, const std::string& kp) { c.retry_after_sec = static_cast<int>(read_int(v, kp, 0, 3600)); });
    with(n, "capacityRetryAfterSec", p, [&](const YAML::Node& v, const std::string& kp) { c.capacity_retry_after_sec = static_cast<int>(read_int(v, kp, 0, 3600)); });
  });

  with(root, "codeInterpreter", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"memoryLimitMb", "workspaceSizeLimit", "tmpSizeLimit", "outputLimit", "pidsLimit", "openFilesLimit"});
    with(n, "memoryLimitMb", p, [&](const YAML::Node& v, const std::string& kp) { c.memory_limit_bytes = static_cast<uint64_t>(read_int(v, kp, 0, 1 << 24)) << 20; });
    with(n, "workspaceSizeLimit", p, [&](const YAML::Node& v, const std::string& kp) {
      c.workspace_size_bytes = read_bytes(v, kp);
      if (c.workspace_size_bytes < (8u << 20)) throw ConfigError(kp + ": must be at least 8Mi");
    });
    with(n, "tmpSizeLimit", p, [&](const YAML::Node& v, const std::string& kp) { c.tmp_size_bytes = read_bytes(v, kp); });
    with(n, "outputLimit", p, [&](const YAML::Node& v, const std::string& kp) { c.output_limit_bytes = read_bytes(v, kp); });
    with(n, "pidsLimit", p, [&](const YAML::Node& v, const std::string& kp) { c.pids_limit = static_cast<uint64_t>(read_int(v, kp, 0, 1 << 22)); });
    with(n, "openFilesLimit", p, [&](const YAML::Node& v, const std::string& kp) { c.open_files_limit = static_cast<uint64_t>(read_int(v, kp, 0, 1 << 20)); });
  });

  with(root, "workspace", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"downloads", "maxHistoryTurns"});
    with(n, "maxHistoryTurns", p, [&](const YAML::Node& v, const std::string& kp) { c.max_history_turns = static_cast<int>(read_int(v, kp, 1, 1000)); });
    with(n, "downloads", p, [&](const YAML::Node& d, const std::string& dp) {
      only_keys(d, dp, {"generatedResources", "uploadedResources"});
      with(d, "generatedResources", dp, [&](const YAML::Node& v, const std::string& kp) { c.download_generated = read_bool(v, kp); });
      with(d, "uploadedResources", dp, [&](const YAML::Node& v, const std::string& kp) { c.download_uploaded = read_bool(v, kp); });
    });
  });

  with(root, "logging", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"format", "auditMaxSize", "auditFiles"});
    with(n, "format", p, [&](const YAML::Node& v, const std::string& kp) {
      std::string format = scalar(v, kp);
      if (format != "text" && format != "json") throw ConfigError(kp + ": must be 'text' or 'json'");
      c.log_json = format == "json";
    });
    with(n, "auditMaxSize", p, [&](const YAML::Node& v, const std::string& kp) {
      c.audit_max_bytes = read_bytes(v, kp);
      if (c.audit_max_bytes < (64u << 10)) throw ConfigError(kp + ": must be at least 64Ki");
    });
    with(n, "auditFiles", p, [&](const YAML::Node& v, const std::string& kp) { c.audit_files = static_cast<int>(read_int(v, kp, 1, 1000)); });
  });

  with(root, "quotas", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"runningSandboxesPerOwner", "containersPerOwner", "storedBytesPerOwner", "threadsPerOwner",
                     "skillsPerOwner", "skillVersionsPerOwner"});
    with(n, "storedBytesPerOwner", p, [&](const YAML::Node& v, const std::string& kp) { c.stored_bytes_per_owner = read_bytes(v, kp); });
    with(n, "threadsPerOwner", p, [&](const YAML::Node& v, const std::string& kp) {
      c.threads_per_owner = static_cast<uint64_t>(read_int(v, kp, 0, 100000000));
    });
    with(n, "skillsPerOwner", p, [&](const YAML::Node& v, const std::string& kp) {
      c.skills_per_owner = static_cast<uint64_t>(read_int(v, kp, 0, 100000000));
    });
    with(n, "skillVersionsPerOwner", p, [&](const YAML::Node& v, const std::string& kp) {
      c.skill_versions_per_owner = static_cast<uint64_t>(read_int(v, kp, 0, 100000000));
    });
    with(n, "containersPerOwner", p, [&](const YAML::Node& v, const std::string& kp) {
      c.containers_per_owner = static_cast<uint64_t>(read_int(v, kp, 0, 100000000));
    });
    with(n, "runningSandboxesPerOwner", p, [&](const YAML::Node& v, const std::string& kp) {
      c.running_sandboxes_per_owner = static_cast<uint64_t>(read_int(v, kp, 0, 1000000));
    });
  });

  with(root, "runtime", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"sandboxUid", "cgroupMode", "skillsDir", "prestartedSandboxes", "provider",
                     "maxConnectionsPerSandbox", "skillMaxSize", "skillMaxFiles", "sandboxesPidsMax",
                     "sandboxesMemoryMax", "sandboxesCpuMax"});
    // "none": no limit; 0 or absent: a share of the host.
    auto none = [](const YAML::Node& v) { return v.IsScalar() && v.Scalar() == "none"; };
    with(n, "sandboxesPidsMax", p, [&](const YAML::Node& v, const std::string& kp) {
      c.sandboxes_pids_max = none(v) ? Config::kNoLimit : static_cast<uint64_t>(read_int(v, kp, 0, 1 << 30));
    });
    with(n, "sandboxesMemoryMax", p, [&](const YAML::Node& v, const std::string& kp) {
      c.sandboxes_memory_max = none(v) ? Config::kNoLimit : read_bytes(v, kp);
    });
    with(n, "sandboxesCpuMax", p, [&](const YAML::Node& v, const std::string& kp) {
      const bool automatic = v.IsScalar() && v.Scalar() == "0";
      c.sandboxes_cpu_millis = none(v) ? Config::kNoLimit : automatic ? 0 : read_cpu(v, kp);
    });
    with(n, "skillMaxSize", p, [&](const YAML::Node& v, const std::string& kp) {
      c.skill_max_bytes = read_bytes(v, kp);
      if (c.skill_max_bytes < 1024) throw ConfigError(kp + ": must be at least 1Ki");
    });
    with(n, "skillMaxFiles", p, [&](const YAML::Node& v, const std::string& kp) { c.skill_max_files = static_cast<int>(read_int(v, kp, 1, 100000)); });
    with(n, "maxConnectionsPerSandbox", p, [&](const YAML::Node& v, const std::string& kp) { c.max_connections_per_sandbox = static_cast<int>(read_int(v, kp, 1, 4096)); });
    with(n, "provider", p, [&](const YAML::Node& v, const std::string& kp) {
      c.runtime_provider = scalar(v, kp);
      if (c.runtime_provider != "sandboxd" && c.runtime_provider != "none")
        throw ConfigError(kp + ": must be 'sandboxd' or 'none'");
    });
    with(n, "prestartedSandboxes", p, [&](const YAML::Node& v, const std::string& kp) { c.prestarted_sandboxes = static_cast<int>(read_int(v, kp, 0, 64)); });
    with(n, "sandboxUid", p, [&](const YAML::Node& v, const std::string& kp) { c.sandbox_host_uid = static_cast<uint32_t>(read_int(v, kp, 1000, 4000000000LL)); });
    with(n, "cgroupMode", p, [&](const YAML::Node& v, const std::string& kp) {
      c.cgroup_mode = scalar(v, kp);
      if (c.cgroup_mode != "auto" && c.cgroup_mode != "v1" && c.cgroup_mode != "v2") throw ConfigError(kp + ": must be auto, v1 or v2");
    });
    with(n, "skillsDir", p, [&](const YAML::Node& v, const std::string& kp) { c.skills_dir = scalar(v, kp); });
  });
  with(root, "cluster", "", [&](const YAML::Node& n, const std::string& p) { parse_cluster(n, p, c); });

  parse_storage(root, c);

  with(root, "metadata", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"backend", "postgres"});
    with(n, "backend", p, [&](const YAML::Node& v, const std::string& kp) {
      c.metadata_backend = scalar(v, kp);
      if (c.metadata_backend != "sqlite" && c.metadata_backend != "postgres")
        throw ConfigError(kp + ": must be 'sqlite' or 'postgres'");
    });
    with(n, "postgres", p, [&](const YAML::Node& pg, const std::string& pp) {
      only_keys(pg, pp, {"url", "lockTimeoutSec", "statementTimeoutSec", "idleInTransactionTimeoutSec"});
      with(pg, "url", pp, [&](const YAML::Node& v, const std::string& kp) {
        c.postgres_url = scalar(v, kp);
        if (c.postgres_url.find('\n') != std::string::npos) throw ConfigError(kp + ": must be one line");
      });
      with(pg, "lockTimeoutSec", pp, [&](const YAML::Node& v, const std::string& kp) {
        c.postgres_lock_timeout_sec = static_cast<int>(read_int(v, kp, 0, 3600));
      });
      with(pg, "statementTimeoutSec", pp, [&](const YAML::Node& v, const std::string& kp) {
        c.postgres_statement_timeout_sec = static_cast<int>(read_int(v, kp, 0, 86400));
      });
      with(pg, "idleInTransactionTimeoutSec", pp, [&](const YAML::Node& v, const std::string& kp) {
        c.postgres_idle_in_transaction_timeout_sec = static_cast<int>(read_int(v, kp, 0, 86400));
      });
    });
  });
  with(root, "kubernetes", "", [&](const YAML::Node& n, const std::string& p) {
    only_keys(n, p, {"apiServer", "caFile", "tokenFile", "namespace"});
    with(n, "apiServer", p, [&](const YAML::Node& v, const std::string& kp) {
      c.kubernetes.api_server = scalar(v, kp);
      if (c.kubernetes.api_server.rfind("https://", 0) != 0) throw ConfigError(kp + ": must be an https:// URL");
    });
    with(n, "caFile", p, [&](const YAML::Node& v, const std::string& kp) { c.kubernetes.ca_file = scalar(v, kp); });
    with(n, "tokenFile", p, [&](const YAML::Node& v, const std::string& kp) { c.kubernetes.token_file = scalar(v, kp); });
    with(n, "namespace", p, [&](const YAML::Node& v, const std::string& kp) { c.kubernetes.namespace_name = scalar(v, kp); });
  });
  // The peers are resolved through the Kubernetes API: in a pod its in-cluster address,
  // elsewhere only the one set here.
  if (!c.network_peers.empty() && c.kubernetes.api_server.empty() && !std::getenv("KUBERNETES_SERVICE_HOST"))
    throw ConfigError(peers_path +
                      ": Kubernetes NetworkPolicy peers (namespaceSelector, podSelector, ipBlock) need the "
                      "Kubernetes API: run sandboxd in a Kubernetes pod (in-cluster service account) or set "
                      "kubernetes.apiServer");
  // The URL (with its password) may come from a Secret instead of the file.
  if (const char* url = std::getenv("SANDBOXD_POSTGRES_URL"); url && *url) c.postgres_url = url;
  if (c.metadata_backend == "postgres" && c.postgres_url.empty())
    throw ConfigError("metadata.postgres.url: required when metadata.backend is 'postgres' (or set SANDBOXD_POSTGRES_URL)");
  return c;
}
}  // namespace

Config load_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str());
}

}  // namespace sandboxd::ops
