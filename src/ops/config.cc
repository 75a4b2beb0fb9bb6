#include "ops/config.h"

#include "ops/config_env.h"
#include "ops/config_reload.h"
#include "ops/network_peers.h"

#include <cctype>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <vector>

namespace sandboxd::ops {
namespace {

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// Refuses keys the schema does not know, naming the first one.
void only_keys(const YAML::Node& node, const std::string& path, const std::set<std::string>& known) {
  if (!node) return;
  if (!node.IsMap()) throw ConfigError((path.empty() ? "(top level)" : path) + ": must be a mapping");
  for (const auto& entry : node) {
    if (!entry.first.IsScalar())
      throw ConfigError((path.empty() ? "(top level)" : path) + ": keys must be plain names");
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
  if (!millis || *millis == 0)
    throw ConfigError(path + ": must be a CPU quantity such as 500m or 2, not '" + v + "'");
  return *millis;
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
      {"", 1},     {"k", 1e3},     {"K", 1e3},        {"M", 1e6},           {"G", 1e9},
      {"T", 1e12}, {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
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

// ---------------------------------------------------------------------------- the keys
//
// Every key of the file is one row of the table in keys() below: what a SIGHUP does to it
// (new_work: the reloaded value applies to new work; restart: a change is logged and waits
// for a restart; ops/config_reload.h), its dotted path, its type (the function that makes
// the row), where its value goes in Config, its bounds and the refusal's message. What a key holds when the
// file leaves it out is Config's default (config.h). The rows are read in their order; a check across keys is
// a row too, run at its place whatever the file holds. The keys a mapping may hold are those the rows name
// under it: any other is refused.

// Reads a present, non-null value at `path` into the configuration, or refuses it.
using Reader = std::function<void(const YAML::Node& value, const std::string& path, Config& c)>;

// How a reload moves a key's value between configurations: `take` copies it from the file
// just read, `same` tells whether the file changed it.
struct Transfer {
  std::function<void(const Config& from, Config& to)> take;
  std::function<bool(const Config& a, const Config& b)> same;
};

struct Key {
  std::string_view path;               // a key: where it is in the file; a check: empty
  Reload reload = Reload::restart;     // a key: what a SIGHUP does to it
  Reader read;                         // a key: how it is read
  Transfer transfer;                   // a key: the Config members it sets
  std::function<void(Config&)> check;  // a check across keys
};

Key check(std::function<void(Config&)> across_keys) {
  return {"", Reload::restart, nullptr, {}, std::move(across_keys)};
}

// Where a row's value goes: a member of Config, or a function to a nested one (in_s3).
template <typename Configuration, typename Field>
decltype(auto) field_of(Configuration& c, const Field& field) {
  if constexpr (std::is_member_object_pointer_v<Field>)
    return (c.*field);
  else
    return field(c);
}

template <typename Member>
auto in_s3(Member member) {
  return [member](auto& c) -> auto& { return c.s3.*member; };
}

template <typename Member>
auto in_kubernetes(Member member) {
  return [member](auto& c) -> auto& { return c.kubernetes.*member; };
}

// The transfer of a key that sets these members (compared with ==).
template <typename... Fields>
Transfer fields(Fields... each) {
  return {
      [=](const Config& from, Config& to) { ((field_of(to, each) = field_of(from, each)), ...); },
      [=](const Config& a, const Config& b) { return ((field_of(a, each) == field_of(b, each)) && ...); }};
}

// A key with a parser of its own (the read_* functions below) and the members it sets.
Key custom(Reload reload, std::string_view path, Reader read, Transfer transfer) {
  return {path, reload, std::move(read), std::move(transfer), nullptr};
}

// A key whose value one reader (scalar, read_bool, read_cpu) turns into its member.
template <typename Field, typename Value>
Key read_into(Reload reload, std::string_view path, Field field,
              Value (*read)(const YAML::Node&, const std::string&)) {
  return custom(
      reload, path,
      [field, read](const YAML::Node& v, const std::string& kp, Config& c) {
        field_of(c, field) = read(v, kp);
      },
      fields(field));
}

// Any string.
template <typename Field>
Key text(Reload reload, std::string_view path, Field field) {
  return read_into(reload, path, field, scalar);
}

// true or false.
template <typename Field>
Key flag(Reload reload, std::string_view path, Field field) {
  return read_into(reload, path, field, read_bool);
}

// An integer in [min, max].
template <typename Field>
Key integer(Reload reload, std::string_view path, Field field, int64_t min, int64_t max) {
  return custom(
      reload, path,
      [field, min, max](const YAML::Node& v, const std::string& kp, Config& c) {
        auto& target = field_of(c, field);
        target = static_cast<std::remove_reference_t<decltype(target)>>(read_int(v, kp, min, max));
      },
      fields(field));
}

// A size (512Mi, 40Gi, plain bytes); outside [min, max] it is refused with `message`.
struct SizeBounds {
  uint64_t min = 0;
  uint64_t max = UINT64_MAX;
  const char* message = nullptr;
};

template <typename Field>
Key bytes(Reload reload, std::string_view path, Field field, SizeBounds bounds = {}) {
  return custom(
      reload, path,
      [field, bounds](const YAML::Node& v, const std::string& kp, Config& c) {
        auto& target = field_of(c, field);
        target = read_bytes(v, kp);
        if (target < bounds.min || target > bounds.max) throw ConfigError(kp + ": " + bounds.message);
      },
      fields(field));
}

// A CPU quantity (500m, 2), more than zero.
template <typename Field>
Key cpu(Reload reload, std::string_view path, Field field) {
  return read_into(reload, path, field, read_cpu);
}

// One of `values`; anything else is refused with `message`.
template <typename Field>
Key one_of(Reload reload, std::string_view path, Field field, std::vector<std::string> values,
           const char* message) {
  return custom(
      reload, path,
      [field, values = std::move(values), message](const YAML::Node& v, const std::string& kp, Config& c) {
        auto& target = field_of(c, field);
        target = scalar(v, kp);
        if (std::find(values.begin(), values.end(), target) == values.end())
          throw ConfigError(kp + ": " + message);
      },
      fields(field));
}

// ------------------------------------------------------------- the keys with a parser of their own

// server.listen: HOST:PORT ([v6]:PORT).
void read_listen(const YAML::Node& v, const std::string& kp, Config& c) {
  std::string listen = scalar(v, kp);
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) throw ConfigError(kp + ": must be HOST:PORT");
  c.listen_host = listen.substr(0, colon);
  if (c.listen_host.size() > 2 && c.listen_host.front() == '[')
    c.listen_host = c.listen_host.substr(1, c.listen_host.size() - 2);
  YAML::Node port_node(listen.substr(colon + 1));
  c.listen_port = static_cast<uint16_t>(read_int(port_node, kp + " (port)", 0, 65535));
}

// auth.tokens: [{token, owner}], each token at least 8 characters and listed once.
void read_tokens(const YAML::Node& list, const std::string& kp, Config& c) {
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
}

// auth.adminToken: empty (no admin endpoints) or at least 16 characters, no owner's
// token (read after auth.tokens).
void read_admin_token(const YAML::Node& v, const std::string& kp, Config& c) {
  c.admin_token = scalar(v, kp);
  if (!c.admin_token.empty() && c.admin_token.size() < 16)
    throw ConfigError(kp + ": must be at least 16 characters");
  for (const auto& entry : c.tokens)
    if (entry.token == c.admin_token) throw ConfigError(kp + ": must differ from every owner's token");
}

void read_model_base_url(const YAML::Node& v, const std::string& kp, Config& c) {
  c.model_base_url = scalar(v, kp);
  if (!c.model_base_url.empty() && c.model_base_url.rfind("http://", 0) != 0 &&
      c.model_base_url.rfind("https://", 0) != 0)
    throw ConfigError(kp + ": must be an http:// or https:// URL");
}

// server.publicUrl: an http(s) origin (a trailing path is dropped), one line.
void read_public_url(const YAML::Node& v, const std::string& kp, Config& c) {
  std::string url = scalar(v, kp);
  if (url.empty()) {
    c.public_url.clear();
    return;
  }
  const bool http = url.rfind("http://", 0) == 0, https = url.rfind("https://", 0) == 0;
  if (!http && !https) throw ConfigError(kp + ": must be an http:// or https:// URL");
  const size_t authority = url.find("://") + 3;
  const size_t end = url.find_first_of("/?#", authority);
  const std::string host =
      url.substr(authority, end == std::string::npos ? std::string::npos : end - authority);
  if (host.empty() || host.find_first_of(" \t\r\n@") != std::string::npos)
    throw ConfigError(kp + ": must name a host (scheme://host[:port])");
  c.public_url = url.substr(0, authority) + host;
}

// e2b.sandboxDomain: a DNS name (lower-cased), or empty.
void read_e2b_sandbox_domain(const YAML::Node& v, const std::string& kp, Config& c) {
  std::string domain = scalar(v, kp);
  for (char& ch : domain) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const bool valid = domain.empty() || (domain.size() <= 200 && domain.front() != '.' &&
                                        domain.back() != '.' && domain.find("..") == std::string::npos &&
                                        domain.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") ==
                                            std::string::npos);
  if (!valid)
    throw ConfigError(kp + ": must be a DNS name (letters, digits, '-' and '.'), e.g. sandboxes.example.com");
  c.e2b_sandbox_domain = std::move(domain);
}

// model.models: {name: upstream model}.
void read_models(const YAML::Node& v, const std::string& kp, Config& c) {
  if (!v.IsMap()) throw ConfigError(kp + ": must be a mapping of name to upstream model");
  for (const auto& entry : v) {
    std::string name = scalar(entry.first, kp + " (a model's name)");
    c.model_names[name] = scalar(entry.second, kp + "." + name);
  }
}

// The allow-listed services: each entry either {name, host, port} or a NetworkPolicy
// peer (ops/network_peers.h parses those).
constexpr std::string_view kServicesPath = "external.opensandbox.codeExecution.internal.services";

void read_services(const YAML::Node& list, const std::string& sp, Config& c) {
  if (!list.IsSequence()) throw ConfigError(sp + ": must be a list");
  for (size_t i = 0; i < list.size(); ++i) {
    std::string ep = sp + "[" + std::to_string(i) + "]";
    if (!list[i].IsMap()) throw ConfigError(ep + ": must be a mapping {name, host, port}");
    if (is_network_peer(list[i])) {
      if (c.network_peers.size() >= kMaxNetworkPeers)
        throw ConfigError(sp + ": at most " + std::to_string(kMaxNetworkPeers) + " NetworkPolicy peers");
      c.network_peers.push_back(parse_network_peer(list[i], ep));
      continue;
    }
    only_keys(list[i], ep, {"name", "host", "port"});
    if (!list[i]["name"] || !list[i]["host"] || !list[i]["port"])
      throw ConfigError(ep + ": needs name, host and port");
    InternalService service{scalar(list[i]["name"], ep + ".name"), scalar(list[i]["host"], ep + ".host"),
                            static_cast<uint16_t>(read_int(list[i]["port"], ep + ".port", 1, 65535))};
    if (!valid_service_name(service.name))
      throw ConfigError(ep +
                        ".name: must be a host name (letters, digits, '-' and '.', at most 253 characters)");
    if (service.name == "localhost" || service.name == kApiHostName)
      throw ConfigError(ep + ".name: '" + service.name + "' is reserved");
    for (const auto& other : c.internal_services)
      if (other.name == service.name) throw ConfigError(ep + ".name: '" + service.name + "' is listed twice");
    if (service.host.empty() || service.host.size() > 253)
      throw ConfigError(ep + ".host: must be a host name or address");
    if (c.internal_services.size() >= kMaxInternalServices)
      throw ConfigError(sp + ": at most " + std::to_string(kMaxInternalServices) + " services");
    c.internal_services.push_back(std::move(service));
  }
}

// network.egress.allow / deny: lists of egress entries (ops/egress_policy.h).
inline constexpr size_t kMaxEgressRules = 256;

void read_egress_rules(const YAML::Node& list, const std::string& kp, std::vector<EgressRule>& rules) {
  if (!list.IsSequence()) throw ConfigError(kp + ": must be a list of host names, *.suffixes and CIDRs");
  if (list.size() > kMaxEgressRules)
    throw ConfigError(kp + ": at most " + std::to_string(kMaxEgressRules) + " entries");
  rules.clear();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string ep = kp + "[" + std::to_string(i) + "]";
    std::string error;
    auto rule = parse_egress_rule(scalar(list[i], ep), &error);
    if (!rule) throw ConfigError(ep + ": '" + scalar(list[i], ep) + "' " + error);
    rules.push_back(std::move(*rule));
  }
}

void read_egress_allow(const YAML::Node& v, const std::string& kp, Config& c) {
  read_egress_rules(v, kp, c.egress_allow);
}
void read_egress_deny(const YAML::Node& v, const std::string& kp, Config& c) {
  read_egress_rules(v, kp, c.egress_deny);
}

// network.egress.resolvers: "IPv4[:port]" each (port 53 by default).
void read_egress_resolvers(const YAML::Node& list, const std::string& kp, Config& c) {
  if (!list.IsSequence()) throw ConfigError(kp + ": must be a list of DNS servers (address or address:port)");
  if (list.size() > 8) throw ConfigError(kp + ": at most 8 DNS servers");
  c.egress_resolvers.clear();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string ep = kp + "[" + std::to_string(i) + "]";
    std::string text = scalar(list[i], ep);
    std::string address = text, port = "53";
    if (auto colon = text.find(':'); colon != std::string::npos) {
      address = text.substr(0, colon);
      port = text.substr(colon + 1);
    }
    int number = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (!parse_ipv4(address) || ec != std::errc() || end != port.data() + port.size() || number < 1 ||
        number > 65535)
      throw ConfigError(ep + ": '" + text + "' must be an IPv4 address with an optional :port");
    c.egress_resolvers.push_back(address + ":" + port);
  }
}

// network.egress.rules: [{host, headers: {name: value}}] (ops/egress_policy.h HeaderRule).
void read_egress_header_rules(const YAML::Node& list, const std::string& kp, Config& c) {
  if (!list.IsSequence()) throw ConfigError(kp + ": must be a list of {host, headers}");
  if (list.size() > kMaxHeaderRules)
    throw ConfigError(kp + ": at most " + std::to_string(kMaxHeaderRules) + " rules");
  c.egress_header_rules.clear();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string ep = kp + "[" + std::to_string(i) + "]";
    const YAML::Node& item = list[i];
    if (!item.IsMap()) throw ConfigError(ep + ": must be a mapping with host and headers");
    for (const auto& entry : item) {
      const std::string key = entry.first.as<std::string>();
      if (key != "host" && key != "headers") throw ConfigError(ep + "." + key + ": unknown key");
    }
    if (!item["host"] || !item["headers"] || !item["headers"].IsMap())
      throw ConfigError(ep + ": needs host and headers (a mapping of header names to values)");
    std::vector<std::pair<std::string, std::string>> headers;
    for (const auto& header : item["headers"]) {
      const std::string name = scalar(header.first, ep + ".headers");
      headers.emplace_back(name, scalar(header.second, ep + ".headers." + name));
    }
    const std::string host = scalar(item["host"], ep + ".host");
    std::string error;
    auto rule = parse_header_rule(host, std::move(headers), &error);
    if (!rule) throw ConfigError(ep + ": " + error);
    for (const auto& other : c.egress_header_rules)
      if (other.host == rule->host && other.wildcard == rule->wildcard)
        throw ConfigError(ep + ".host: '" + host + "' has a rule already");
    c.egress_header_rules.push_back(std::move(*rule));
  }
}

// codeInterpreter.memoryLimitMb: MiB (0: none).
void read_memory_limit_mb(const YAML::Node& v, const std::string& kp, Config& c) {
  c.memory_limit_bytes = static_cast<uint64_t>(read_int(v, kp, 0, 1 << 24)) << 20;
}

void read_log_format(const YAML::Node& v, const std::string& kp, Config& c) {
  std::string format = scalar(v, kp);
  if (format != "text" && format != "json") throw ConfigError(kp + ": must be 'text' or 'json'");
  c.log_json = format == "json";
}

// runtime.sandboxes*Max: "none" is no limit; 0 a share of the host.
bool no_limit(const YAML::Node& v) { return v.IsScalar() && v.Scalar() == "none"; }

void read_sandboxes_pids_max(const YAML::Node& v, const std::string& kp, Config& c) {
  c.sandboxes_pids_max = no_limit(v) ? Config::kNoLimit : static_cast<uint64_t>(read_int(v, kp, 0, 1 << 30));
}

void read_sandboxes_memory_max(const YAML::Node& v, const std::string& kp, Config& c) {
  c.sandboxes_memory_max = no_limit(v) ? Config::kNoLimit : read_bytes(v, kp);
}

void read_sandboxes_cpu_max(const YAML::Node& v, const std::string& kp, Config& c) {
  const bool automatic = v.IsScalar() && v.Scalar() == "0";
  c.sandboxes_cpu_millis = no_limit(v) ? Config::kNoLimit : automatic ? 0 : read_cpu(v, kp);
}

void read_replica_id(const YAML::Node& v, const std::string& kp, Config& c) {
  c.cluster_replica_id = scalar(v, kp);
  if (c.cluster_replica_id.empty() || c.cluster_replica_id.size() > 128)
    throw ConfigError(kp + ": must be 1-128 characters");
  for (unsigned char ch : c.cluster_replica_id)
    if (!std::isalnum(ch) && ch != '-' && ch != '_' && ch != '.')
      throw ConfigError(kp + ": must be letters, digits, '-', '_' and '.'");
}

// cluster.advertiseUrl: plain http://HOST[:PORT] (the replicas' own network; no path:
// requests keep theirs when relayed).
void read_advertise_url(const YAML::Node& v, const std::string& kp, Config& c) {
  std::string url = scalar(v, kp);
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) throw ConfigError(kp + ": must be an http:// URL (http://HOST:PORT)");
  std::string authority = url.substr(kScheme.size());
  if (!authority.empty() && authority.back() == '/') authority.pop_back();
  if (authority.empty() || authority.find_first_of("/?#@ ") != std::string::npos)
    throw ConfigError(kp + ": must be http://HOST:PORT with no path, query or user");
  c.cluster_advertise_url = url;
}

