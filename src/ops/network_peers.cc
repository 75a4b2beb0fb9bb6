#include "ops/network_peers.h"

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "ops/config.h"

namespace sandboxd::ops {
namespace {

std::string scalar(const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) throw ConfigError(path + ": must be a scalar value");
  return node.Scalar();
}

void only_keys(const YAML::Node& node, const std::string& path, std::initializer_list<const char*> allowed) {
  if (!node.IsMap()) throw ConfigError(path + ": must be a mapping");
  std::set<std::string> known(allowed.begin(), allowed.end());
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) throw ConfigError(path + ": keys must be plain names");
    if (!known.count(entry.first.Scalar()))
      throw ConfigError(path + "." + entry.first.Scalar() + ": unknown key");
  }
}

bool alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// A qualified name's name part, and a label value when not empty: at most 63
// characters, alphanumerics with '-', '_' or '.' inside.
bool valid_label_name(const std::string& s) {
  if (s.empty() || s.size() > 63 || !alnum(s.front()) || !alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

// A DNS-1123 subdomain: lower-case labels of alphanumerics and '-', at most 253.
bool valid_dns_subdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (start <= s.size()) {
    size_t dot = s.find('.', start);
    std::string label = s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label)
      if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) ||
            c == '-'))
        return false;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return true;
}

void check_label_key(const std::string& key, const std::string& path) {
  auto slash = key.find('/');
  std::string name = slash == std::string::npos ? key : key.substr(slash + 1);
  if (slash != std::string::npos && !valid_dns_subdomain(key.substr(0, slash)))
    throw ConfigError(path + ": '" + key + "' is not a valid label key (its prefix must be a DNS subdomain)");
  if (!valid_label_name(name))
    throw ConfigError(
        path + ": '" + key +
        "' is not a valid label key (at most 63 alphanumerics, '-', '_' or '.', starting and ending "
        "alphanumeric, after an optional DNS-subdomain prefix and '/')");
}

void check_label_value(const std::string& value, const std::string& path) {
  if (!value.empty() && !valid_label_name(value))
    throw ConfigError(
        path + ": '" + value +
        "' is not a valid label value (empty, or at most 63 alphanumerics, '-', '_' or '.', starting "
        "and ending alphanumeric)");
}

LabelSelector parse_selector(const YAML::Node& node, const std::string& path) {
  LabelSelector selector;
  if (node.IsNull()) return selector;  // `podSelector:` with nothing: selects all, as {}
  only_keys(node, path, {"matchLabels", "matchExpressions"});
  if (const YAML::Node labels = node["matchLabels"]; labels && !labels.IsNull()) {
    const std::string lp = path + ".matchLabels";
    if (!labels.IsMap()) throw ConfigError(lp + ": must be a mapping of label to value");
    for (const auto& entry : labels) {
      std::string key = scalar(entry.first, lp);
      check_label_key(key, lp + "." + key);
      std::string value = scalar(entry.second, lp + "." + key);
      check_label_value(value, lp + "." + key);
      selector.match_labels[key] = value;
    }
  }
  if (const YAML::Node list = node["matchExpressions"]; list && !list.IsNull()) {
    const std::string lp = path + ".matchExpressions";
    if (!list.IsSequence()) throw ConfigError(lp + ": must be a list");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string ep = lp + "[" + std::to_string(i) + "]";
      only_keys(list[i], ep, {"key", "operator", "values"});
      if (!list[i]["key"] || !list[i]["operator"]) throw ConfigError(ep + ": needs key and operator");
      LabelRequirement req;
      req.key = scalar(list[i]["key"], ep + ".key");
      check_label_key(req.key, ep + ".key");
      const std::string op = scalar(list[i]["operator"], ep + ".operator");
      if (op == "In")
        req.op = LabelRequirement::Operator::In;
      else if (op == "NotIn")
        req.op = LabelRequirement::Operator::NotIn;
      else if (op == "Exists")
        req.op = LabelRequirement::Operator::Exists;
      else if (op == "DoesNotExist")
        req.op = LabelRequirement::Operator::DoesNotExist;
      else
        throw ConfigError(ep + ".operator: must be In, NotIn, Exists or DoesNotExist, not '" + op + "'");
      if (const YAML::Node values = list[i]["values"]; values && !values.IsNull()) {
        if (!values.IsSequence()) throw ConfigError(ep + ".values: must be a list");
        for (size_t v = 0; v < values.size(); ++v) {
          const std::string vp = ep + ".values[" + std::to_string(v) + "]";
          req.values.push_back(scalar(values[v], vp));
          check_label_value(req.values.back(), vp);
        }
      }
      const bool set_based =
          req.op == LabelRequirement::Operator::In || req.op == LabelRequirement::Operator::NotIn;
      if (set_based && req.values.empty())
        throw ConfigError(ep + ".values: must be non-empty when operator is " + op);
      if (!set_based && !req.values.empty())
        throw ConfigError(ep + ".values: must be empty when operator is " + op);
      selector.match_expressions.push_back(std::move(req));
    }
  }
  return selector;
}

