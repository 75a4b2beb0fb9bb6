// The allow-listed services in Kubernetes NetworkPolicy form: a NetworkPolicyPeer
// (namespaceSelector and/or podSelector, or ipBlock) with an optional NetworkPolicyPort
// list, as the Kubernetes networking/v1 API defines them. Parsing refuses what the API
// server would refuse (with the key's path); matching is the API's label-selector
// semantics. Pure: no I/O, so both are unit-tested directly.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace sandboxd::ops {

using Labels = std::map<std::string, std::string>;

struct LabelRequirement {
  enum class Operator { In, NotIn, Exists, DoesNotExist };
  std::string key;
  Operator op = Operator::Exists;
  std::vector<std::string> values;
};

// metav1.LabelSelector: every matchLabels pair and every matchExpressions requirement
// must hold (an empty selector selects everything).
struct LabelSelector {
  Labels match_labels;
  std::vector<LabelRequirement> match_expressions;
};

bool selector_matches(const LabelSelector& selector, const Labels& labels);

// An IPv4 network: `address` in host byte order, `prefix` bits.
struct Ipv4Network {
  uint32_t address = 0;
  int prefix = 0;
};
std::optional<Ipv4Network> parse_ipv4_cidr(const std::string& text);
std::optional<uint32_t> parse_ipv4(const std::string& text);
std::string format_ipv4(uint32_t address);
bool network_contains(const Ipv4Network& network, uint32_t address);

struct IpBlock {
  Ipv4Network cidr;
  std::vector<Ipv4Network> except;
};
bool ip_block_contains(const IpBlock& block, uint32_t address);

// networking/v1 NetworkPolicyPort (TCP only: relayed connections are TCP). A named port
// is the destination pod's container port of that name.
struct PolicyPort {
  uint16_t port = 0;  // 0: `name` instead
  std::string name;
  uint16_t end_port = 0;  // 0: just `port`; else the range port..end_port
};

struct NetworkPeer {
  std::optional<LabelSelector> namespace_selector;
  std::optional<LabelSelector> pod_selector;
  std::optional<IpBlock> ip_block;
  std::vector<PolicyPort> ports;  // empty: every port (for Services: their ports)
  std::string source;             // the entry as written, to tell a changed list on reload
};

// Whether a services entry is in peer form (has any NetworkPolicyPeer key).
bool is_network_peer(const YAML::Node& entry);
// Parses one entry at `path` (e.g. "...services[2]"). Throws ConfigError.
NetworkPeer parse_network_peer(const YAML::Node& entry, const std::string& path);

// Whether `port` on a pod whose named container ports are `named` is allowed by `ports`.
bool port_allowed(const std::vector<PolicyPort>& ports, uint16_t port,
                  const std::map<std::string, uint16_t>& named);

}  // namespace sandboxd::ops