// A replica needs both: its id, and where the others reach it.
void check_cluster(Config& c) {
  if (!c.cluster_replica_id.empty() && c.cluster_advertise_url.empty())
    throw ConfigError(
        "cluster.advertiseUrl: required when cluster.replicaId is set (where the other replicas reach this "
        "one)");
  if (c.cluster_replica_id.empty() && !c.cluster_advertise_url.empty())
    throw ConfigError("cluster.replicaId: required when cluster.advertiseUrl is set");
}

void read_s3_endpoint(const YAML::Node& v, const std::string& kp, Config& c) {
  c.s3.endpoint = scalar(v, kp);
  const bool http = c.s3.endpoint.rfind("http://", 0) == 0, https = c.s3.endpoint.rfind("https://", 0) == 0;
  const size_t host_at = http ? 7 : https ? 8 : 0;
  if (!host_at || c.s3.endpoint.size() == host_at ||
      c.s3.endpoint.find_first_of("?# \t", host_at) != std::string::npos ||
      c.s3.endpoint.find('/', host_at) < c.s3.endpoint.size() - 1)
    throw ConfigError(kp +
                      ": must be an http:// or https:// URL of the S3 service (scheme, host and port only)");
}

void read_s3_region(const YAML::Node& v, const std::string& kp, Config& c) {
  c.s3.region = scalar(v, kp);
  if (c.s3.region.empty() ||
      c.s3.region.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
    throw ConfigError(kp + ": must be a region name such as us-east-1");
}

void read_s3_bucket(const YAML::Node& v, const std::string& kp, Config& c) {
  c.s3.bucket = scalar(v, kp);
  if (c.s3.bucket.size() < 3 || c.s3.bucket.size() > 63 ||
      c.s3.bucket.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string::npos)
    throw ConfigError(kp + ": must be a bucket name (3-63 characters of a-z, 0-9, '.' and '-')");
}

void read_s3_prefix(const YAML::Node& v, const std::string& kp, Config& c) {
  c.s3.prefix = scalar(v, kp);
  if (c.s3.prefix.size() > 200 || (!c.s3.prefix.empty() && c.s3.prefix.front() == '/') ||
      c.s3.prefix.find("//") != std::string::npos ||
      c.s3.prefix.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-") !=
          std::string::npos)
    throw ConfigError(
        kp +
        ": must be at most 200 characters of letters, digits, '/', '.', '_' and '-', not starting with '/'");
}

// The S3 secrets may come from the environment instead (a Kubernetes Secret):
// SANDBOXD_S3_ACCESS_KEY_ID and SANDBOXD_S3_SECRET_ACCESS_KEY win over the file. The s3
// backend needs its endpoint, bucket and both keys.
void check_storage(Config& c) {
  if (const char* key = std::getenv("SANDBOXD_S3_ACCESS_KEY_ID"); key && *key) c.s3.access_key_id = key;
  if (const char* secret = std::getenv("SANDBOXD_S3_SECRET_ACCESS_KEY"); secret && *secret)
    c.s3.secret_access_key = secret;
  if (c.storage_backend != "s3") return;
  if (c.s3.endpoint.empty()) throw ConfigError("storage.s3.endpoint: required when storage.backend is s3");
  if (c.s3.bucket.empty()) throw ConfigError("storage.s3.bucket: required when storage.backend is s3");
  if (c.s3.access_key_id.empty())
    throw ConfigError(
        "storage.s3.accessKeyId: required when storage.backend is s3 (or SANDBOXD_S3_ACCESS_KEY_ID)");
  if (c.s3.secret_access_key.empty())
    throw ConfigError(
        "storage.s3.secretAccessKey: required when storage.backend is s3 (or SANDBOXD_S3_SECRET_ACCESS_KEY)");
}

void read_postgres_url(const YAML::Node& v, const std::string& kp, Config& c) {
  c.postgres_url = scalar(v, kp);
  if (c.postgres_url.find('\n') != std::string::npos) throw ConfigError(kp + ": must be one line");
}

void read_kubernetes_api_server(const YAML::Node& v, const std::string& kp, Config& c) {
  c.kubernetes.api_server = scalar(v, kp);
  if (c.kubernetes.api_server.rfind("https://", 0) != 0) throw ConfigError(kp + ": must be an https:// URL");
}

// The services list sets the allow-listed services and the NetworkPolicy peers; a peer is
// compared as it was written (its parsed form has no ==).
Transfer services_transfer() {
  return {[](const Config& from, Config& to) {
            to.internal_services = from.internal_services;
            to.network_peers = from.network_peers;
          },
          [](const Config& a, const Config& b) {
            auto same_service = [](const InternalService& x, const InternalService& y) {
              return x.name == y.name && x.host == y.host && x.port == y.port;
            };
            return std::ranges::equal(a.internal_services, b.internal_services, same_service) &&
                   std::ranges::equal(a.network_peers, b.network_peers, {}, &NetworkPeer::source,
                                      &NetworkPeer::source);
          }};
}

Transfer tokens_transfer() {
  return {[](const Config& from, Config& to) { to.tokens = from.tokens; },
          [](const Config& a, const Config& b) {
            return std::ranges::equal(a.tokens, b.tokens, [](const TokenEntry& x, const TokenEntry& y) {
              return x.token == y.token && x.owner == y.owner;
            });
          }};
}

// server.dataDir: the running server holds the folder's canonical path (app/serve.cc); the
// file may name the same folder otherwise.
void read_data_dir(const YAML::Node& v, const std::string& kp, Config& c) { c.data_dir = scalar(v, kp); }

Transfer data_dir_transfer() {
  auto canonical = [](const std::string& path) {
    std::error_code ec;
    return std::filesystem::weakly_canonical(path, ec).string();
  };
  return {[](const Config& from, Config& to) { to.data_dir = from.data_dir; },
          [canonical](const Config& a, const Config& b) {
            return canonical(a.data_dir) == canonical(b.data_dir);
          }};
}

const std::vector<Key>& keys() {
  using C = Config;
  using S3 = Config::S3;
  using K = KubernetesSettings;
  constexpr Reload new_work = Reload::new_work, restart = Reload::restart;
  static const std::vector<Key> kKeys = {
      text(restart, "server.webRoot", &C::web_root),
      custom(new_work, "server.publicUrl", read_public_url, fields(&C::public_url)),
      custom(restart, "e2b.sandboxDomain", read_e2b_sandbox_domain, fields(&C::e2b_sandbox_domain)),
      integer(restart, "server.headerTimeoutSec", &C::header_timeout_sec, 1, 3600),
      integer(restart, "server.bodyIdleTimeoutSec", &C::body_idle_timeout_sec, 1, 3600),
      integer(restart, "server.bodyMinRateBytesPerSec", &C::body_min_rate_bytes_per_sec, 0, int64_t{1} << 40),
      integer(restart, "server.bodyRateGraceSec", &C::body_rate_grace_sec, 0, 3600),
      integer(restart, "server.maxConnections", &C::max_connections, 0, 1000000),
      integer(restart, "server.maxConnectionsPerOwner", &C::max_connections_per_owner, 1, 1000000),
      integer(restart, "server.maxConnectionsPerIp", &C::max_connections_per_ip, 0, 1000000),
      integer(restart, "server.maxUnauthenticatedConnectionsPerIp",
              &C::max_unauthenticated_connections_per_ip, 0, 1000000),
      custom(restart, "server.listen", read_listen, fields(&C::listen_host, &C::listen_port)),
      custom(restart, "server.dataDir", read_data_dir, data_dir_transfer()),
      bytes(new_work, "server.maxUploadSize", &C::max_upload_bytes),

      custom(restart, "auth.tokens", read_tokens, tokens_transfer()),
      custom(restart, "auth.adminToken", read_admin_token, fields(&C::admin_token)),

      integer(new_work, "model.maxNestingDepth", &C::max_nesting_depth, 0, 10),
      one_of(restart, "model.provider", &C::model_provider, {"anthropic"}, "only 'anthropic' is supported"),
      custom(restart, "model.baseUrl", read_model_base_url, fields(&C::model_base_url)),
      text(restart, "model.apiKey", &C::model_api_key),
      custom(new_work, "model.models", read_models, fields(&C::model_names)),
      integer(new_work, "model.maxToolIterations", &C::max_tool_iterations, 1, 1000),
      integer(new_work, "model.timeoutSec", &C::model_timeout_sec, 1, 86400),
      integer(new_work, "model.toolResultTimeoutSec", &C::tool_result_timeout_sec, 1, 86400),
      integer(new_work, "model.pingIntervalSec", &C::model_ping_interval_sec, 1, 3600),

      flag(new_work, "features.codeExecution.enabled", &C::code_execution_enabled),
      integer(new_work, "features.codeExecution.timeout", &C::code_execution_timeout_sec, 1, 86400),

      integer(new_work, "external.opensandbox.sessionTTLSeconds", &C::session_ttl_sec, 1, 31 * 86400),
      custom(restart, kServicesPath, read_services, services_transfer()),
      custom(new_work, "network.egress.allow", read_egress_allow, fields(&C::egress_allow)),
      custom(new_work, "network.egress.deny", read_egress_deny, fields(&C::egress_deny)),
      custom(new_work, "network.egress.resolvers", read_egress_resolvers, fields(&C::egress_resolvers)),
      integer(new_work, "network.egress.maxConnectionsPerSandbox", &C::egress_max_connections_per_sandbox, 1,
              4096),
      integer(new_work, "network.egress.maxConnectionsPerOwner", &C::egress_max_connections_per_owner, 1,
              1000000),
      custom(new_work, "network.egress.rules", read_egress_header_rules, fields(&C::egress_header_rules)),
      text(restart, "network.egress.upstreamCaFile", &C::egress_upstream_ca_file),
      text(restart, "external.opensandbox.codeExecution.image.repository", &C::image_repository),
      text(restart, "external.opensandbox.codeExecution.image.tag", &C::image_tag),

      flag(new_work, "opensandbox.runtime.resourceQuota.enabled", &C::quota_enabled),
      integer(new_work, "opensandbox.runtime.resourceQuota.pods", &C::quota_pods, 1, 1000000),
      cpu(new_work, "opensandbox.runtime.resourceQuota.cpu", &C::quota_cpu_millis),
      bytes(new_work, "opensandbox.runtime.resourceQuota.memory", &C::quota_memory_bytes),
      flag(new_work, "opensandbox.runtime.limitRange.enabled", &C::limit_range_enabled),
      cpu(new_work, "opensandbox.runtime.limitRange.cpu", &C::limit_cpu_millis),
      bytes(new_work, "opensandbox.runtime.limitRange.memory", &C::limit_memory_bytes),

      integer(new_work, "capacity.maxConcurrentExecutionsPerOwner", &C::max_concurrent_executions_per_owner,
              0, 100000),
      integer(new_work, "capacity.maxConcurrentExecutions", &C::max_concurrent_executions, 1, 100000),
      integer(new_work, "capacity.queueTimeoutSec", &C::queue_timeout_sec, 0, 3600),
      integer(new_work, "capacity.retryAfterSec", &C::retry_after_sec, 0, 3600),
      integer(new_work, "capacity.capacityRetryAfterSec", &C::capacity_retry_after_sec, 0, 3600),

      custom(new_work, "codeInterpreter.memoryLimitMb", read_memory_limit_mb, fields(&C::memory_limit_bytes)),
      bytes(restart, "codeInterpreter.workspaceSizeLimit", &C::workspace_size_bytes,
            {.min = 8u << 20, .message = "must be at least 8Mi"}),
      bytes(new_work, "codeInterpreter.tmpSizeLimit", &C::tmp_size_bytes),
      bytes(new_work, "codeInterpreter.outputLimit", &C::output_limit_bytes),
      integer(new_work, "codeInterpreter.pidsLimit", &C::pids_limit, 0, 1 << 22),
      integer(new_work, "codeInterpreter.openFilesLimit", &C::open_files_limit, 0, 1 << 20),

      integer(new_work, "workspace.maxHistoryTurns", &C::max_history_turns, 1, 1000),
      flag(new_work, "workspace.downloads.generatedResources", &C::download_generated),
      flag(new_work, "workspace.downloads.uploadedResources", &C::download_uploaded),

      custom(restart, "logging.format", read_log_format, fields(&C::log_json)),
      bytes(restart, "logging.auditMaxSize", &C::audit_max_bytes,
            {.min = 64u << 10, .message = "must be at least 64Ki"}),
      integer(restart, "logging.auditFiles", &C::audit_files, 1, 1000),

      bytes(new_work, "quotas.storedBytesPerOwner", &C::stored_bytes_per_owner),
      integer(new_work, "quotas.threadsPerOwner", &C::threads_per_owner, 0, 100000000),
      integer(new_work, "quotas.skillsPerOwner", &C::skills_per_owner, 0, 100000000),
      integer(new_work, "quotas.skillVersionsPerOwner", &C::skill_versions_per_owner, 0, 100000000),
      integer(new_work, "quotas.containersPerOwner", &C::containers_per_owner, 0, 100000000),
      integer(new_work, "quotas.runningSandboxesPerOwner", &C::running_sandboxes_per_owner, 0, 1000000),

      custom(restart, "runtime.sandboxesPidsMax", read_sandboxes_pids_max, fields(&C::sandboxes_pids_max)),
      custom(restart, "runtime.sandboxesMemoryMax", read_sandboxes_memory_max,
             fields(&C::sandboxes_memory_max)),
      custom(restart, "runtime.sandboxesCpuMax", read_sandboxes_cpu_max, fields(&C::sandboxes_cpu_millis)),
      bytes(new_work, "runtime.skillMaxSize", &C::skill_max_bytes,
            {.min = 1024, .message = "must be at least 1Ki"}),
      integer(new_work, "runtime.skillMaxFiles", &C::skill_max_files, 1, 100000),
      integer(restart, "runtime.maxConnectionsPerSandbox", &C::max_connections_per_sandbox, 1, 4096),
      one_of(restart, "runtime.provider", &C::runtime_provider, {"sandboxd", "none"},
             "must be 'sandboxd' or 'none'"),
      one_of(restart, "runtime.isolation", &C::isolation, {"native", "gvisor"},
             "must be 'native' or 'gvisor'"),
      one_of(restart, "runtime.gvisorPlatform", &C::gvisor_platform, {"ptrace", "systrap", "kvm"},
             "must be ptrace, systrap or kvm"),
      flag(new_work, "runtime.keepMemory", &C::keep_memory),
      integer(new_work, "runtime.pauseHoldSeconds", &C::pause_hold_sec, 0, 86400),
      integer(restart, "runtime.prestartedSandboxes", &C::prestarted_sandboxes, 0, 64),
      integer(restart, "runtime.sandboxUid", &C::sandbox_host_uid, 1000, 4000000000LL),
      one_of(restart, "runtime.cgroupMode", &C::cgroup_mode, {"auto", "v1", "v2"}, "must be auto, v1 or v2"),
      text(restart, "runtime.skillsDir", &C::skills_dir),

      custom(restart, "cluster.replicaId", read_replica_id, fields(&C::cluster_replica_id)),
      custom(restart, "cluster.advertiseUrl", read_advertise_url, fields(&C::cluster_advertise_url)),
      integer(restart, "cluster.leaseSeconds", &C::cluster_lease_seconds, 1, 3600),
      integer(restart, "cluster.shutdownGraceSec", &C::cluster_shutdown_grace_sec, 1, 3600),
      integer(restart, "cluster.takeoverPerSecond", &C::cluster_takeover_per_second, 1, 100000),
      integer(restart, "cluster.takeoverBatch", &C::cluster_takeover_batch, 1, 10000),
      check(check_cluster),

      one_of(restart, "storage.backend", &C::storage_backend, {"local", "s3"}, "must be 'local' or 's3'"),
      integer(restart, "storage.flushIntervalSec", &C::flush_interval_sec, 1, 86400),
      custom(restart, "storage.s3.endpoint", read_s3_endpoint, fields(in_s3(&S3::endpoint))),
      custom(restart, "storage.s3.region", read_s3_region, fields(in_s3(&S3::region))),
      custom(restart, "storage.s3.bucket", read_s3_bucket, fields(in_s3(&S3::bucket))),
      custom(restart, "storage.s3.prefix", read_s3_prefix, fields(in_s3(&S3::prefix))),
      text(restart, "storage.s3.accessKeyId", in_s3(&S3::access_key_id)),
      text(restart, "storage.s3.secretAccessKey", in_s3(&S3::secret_access_key)),
      flag(restart, "storage.s3.forcePathStyle", in_s3(&S3::force_path_style)),
      bytes(restart, "storage.s3.partSize", in_s3(&S3::part_bytes),
            {.min = 5u << 20,
             .max = 512u << 20,
             .message = "must be between 5Mi (S3's smallest part) and 512Mi"}),
      integer(restart, "storage.s3.maxPartsInFlight", in_s3(&S3::max_parts_in_flight), 1, 16),
      bytes(restart, "storage.s3.singlePutMaxSize", in_s3(&S3::single_put_max_bytes),
            {.max = 5ull << 30, .message = "must be at most 5Gi (S3's largest PUT)"}),
      check(check_storage),

      one_of(restart, "metadata.backend", &C::metadata_backend, {"sqlite", "postgres"},
             "must be 'sqlite' or 'postgres'"),
      custom(restart, "metadata.postgres.url", read_postgres_url, fields(&C::postgres_url)),
      integer(restart, "metadata.postgres.lockTimeoutSec", &C::postgres_lock_timeout_sec, 0, 3600),
      integer(restart, "metadata.postgres.statementTimeoutSec", &C::postgres_statement_timeout_sec, 0, 86400),
      integer(restart, "metadata.postgres.idleInTransactionTimeoutSec",
              &C::postgres_idle_in_transaction_timeout_sec, 0, 86400),
      integer(restart, "metadata.fileCache.records", &C::file_cache_records, 0, 100'000'000),
      bytes(restart, "metadata.fileCache.maxSize", &C::file_cache_bytes,
            {.min = 1u << 20, .message = "must be at least 1Mi"}),

      custom(restart, "kubernetes.apiServer", read_kubernetes_api_server,
             fields(in_kubernetes(&K::api_server))),
      text(restart, "kubernetes.caFile", in_kubernetes(&K::ca_file)),
      text(restart, "kubernetes.tokenFile", in_kubernetes(&K::token_file)),
      text(restart, "kubernetes.namespace", in_kubernetes(&K::namespace_name)),
  };
  return kKeys;
}

std::vector<std::string> segments_of(std::string_view path) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string_view::npos; start = dot + 1)
    out.emplace_back(path.substr(start, dot - start));
  out.emplace_back(path.substr(start));
  return out;
}