Ipv4Network read_cidr(const YAML::Node& node, const std::string& path) {
  const std::string text = scalar(node, path);
  if (text.find(':') != std::string::npos)
    throw ConfigError(path + ": '" + text + "' is IPv6; a sandbox's network is IPv4 only");
  auto network = parse_ipv4_cidr(text);
  if (!network) throw ConfigError(path + ": '" + text + "' is not a CIDR such as 10.0.0.0/16");
  return *network;
}

IpBlock parse_ip_block(const YAML::Node& node, const std::string& path) {
  only_keys(node, path, {"cidr", "except"});
  if (!node["cidr"]) throw ConfigError(path + ".cidr: required");
  IpBlock block{read_cidr(node["cidr"], path + ".cidr"), {}};
  if (const YAML::Node list = node["except"]; list && !list.IsNull()) {
    if (!list.IsSequence()) throw ConfigError(path + ".except: must be a list");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string ep = path + ".except[" + std::to_string(i) + "]";
      Ipv4Network inner = read_cidr(list[i], ep);
      // As the API server validates: each exception lies strictly inside the cidr.
      if (inner.prefix <= block.cidr.prefix || !network_contains(block.cidr, inner.address))
        throw ConfigError(ep + ": must be a network strictly inside " + format_ipv4(block.cidr.address) +
                          "/" + std::to_string(block.cidr.prefix));
      block.except.push_back(inner);
    }
  }
  return block;
}

// An IANA service name, as a named container port: at most 15 lower-case alphanumerics
// and '-', at least one letter, no '-' at either end or twice in a row.
bool valid_port_name(const std::string& s) {
  if (s.empty() || s.size() > 15 || s.front() == '-' || s.back() == '-' || s.find("--") != std::string::npos)
    return false;
  bool letter = false;
  for (char c : s) {
    if (std::islower(static_cast<unsigned char>(c)))
      letter = true;
    else if (!std::isdigit(static_cast<unsigned char>(c)) && c != '-')
      return false;
  }
  return letter;
}

uint16_t read_port_number(const std::string& text, const std::string& path) {
  if (text.empty() || text.size() > 5 || !std::all_of(text.begin(), text.end(), ::isdigit))
    throw ConfigError(path + ": must be a port number (1-65535) or a port name, not '" + text + "'");
  int value = std::stoi(text);
  if (value < 1 || value > 65535) throw ConfigError(path + ": must be between 1 and 65535");
  return static_cast<uint16_t>(value);
}

std::vector<PolicyPort> parse_ports(const YAML::Node& list, const std::string& path) {
  if (!list.IsSequence()) throw ConfigError(path + ": must be a list");
  std::vector<PolicyPort> ports;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string ep = path + "[" + std::to_string(i) + "]";
    only_keys(list[i], ep, {"protocol", "port", "endPort"});
    if (const YAML::Node protocol = list[i]["protocol"]; protocol && !protocol.IsNull()) {
      const std::string value = scalar(protocol, ep + ".protocol");
      if (value == "UDP" || value == "SCTP")
        throw ConfigError(
            ep + ".protocol: " + value +
            " is not supported: a sandbox reaches services through relayed TCP connections only");
      if (value != "TCP") throw ConfigError(ep + ".protocol: must be TCP, UDP or SCTP, not '" + value + "'");
    }
    PolicyPort port;
    const YAML::Node number = list[i]["port"];
    if (!number || number.IsNull()) {
      // Kubernetes: no port means every port of the protocol.
      if (list[i]["endPort"]) throw ConfigError(ep + ".endPort: needs a numeric port");
      throw ConfigError(ep +
                        ".port: required (a sandbox listens per allowed port; list the ports, or leave out "
                        "`ports` on a selector peer to allow its Services' ports)");
    }
    const std::string text = scalar(number, ep + ".port");
    if (!text.empty() && std::isdigit(static_cast<unsigned char>(text.front()))) {
      port.port = read_port_number(text, ep + ".port");
    } else {
      if (!valid_port_name(text))
        throw ConfigError(
            ep + ".port: '" + text +
            "' is not a port number or a port name (at most 15 lower-case alphanumerics and '-', with "
            "a letter)");
      port.name = text;
    }
    if (const YAML::Node end = list[i]["endPort"]; end && !end.IsNull()) {
      if (port.port == 0) throw ConfigError(ep + ".endPort: needs a numeric port, not a named one");
      port.end_port = read_port_number(scalar(end, ep + ".endPort"), ep + ".endPort");
      if (port.end_port < port.port) throw ConfigError(ep + ".endPort: must be at least port");
    }
    ports.push_back(std::move(port));
  }
  return ports;
}

}  // namespace

