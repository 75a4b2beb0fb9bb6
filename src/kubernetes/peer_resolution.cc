#include "kubernetes/peer_resolution.h"

#include <algorithm>
#include <cctype>

namespace sandboxd::kubernetes {
namespace json = boost::json;
namespace {

// Field access that tolerates any shape: the API's JSON is read, never trusted.
const json::object* object_at(const json::object& object, std::string_view key) {
  const json::value* value = object.if_contains(key);
  return value ? value->if_object() : nullptr;
}
const json::array* array_at(const json::object& object, std::string_view key) {
  const json::value* value = object.if_contains(key);
  return value ? value->if_array() : nullptr;
}
std::string string_at(const json::object& object, std::string_view key) {
  const json::value* value = object.if_contains(key);
  const json::string* text = value ? value->if_string() : nullptr;
  return text ? std::string(*text) : std::string();
}
std::optional<uint16_t> port_at(const json::object& object, std::string_view key) {
  const json::value* value = object.if_contains(key);
  if (!value || !value->is_int64()) return std::nullopt;
  const int64_t number = value->as_int64();
  if (number < 1 || number > 65535) return std::nullopt;
  return static_cast<uint16_t>(number);
}
// A port's protocol: TCP when absent, as the API defaults it.
bool is_tcp(const json::object& port) {
  const std::string protocol = string_at(port, "protocol");
  return protocol.empty() || protocol == "TCP";
}
ops::Labels labels_of(const json::object& metadata) {
  ops::Labels labels;
  if (const json::object* map = object_at(metadata, "labels"))
    for (const auto& [key, value] : *map)
      if (const json::string* text = value.if_string()) labels[std::string(key)] = std::string(*text);
  return labels;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// The ports a rule lets a sandbox listen for on a pod: ranges are expanded, but never
// past this many ports a range (the listener limit cuts the total anyway).
constexpr uint32_t kMaxRangePorts = 256;

void add_rule_ports(const std::vector<ops::PolicyPort>& ports, const PodInfo& pod, std::set<uint16_t>& out) {
  if (ports.empty()) {
    out.insert(pod.container_ports.begin(), pod.container_ports.end());
    return;
  }
  for (const auto& port : ports) {
    if (port.port == 0) {
      if (auto it = pod.named_ports.find(port.name); it != pod.named_ports.end()) out.insert(it->second);
      continue;
    }
    const uint32_t last =
        std::min<uint32_t>(port.end_port ? port.end_port : port.port, port.port + kMaxRangePorts - 1);
    for (uint32_t p = port.port; p <= last; ++p) out.insert(static_cast<uint16_t>(p));
  }
}

}  // namespace

std::string object_key(const json::object& object) {
  const json::object* metadata = object_at(object, "metadata");
  if (!metadata) return {};
  return string_at(*metadata, "namespace") + "/" + string_at(*metadata, "name");
}

std::optional<NamespaceInfo> namespace_from_json(const json::object& object) {
  const json::object* metadata = object_at(object, "metadata");
  if (!metadata) return std::nullopt;
  NamespaceInfo info{string_at(*metadata, "name"), labels_of(*metadata)};
  if (info.name.empty()) return std::nullopt;
  return info;
}

std::optional<PodInfo> pod_from_json(const json::object& object) {
  const json::object* metadata = object_at(object, "metadata");
  if (!metadata) return std::nullopt;
  PodInfo pod;
  pod.namespace_name = string_at(*metadata, "namespace");
  pod.name = string_at(*metadata, "name");
  if (pod.namespace_name.empty() || pod.name.empty()) return std::nullopt;
  pod.labels = labels_of(*metadata);
  if (const json::object* status = object_at(object, "status")) {
    const std::string phase = string_at(*status, "phase");
    if (phase == "Succeeded" || phase == "Failed")
      return std::nullopt;  // its address may be someone else's now
    if (const json::array* ips = array_at(*status, "podIPs")) {
      for (const auto& entry : *ips)
        if (const json::object* ip = entry.if_object())
          if (auto address = ops::parse_ipv4(string_at(*ip, "ip"))) pod.ips.push_back(*address);
    }
    if (pod.ips.empty())
      if (auto address = ops::parse_ipv4(string_at(*status, "podIP"))) pod.ips.push_back(*address);
  }
  if (const json::object* spec = object_at(object, "spec"))
    if (const json::array* containers = array_at(*spec, "containers"))
      for (const auto& entry : *containers)
        if (const json::object* container = entry.if_object())
          if (const json::array* ports = array_at(*container, "ports"))
            for (const auto& port_entry : *ports)
              if (const json::object* port = port_entry.if_object(); port && is_tcp(*port))
                if (auto number = port_at(*port, "containerPort")) {
                  pod.container_ports.insert(*number);
                  if (std::string name = string_at(*port, "name"); !name.empty())
                    pod.named_ports[name] = *number;
                }
  return pod;
}

std::optional<ServiceInfo> service_from_json(const json::object& object) {
  const json::object* metadata = object_at(object, "metadata");
  const json::object* spec = object_at(object, "spec");
  if (!metadata || !spec) return std::nullopt;
  ServiceInfo service;
  service.namespace_name = string_at(*metadata, "namespace");
  service.name = string_at(*metadata, "name");
  if (service.namespace_name.empty() || service.name.empty()) return std::nullopt;
  if (string_at(*spec, "type") == "ExternalName") return std::nullopt;  // a DNS alias, no endpoints
  service.cluster_ip = ops::parse_ipv4(string_at(*spec, "clusterIP"));  // "None": headless
  if (const json::array* ports = array_at(*spec, "ports"))
    for (const auto& entry : *ports)
      if (const json::object* port = entry.if_object(); port && is_tcp(*port))
        if (auto number = port_at(*port, "port"))
          service.ports.push_back({string_at(*port, "name"), *number});
  return service;
}

std::optional<EndpointSliceInfo> endpoint_slice_from_json(const json::object& object) {
  const json::object* metadata = object_at(object, "metadata");
  if (!metadata || string_at(object, "addressType") != "IPv4") return std::nullopt;
  EndpointSliceInfo slice;
  slice.namespace_name = string_at(*metadata, "namespace");
  slice.name = string_at(*metadata, "name");
  auto labels = labels_of(*metadata);
  slice.service_name = labels["kubernetes.io/service-name"];
  if (slice.namespace_name.empty() || slice.name.empty() || slice.service_name.empty()) return std::nullopt;
  if (const json::array* ports = array_at(object, "ports"))
    for (const auto& entry : *ports)
      if (const json::object* port = entry.if_object(); port && is_tcp(*port))
        if (auto number = port_at(*port, "port")) slice.ports.push_back({string_at(*port, "name"), *number});
  if (const json::array* endpoints = array_at(object, "endpoints"))
    for (const auto& entry : *endpoints) {
      const json::object* endpoint = entry.if_object();
      if (!endpoint) continue;
      EndpointSliceInfo::Endpoint out;
      if (const json::array* addresses = array_at(*endpoint, "addresses"))
        for (const auto& address : *addresses)
          if (const json::string* text = address.if_string())
            if (auto parsed = ops::parse_ipv4(std::string(*text))) out.addresses.push_back(*parsed);
      if (const json::object* conditions = object_at(*endpoint, "conditions"))
        if (const json::value* ready = conditions->if_contains("ready"); ready && ready->is_bool())
          out.ready = ready->as_bool();
      if (const json::object* target = object_at(*endpoint, "targetRef");
          target && string_at(*target, "kind") == "Pod")
        out.pod_name = string_at(*target, "name");
      slice.endpoints.push_back(std::move(out));
    }
  return slice;
}

ResolvedPeers resolve_peers(const std::vector<ops::NetworkPeer>& peers, const std::string& own_namespace,
                            const ClusterObjects& objects) {
  ResolvedPeers out;
  for (const auto& [key, pod] : objects.pods) {
    auto ns = objects.namespaces.find(pod.namespace_name);
    for (const auto& peer : peers) {
      if (peer.ip_block) {
        // A named port of an address block names a port of the pods in it, as the
        // policy's own enforcement reads it; addresses that are no known pod have no
        // names, so only the block's numeric ports reach them.
        const bool named = std::any_of(peer.ports.begin(), peer.ports.end(),
                                       [](const ops::PolicyPort& port) { return port.port == 0; });
        if (!named) continue;
        for (uint32_t ip : pod.ips)
          if (ops::ip_block_contains(*peer.ip_block, ip)) {
            out.pod_rules_[ip].push_back({peer.ports, pod.named_ports});
            add_rule_ports(peer.ports, pod, out.pods_[ip]);
          }
        continue;
      }
      const bool namespace_selected =
          peer.namespace_selector ? ns != objects.namespaces.end() &&
                                        ops::selector_matches(*peer.namespace_selector, ns->second.labels)
                                  : pod.namespace_name == own_namespace;
      if (!namespace_selected) continue;
      if (peer.pod_selector && !ops::selector_matches(*peer.pod_selector, pod.labels)) continue;
      for (uint32_t ip : pod.ips) {
        out.pod_rules_[ip].push_back({peer.ports, pod.named_ports});
        add_rule_ports(peer.ports, pod, out.pods_[ip]);
      }
    }
  }
  for (const auto& peer : peers)
    if (peer.ip_block) out.blocks_.emplace_back(*peer.ip_block, peer.ports);

  for (const auto& [key, service] : objects.services) {
    std::set<uint32_t> headless_addresses;
    bool any = false;
    for (const auto& service_port : service.ports) {
      std::vector<Endpoint> targets;
      for (const auto& [slice_key, slice] : objects.endpoint_slices) {
        if (slice.namespace_name != service.namespace_name || slice.service_name != service.name) continue;
        for (const auto& slice_port : slice.ports) {
          if (slice_port.name != service_port.name) continue;
          for (const auto& endpoint : slice.endpoints) {
            if (!endpoint.ready) continue;
            for (uint32_t address : endpoint.addresses) {
              Endpoint target{address, slice_port.port};
              if (!out.allowed(target)) continue;
              targets.push_back(target);
              if (out.pod_rules_.count(address)) out.pods_[address].insert(slice_port.port);
              headless_addresses.insert(address);
            }
          }
        }
      }
      if (targets.empty()) continue;
      any = true;
      if (service.cluster_ip) out.services_[{*service.cluster_ip, service_port.port}] = std::move(targets);
    }
    if (!any) continue;
    std::vector<uint32_t> addresses;
    if (service.cluster_ip)
      addresses.push_back(*service.cluster_ip);
    else
      addresses.assign(headless_addresses.begin(), headless_addresses.end());
    const std::string base = lower(service.name + "." + service.namespace_name);
    for (const std::string& name : {base, base + ".svc", base + ".svc." + kClusterDomain})
      out.names_[name] = addresses;
  }
  return out;
}

bool ResolvedPeers::allowed(Endpoint destination) const {
  if (auto it = pod_rules_.find(destination.address); it != pod_rules_.end())
    for (const auto& rule : it->second)
      if (ops::port_allowed(rule.ports, destination.port, rule.named)) return true;
  for (const auto& [block, ports] : blocks_)
    if (ops::ip_block_contains(block, destination.address) && ops::port_allowed(ports, destination.port, {}))
      return true;
  return false;
}

std::vector<uint32_t> ResolvedPeers::resolve(std::string name) const {
  if (!name.empty() && name.back() == '.') name.pop_back();
  auto it = names_.find(lower(std::move(name)));
  return it == names_.end() ? std::vector<uint32_t>{} : it->second;
}

std::optional<Endpoint> ResolvedPeers::route(Endpoint destination, size_t pick) const {
  if (auto it = services_.find(destination); it != services_.end())
    return it->second[pick % it->second.size()];
  if (allowed(destination)) return destination;
  return std::nullopt;
}

std::vector<ListenAddress> ResolvedPeers::listeners(size_t limit, size_t* dropped) const {
  std::set<ListenAddress> wanted;
  std::set<uint16_t> every_address;  // an ipBlock's ports: listened for on every address
  for (const auto& [block, ports] : blocks_) {
    std::set<uint16_t> numbers;
    add_rule_ports(ports, PodInfo{}, numbers);
    every_address.insert(numbers.begin(), numbers.end());
  }
  for (uint16_t port : every_address) wanted.insert({0, port});
  for (const auto& [destination, targets] : services_)
    if (!every_address.count(destination.port)) wanted.insert(destination);
  for (const auto& [address, ports] : pods_)
    for (uint16_t port : ports)
      if (!every_address.count(port)) wanted.insert({address, port});
  std::vector<ListenAddress> out(wanted.begin(), wanted.end());
  // The wildcard ones first (they sort first), so a cut keeps the blocks' ports.
  if (dropped) *dropped = out.size() > limit ? out.size() - limit : 0;
  if (out.size() > limit) out.resize(limit);
  return out;
}

}  // namespace sandboxd::kubernetes
