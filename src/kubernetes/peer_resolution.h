// What the NetworkPolicy peers select in a cluster, as one immutable set: the objects
// of the Kubernetes API the watches keep (namespaces, pods, services, endpoint slices,
// reduced to what the peers need) and the set resolved from them: which names a
// sandbox may resolve, and for which address and port a new connection is allowed and
// where it is relayed. Pure: converting the API's JSON and resolving are unit-tested.
#pragma once

#include <boost/json/object.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ops/network_peers.h"

namespace sandboxd::kubernetes {

// The domain the cluster's Service names end in (svc.ns.svc.cluster.local).
inline constexpr const char* kClusterDomain = "cluster.local";

struct NamespaceInfo {
  std::string name;
  ops::Labels labels;
};

struct PodInfo {
  std::string namespace_name, name;
  ops::Labels labels;
  std::vector<uint32_t> ips;                    // IPv4 only: a sandbox's network is IPv4
  std::map<std::string, uint16_t> named_ports;  // TCP container ports that have a name
  std::set<uint16_t> container_ports;           // every declared TCP container port
};

struct ServiceInfo {
  struct Port {
    std::string name;
    uint16_t port = 0;
  };
  std::string namespace_name, name;
  std::optional<uint32_t> cluster_ip;  // none for a headless Service
  std::vector<Port> ports;             // TCP ports
};

struct EndpointSliceInfo {
  struct Port {
    std::string name;
    uint16_t port = 0;
  };
  struct Endpoint {
    std::vector<uint32_t> addresses;
    std::string pod_name;  // targetRef of kind Pod, if any
    bool ready = true;     // conditions.ready; absent means ready
  };
  std::string namespace_name, name, service_name;  // the kubernetes.io/service-name label
  std::vector<Port> ports;
  std::vector<Endpoint> endpoints;
};

// The objects as the API's JSON (OpenAPI v1 core and discovery.k8s.io/v1) defines
// them. Anything not usable (no name, no IPv4 address) gives nullopt.
std::optional<NamespaceInfo> namespace_from_json(const boost::json::object& object);
std::optional<PodInfo> pod_from_json(const boost::json::object& object);
std::optional<ServiceInfo> service_from_json(const boost::json::object& object);
std::optional<EndpointSliceInfo> endpoint_slice_from_json(const boost::json::object& object);

// "namespace/name": how the objects are keyed.
std::string object_key(const boost::json::object& object);

struct ClusterObjects {
  std::map<std::string, NamespaceInfo> namespaces;  // by name
  std::map<std::string, PodInfo> pods;              // by namespace/name
  std::map<std::string, ServiceInfo> services;      // by namespace/name
  std::map<std::string, EndpointSliceInfo> endpoint_slices;
};

struct Endpoint {
  uint32_t address = 0;
  uint16_t port = 0;
  auto operator<=>(const Endpoint&) const = default;
};

// A sandbox listener that a peer needs: `address` 0 is every address (an ipBlock's).
using ListenAddress = Endpoint;

class ResolvedPeers {
 public:
  // The addresses `name` resolves to (empty: it does not resolve). Case-insensitive,
  // a trailing dot allowed.
  std::vector<uint32_t> resolve(std::string name) const;

  // Where a new connection to `destination` is relayed, or nullopt: refused.
  // `pick` spreads connections to a Service over its allowed endpoints.
  std::optional<Endpoint> route(Endpoint destination, size_t pick) const;

  // The listeners a sandbox needs for these peers, at most `limit` (the rest are not
  // reachable, never more than the set allows); `dropped` counts them.
  std::vector<ListenAddress> listeners(size_t limit, size_t* dropped = nullptr) const;

  size_t names() const { return names_.size(); }
  size_t addresses() const { return pods_.size(); }

 private:
  friend ResolvedPeers resolve_peers(const std::vector<ops::NetworkPeer>&, const std::string&,
                                     const ClusterObjects&);
  std::map<std::string, std::vector<uint32_t>> names_;  // DNS name -> addresses
  std::map<Endpoint, std::vector<Endpoint>> services_;  // (cluster IP, port) -> allowed endpoints
  std::map<uint32_t, std::set<uint16_t>> pods_;         // selected pod IP -> allowed ports it declares
  struct PodRule {
    std::vector<ops::PolicyPort> ports;  // {}: every port
    std::map<std::string, uint16_t> named;
  };
  std::map<uint32_t, std::vector<PodRule>> pod_rules_;  // selected pod IP -> what its peers allow
  std::vector<std::pair<ops::IpBlock, std::vector<ops::PolicyPort>>> blocks_;
  bool allowed(Endpoint destination) const;
};

// Resolves `peers` against `objects`. A peer with only podSelector selects in
// `own_namespace` (as a NetworkPolicy selects in its own namespace).
ResolvedPeers resolve_peers(const std::vector<ops::NetworkPeer>& peers, const std::string& own_namespace,
                            const ClusterObjects& objects);

}  // namespace sandboxd::kubernetes