bool selector_matches(const LabelSelector& selector, const Labels& labels) {
  for (const auto& [key, value] : selector.match_labels) {
    auto it = labels.find(key);
    if (it == labels.end() || it->second != value) return false;
  }
  for (const auto& req : selector.match_expressions) {
    auto it = labels.find(req.key);
    const bool has = it != labels.end();
    const bool listed =
        has && std::find(req.values.begin(), req.values.end(), it->second) != req.values.end();
    switch (req.op) {
      case LabelRequirement::Operator::In:
        if (!listed) return false;
        break;
      case LabelRequirement::Operator::NotIn:  // a missing key is "not in" (the API's semantics)
        if (listed) return false;
        break;
      case LabelRequirement::Operator::Exists:
        if (!has) return false;
        break;
      case LabelRequirement::Operator::DoesNotExist:
        if (has) return false;
        break;
    }
  }
  return true;
}

std::optional<uint32_t> parse_ipv4(const std::string& text) {
  in_addr addr{};
  if (text.empty() || inet_pton(AF_INET, text.c_str(), &addr) != 1) return std::nullopt;
  return ntohl(addr.s_addr);
}

std::string format_ipv4(uint32_t address) {
  in_addr addr{htonl(address)};
  char buffer[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr, buffer, sizeof buffer);
  return buffer;
}

std::optional<Ipv4Network> parse_ipv4_cidr(const std::string& text) {
  auto slash = text.find('/');
  if (slash == std::string::npos) return std::nullopt;
  auto address = parse_ipv4(text.substr(0, slash));
  const std::string bits = text.substr(slash + 1);
  if (!address || bits.empty() || bits.size() > 2 || !std::all_of(bits.begin(), bits.end(), ::isdigit))
    return std::nullopt;
  int prefix = std::stoi(bits);
  if (prefix > 32) return std::nullopt;
  // The API server takes the network's base address (10.0.0.1/8 means 10.0.0.0/8).
  uint32_t mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
  return Ipv4Network{*address & mask, prefix};
}

bool network_contains(const Ipv4Network& network, uint32_t address) {
  uint32_t mask = network.prefix == 0 ? 0 : ~uint32_t{0} << (32 - network.prefix);
  return (address & mask) == network.address;
}

bool ip_block_contains(const IpBlock& block, uint32_t address) {
  if (!network_contains(block.cidr, address)) return false;
  for (const auto& inner : block.except)
    if (network_contains(inner, address)) return false;
  return true;
}

bool is_network_peer(const YAML::Node& entry) {
  return entry.IsMap() && (entry["namespaceSelector"] || entry["podSelector"] || entry["ipBlock"]);
}

NetworkPeer parse_network_peer(const YAML::Node& entry, const std::string& path) {
  only_keys(entry, path, {"namespaceSelector", "podSelector", "ipBlock", "ports"});
  NetworkPeer peer;
  if (entry["ipBlock"]) {
    if (entry["namespaceSelector"] || entry["podSelector"])
      throw ConfigError(path + ".ipBlock: may not be combined with namespaceSelector or podSelector");
    peer.ip_block = parse_ip_block(entry["ipBlock"], path + ".ipBlock");
  }
  if (entry["namespaceSelector"])
    peer.namespace_selector = parse_selector(entry["namespaceSelector"], path + ".namespaceSelector");
  if (entry["podSelector"]) peer.pod_selector = parse_selector(entry["podSelector"], path + ".podSelector");
  if (const YAML::Node ports = entry["ports"]; ports && !ports.IsNull())
    peer.ports = parse_ports(ports, path + ".ports");
  // An address block has no Services to take ports from, and a sandbox listens per port.
  if (peer.ip_block && peer.ports.empty())
    throw ConfigError(path + ".ports: required with ipBlock (the ports the addresses are reachable on)");
  YAML::Emitter out;
  out << YAML::Flow << entry;
  peer.source = out.c_str();
  return peer;
}

bool port_allowed(const std::vector<PolicyPort>& ports, uint16_t port,
                  const std::map<std::string, uint16_t>& named) {
  if (ports.empty()) return true;
  for (const auto& allowed : ports) {
    if (allowed.port != 0) {
      const uint16_t last = allowed.end_port ? allowed.end_port : allowed.port;
      if (port >= allowed.port && port <= last) return true;
    } else if (auto it = named.find(allowed.name); it != named.end() && it->second == port) {
      return true;
    }
  }
  return false;
}

}  // namespace sandboxd::ops