// The names each mapping may hold ("" is the top level), from the rows' paths.
const std::map<std::string, std::set<std::string>>& known_keys() {
  static const auto known = [] {
    std::map<std::string, std::set<std::string>> out;
    for (const auto& key : keys()) {
      if (key.path.empty()) continue;
      std::string parent;
      for (const auto& segment : segments_of(key.path)) {
        out[parent].insert(segment);
        parent = join(parent, segment);
      }
    }
    return out;
  }();
  return known;
}

// Reads every row in order. A mapping's keys are checked when the first row under it is
// reached, before any of its values are read.
void read_keys(const YAML::Node& root, Config& c) {
  const auto& known = known_keys();
  std::set<std::string> checked;
  for (const auto& key : keys()) {
    if (key.check) {
      key.check(c);
      continue;
    }
    const auto segments = segments_of(key.path);
    // yaml-cpp's Node::operator= writes through to the node it refers to: each level is
    // a node of its own, never an assignment.
    std::vector<YAML::Node> levels{root};
    std::string path;
    for (size_t i = 0; i + 1 < segments.size(); ++i) {
      const YAML::Node& parent = levels.back();
      const YAML::Node section = parent[segments[i]];
      if (!section || section.IsNull()) break;
      path = join(path, segments[i]);
      if (checked.insert(path).second) only_keys(section, path, known.at(path));
      levels.push_back(section);
    }
    if (levels.size() != segments.size()) continue;  // a mapping above it is absent
    const YAML::Node& parent = levels.back();
    const YAML::Node value = parent[segments.back()];
    if (value && !value.IsNull()) key.read(value, std::string(key.path), c);
  }
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
  only_keys(root, "", known_keys().at(""));
  read_keys(root, c);
  // The peers are resolved through the Kubernetes API: in a pod its in-cluster address,
  // elsewhere only the one set here.
  if (!c.network_peers.empty() && c.kubernetes.api_server.empty() && !std::getenv("KUBERNETES_SERVICE_HOST"))
    throw ConfigError(std::string(kServicesPath) +
                      ": Kubernetes NetworkPolicy peers (namespaceSelector, podSelector, ipBlock) need the "
                      "Kubernetes API: run sandboxd in a Kubernetes pod (in-cluster service account) or set "
                      "kubernetes.apiServer");
  if (c.isolation == "gvisor") {
    // gVisor maps no user ids: what the agent (1000) writes through the gofer is owned
    // by 1000 on the host too, so the container's files are kept for that uid.
    const Config defaults;
    if (c.sandbox_host_uid != defaults.sandbox_host_uid && c.sandbox_host_uid != 1000)
      throw ConfigError("runtime.sandboxUid: must be 1000 (or unset) when runtime.isolation is 'gvisor'");
    c.sandbox_host_uid = 1000;
  }
  // The URL (with its password) may come from a Secret instead of the file.
  if (const char* url = std::getenv("SANDBOXD_POSTGRES_URL"); url && *url) c.postgres_url = url;
  if (c.metadata_backend == "postgres" && c.postgres_url.empty())
    throw ConfigError(
        "metadata.postgres.url: required when metadata.backend is 'postgres' (or set SANDBOXD_POSTGRES_URL)");
  return c;
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

Config load_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str());
}

std::vector<KeyReload> key_reload_policies() {
  std::vector<KeyReload> out;
  for (const auto& key : keys())
    if (!key.path.empty()) out.push_back({std::string(key.path), key.reload});
  return out;
}

ReloadedConfig reload_config(const Config& current, const Config& loaded) {
  ReloadedConfig out{current, {}};
  for (const auto& key : keys()) {
    if (key.path.empty()) continue;
    if (key.reload == Reload::new_work)
      key.transfer.take(loaded, out.config);
    else if (!key.transfer.same(loaded, current))
      out.restart_keys.emplace_back(key.path);
  }
  return out;
}

}  // namespace sandboxd::ops
