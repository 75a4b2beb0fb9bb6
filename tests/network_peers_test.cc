// The NetworkPolicy peer form of the services list: parsed as the Kubernetes API
// defines NetworkPolicyPeer and NetworkPolicyPort (bad selectors refused with the key's
// path), and label selectors matched with the API's semantics.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <boost/json.hpp>

#include "kubernetes/peer_resolution.h"
#include "ops/config.h"
#include "ops/network_peers.h"
#include "server/dns_message.h"

using namespace sandboxd::ops;
namespace k8s = sandboxd::kubernetes;
namespace bj = boost::json;

namespace {

const std::string kPrefix =
    "kubernetes: { apiServer: \"https://127.0.0.1:6443\" }\n"
    "external:\n  opensandbox:\n    codeExecution:\n      internal:\n        services:\n";
const std::string kPath = "external.opensandbox.codeExecution.internal.services";

Config parse_services(const std::string& entries) { return parse_config(kPrefix + entries); }

std::string error_of(const std::string& entries) {
  try {
    parse_services(entries);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

LabelSelector selector(const std::string& yaml) {
  auto c = parse_services("          - podSelector: " + yaml + "\n");
  return *c.network_peers.at(0).pod_selector;
}

TEST(NetworkPeers, TheSeedsFormParses) {
  auto c = parse_services(
      "          - namespaceSelector: { matchLabels: { kubernetes.io/metadata.name: analytics } }\n"
      "            podSelector: { matchLabels: { app: postgres } }\n"
      "          - { name: db.internal, host: 10.0.0.12, port: 5432 }\n");
  ASSERT_EQ(c.network_peers.size(), 1u);
  ASSERT_EQ(c.internal_services.size(), 1u);
  const auto& peer = c.network_peers[0];
  ASSERT_TRUE(peer.namespace_selector && peer.pod_selector);
  EXPECT_FALSE(peer.ip_block);
  EXPECT_EQ(peer.namespace_selector->match_labels.at("kubernetes.io/metadata.name"), "analytics");
  EXPECT_EQ(peer.pod_selector->match_labels.at("app"), "postgres");
  EXPECT_TRUE(peer.ports.empty());
}

TEST(NetworkPeers, PortsParse) {
  auto c = parse_services(
      "          - podSelector: {}\n"
      "            ports: [{ protocol: TCP, port: 8000, endPort: 8010 }, { port: metrics }, { port: 5432 "
      "}]\n");
  const auto& ports = c.network_peers.at(0).ports;
  ASSERT_EQ(ports.size(), 3u);
  EXPECT_EQ(ports[0].port, 8000);
  EXPECT_EQ(ports[0].end_port, 8010);
  EXPECT_EQ(ports[1].name, "metrics");
  EXPECT_EQ(ports[2].port, 5432);
  std::map<std::string, uint16_t> named{{"metrics", 9100}};
  EXPECT_TRUE(port_allowed(ports, 8005, named));
  EXPECT_TRUE(port_allowed(ports, 9100, named));
  EXPECT_TRUE(port_allowed(ports, 5432, named));
  EXPECT_FALSE(port_allowed(ports, 8011, named));
  EXPECT_FALSE(port_allowed(ports, 9100, {}));
  EXPECT_TRUE(port_allowed({}, 1, {})) << "no ports: every port, as Kubernetes";
}

TEST(NetworkPeers, BadSelectorsAreRefusedWithTheirPath) {
  EXPECT_EQ(
      error_of("          - podSelector: { matchLabels: { \"-bad\": x } }\n"),
      kPath +
          "[0].podSelector.matchLabels.-bad: '-bad' is not a valid label key (at most 63 alphanumerics, "
          "'-', '_' or '.', starting and ending alphanumeric, after an optional DNS-subdomain prefix and "
          "'/')");
  EXPECT_NE(error_of("          - podSelector: { matchLabels: { app: \"has space\" } }\n")
                .find(kPath + "[0].podSelector.matchLabels.app: 'has space' is not a valid label value"),
            std::string::npos);
  EXPECT_EQ(
      error_of(
          "          - podSelector: { matchExpressions: [{ key: app, operator: Like, values: [a] }] }\n"),
      kPath +
          "[0].podSelector.matchExpressions[0].operator: must be In, NotIn, Exists or DoesNotExist, not "
          "'Like'");
  EXPECT_EQ(error_of("          - podSelector: { matchExpressions: [{ key: app, operator: In }] }\n"),
            kPath + "[0].podSelector.matchExpressions[0].values: must be non-empty when operator is In");
  EXPECT_EQ(
      error_of(
          "          - podSelector: { matchExpressions: [{ key: app, operator: Exists, values: [a] }] }\n"),
      kPath + "[0].podSelector.matchExpressions[0].values: must be empty when operator is Exists");
  EXPECT_EQ(
      error_of(
          "          - { name: x, host: y, port: 1 }\n          - namespaceSelector: { matchLabel: {} }\n"),
      kPath + "[1].namespaceSelector.matchLabel: unknown key");
  EXPECT_EQ(error_of("          - podSelector: { matchLabels: { \"Bad_Prefix/app\": x } }\n").substr(0, 80),
            (kPath + "[0].podSelector.matchLabels.Bad_Prefix/app: 'Bad_Prefix/app' is not a valid label key")
                .substr(0, 80));
}

TEST(NetworkPeers, BadBlocksAndPortsAreRefused) {
  EXPECT_EQ(error_of("          - ipBlock: { cidr: 10.0.0.0/33 }\n            ports: [{ port: 1 }]\n"),
            kPath + "[0].ipBlock.cidr: '10.0.0.0/33' is not a CIDR such as 10.0.0.0/16");
  EXPECT_EQ(error_of("          - ipBlock: { cidr: \"fd00::/8\" }\n            ports: [{ port: 1 }]\n"),
            kPath + "[0].ipBlock.cidr: 'fd00::/8' is IPv6; a sandbox's network is IPv4 only");
  EXPECT_EQ(error_of("          - ipBlock: { cidr: 10.0.0.0/16, except: [10.1.0.0/24] }\n            ports: "
                     "[{ port: 1 }]\n"),
            kPath + "[0].ipBlock.except[0]: must be a network strictly inside 10.0.0.0/16");
  EXPECT_EQ(error_of("          - ipBlock: { cidr: 10.0.0.0/16 }\n            podSelector: {}\n"),
            kPath + "[0].ipBlock: may not be combined with namespaceSelector or podSelector");
  EXPECT_EQ(error_of("          - ipBlock: { cidr: 10.0.0.0/16 }\n"),
            kPath + "[0].ports: required with ipBlock (the ports the addresses are reachable on)");
  EXPECT_EQ(error_of("          - podSelector: {}\n            ports: [{ protocol: UDP, port: 53 }]\n"),
            kPath +
                "[0].ports[0].protocol: UDP is not supported: a sandbox reaches services through relayed TCP "
                "connections only");
  EXPECT_EQ(error_of("          - podSelector: {}\n            ports: [{ port: 80, endPort: 79 }]\n"),
            kPath + "[0].ports[0].endPort: must be at least port");
  EXPECT_EQ(error_of("          - podSelector: {}\n            ports: [{ port: http, endPort: 90 }]\n"),
            kPath + "[0].ports[0].endPort: needs a numeric port, not a named one");
  EXPECT_EQ(error_of("          - podSelector: {}\n            ports: [{ port: 70000 }]\n"),
            kPath + "[0].ports[0].port: must be between 1 and 65535");
  EXPECT_NE(error_of("          - podSelector: {}\n            ports: [{ port: Not_A_Name }]\n")
                .find("[0].ports[0].port: 'Not_A_Name' is not a port number or a port name"),
            std::string::npos);
}

TEST(NetworkPeers, OutsideKubernetesThePeerFormIsRefusedNamingTheSetting) {
  unsetenv("KUBERNETES_SERVICE_HOST");
  try {
    parse_config(
        "external:\n  opensandbox:\n    codeExecution:\n      internal:\n        services:\n"
        "          - podSelector: { matchLabels: { app: postgres } }\n");
    FAIL() << "accepted without the Kubernetes API";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(kPath + ":", 0), 0u) << message;
    EXPECT_NE(message.find("need the Kubernetes API"), std::string::npos) << message;
    EXPECT_NE(message.find("kubernetes.apiServer"), std::string::npos) << message;
  }
  // In a pod, the in-cluster configuration is enough.
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  EXPECT_NO_THROW(
      parse_config("external:\n  opensandbox:\n    codeExecution:\n      internal:\n        services:\n"
                   "          - podSelector: { matchLabels: { app: postgres } }\n"));
  unsetenv("KUBERNETES_SERVICE_HOST");
}

TEST(NetworkPeers, SelectorsMatchAsTheApiDefines) {
  Labels pg{{"app", "postgres"}, {"tier", "db"}};
  Labels web{{"app", "web"}};
  EXPECT_TRUE(selector_matches(selector("{}"), pg)) << "an empty selector selects everything";
  EXPECT_TRUE(selector_matches(selector("{ matchLabels: { app: postgres } }"), pg));
  EXPECT_FALSE(selector_matches(selector("{ matchLabels: { app: postgres } }"), web));
  EXPECT_FALSE(selector_matches(selector("{ matchLabels: { app: postgres, tier: web } }"), pg));
  auto in = selector("{ matchExpressions: [{ key: app, operator: In, values: [postgres, mysql] }] }");
  EXPECT_TRUE(selector_matches(in, pg));
  EXPECT_FALSE(selector_matches(in, web));
  EXPECT_FALSE(selector_matches(in, {}));
  auto not_in = selector("{ matchExpressions: [{ key: app, operator: NotIn, values: [postgres] }] }");
  EXPECT_FALSE(selector_matches(not_in, pg));
  EXPECT_TRUE(selector_matches(not_in, web));
  EXPECT_TRUE(selector_matches(not_in, {})) << "a missing key is not in the set";
  auto exists = selector("{ matchExpressions: [{ key: tier, operator: Exists }] }");
  EXPECT_TRUE(selector_matches(exists, pg));
  EXPECT_FALSE(selector_matches(exists, web));
  auto absent = selector("{ matchExpressions: [{ key: tier, operator: DoesNotExist }] }");
  EXPECT_FALSE(selector_matches(absent, pg));
  EXPECT_TRUE(selector_matches(absent, web));
  auto both = selector(
      "{ matchLabels: { app: postgres }, matchExpressions: [{ key: tier, operator: In, values: [db] }] }");
  EXPECT_TRUE(selector_matches(both, pg));
  EXPECT_FALSE(selector_matches(both, Labels{{"app", "postgres"}, {"tier", "cache"}}));
}

TEST(NetworkPeers, AddressBlocks) {
  auto c = parse_services(
      "          - ipBlock: { cidr: 10.0.0.7/16, except: [10.0.5.0/24] }\n"
      "            ports: [{ port: 443 }]\n");
  const auto& block = *c.network_peers.at(0).ip_block;
  EXPECT_EQ(format_ipv4(block.cidr.address), "10.0.0.0") << "the network's base address, as the API takes it";
  EXPECT_TRUE(ip_block_contains(block, *parse_ipv4("10.0.200.1")));
  EXPECT_FALSE(ip_block_contains(block, *parse_ipv4("10.0.5.9")));
  EXPECT_FALSE(ip_block_contains(block, *parse_ipv4("10.1.0.1")));
  EXPECT_TRUE(network_contains(*parse_ipv4_cidr("0.0.0.0/0"), *parse_ipv4("192.168.1.1")));
  EXPECT_FALSE(parse_ipv4_cidr("10.0.0.0"));
  EXPECT_FALSE(parse_ipv4("10.0.0"));
}

// The cluster as the API's JSON has it: two namespaces, three pods, two Services.
k8s::ClusterObjects cluster() {
  k8s::ClusterObjects objects;
  auto ns = [&](const char* text) {
    auto info = *k8s::namespace_from_json(bj::parse(text).as_object());
    objects.namespaces[info.name] = info;
  };
  ns(R"({"metadata":{"name":"analytics","labels":{"kubernetes.io/metadata.name":"analytics","team":"data"}}})");
  ns(R"({"metadata":{"name":"web","labels":{"kubernetes.io/metadata.name":"web"}}})");
  auto pod = [&](const char* text) {
    auto value = bj::parse(text).as_object();
    if (auto info = k8s::pod_from_json(value)) objects.pods[k8s::object_key(value)] = *info;
  };
  pod(R"({"metadata":{"namespace":"analytics","name":"pg-0","labels":{"app":"postgres"}},
          "spec":{"containers":[{"name":"pg","ports":[{"name":"postgresql","containerPort":5432},
                                                      {"name":"dns","containerPort":53,"protocol":"UDP"}]}]},
          "status":{"phase":"Running","podIP":"10.1.0.5","podIPs":[{"ip":"10.1.0.5"},{"ip":"fd00::5"}]}})");
  pod(R"({"metadata":{"namespace":"analytics","name":"pg-old","labels":{"app":"postgres"}},
          "status":{"phase":"Succeeded","podIP":"10.1.0.9"}})");
  pod(R"({"metadata":{"namespace":"web","name":"www-0","labels":{"app":"postgres"}},
          "spec":{"containers":[{"name":"www","ports":[{"containerPort":8080}]}]},
          "status":{"phase":"Running","podIP":"10.2.0.7"}})");
  auto service = [&](const char* text) {
    auto value = bj::parse(text).as_object();
    if (auto info = k8s::service_from_json(value)) objects.services[k8s::object_key(value)] = *info;
  };
  service(R"({"metadata":{"namespace":"analytics","name":"pg"},
              "spec":{"clusterIP":"10.96.0.10","ports":[{"name":"sql","port":5432,"targetPort":"postgresql"}]}})");
  service(R"({"metadata":{"namespace":"web","name":"www"},
              "spec":{"clusterIP":"10.96.0.20","ports":[{"port":80,"targetPort":8080}]}})");
  auto slice = [&](const char* text) {
    auto value = bj::parse(text).as_object();
    if (auto info = k8s::endpoint_slice_from_json(value))
      objects.endpoint_slices[k8s::object_key(value)] = *info;
  };
  slice(R"({"metadata":{"namespace":"analytics","name":"pg-abc","labels":{"kubernetes.io/service-name":"pg"}},
            "addressType":"IPv4","ports":[{"name":"sql","port":5432,"protocol":"TCP"}],
            "endpoints":[{"addresses":["10.1.0.5"],"conditions":{"ready":true},"targetRef":{"kind":"Pod","name":"pg-0"}},
                         {"addresses":["10.1.0.6"],"conditions":{"ready":false}}]})");
  slice(R"({"metadata":{"namespace":"web","name":"www-abc","labels":{"kubernetes.io/service-name":"www"}},
            "addressType":"IPv4","ports":[{"port":8080}],
            "endpoints":[{"addresses":["10.2.0.7"]}]})");
  return objects;
}

std::vector<NetworkPeer> peers(const std::string& entries) { return parse_services(entries).network_peers; }

uint32_t ip(const char* text) { return *parse_ipv4(text); }

TEST(PeerResolution, NamespaceAndPodSelectorsSelectAServiceByItsNames) {
  auto set = k8s::resolve_peers(peers("          - namespaceSelector: { matchLabels: { team: data } }\n"
                                      "            podSelector: { matchLabels: { app: postgres } }\n"),
                                "sandboxd", cluster());
  for (const char* name : {"pg.analytics", "pg.analytics.svc", "PG.analytics.svc.cluster.local."})
    EXPECT_EQ(set.resolve(name), std::vector<uint32_t>{ip("10.96.0.10")}) << name;
  EXPECT_TRUE(set.resolve("www.web").empty()) << "its pod is labelled app=postgres, but in another namespace";
  auto route = set.route({ip("10.96.0.10"), 5432}, 0);
  ASSERT_TRUE(route);
  EXPECT_EQ(*route, (k8s::Endpoint{ip("10.1.0.5"), 5432})) << "the ready, selected endpoint only";
  EXPECT_TRUE(set.route({ip("10.1.0.5"), 5432}, 0)) << "the selected pod by its address";
  EXPECT_TRUE(set.route({ip("10.1.0.5"), 5433}, 0)) << "no ports: every port, as Kubernetes";
  auto listeners = set.listeners(64);
  EXPECT_EQ(std::set<k8s::ListenAddress>(listeners.begin(), listeners.end()),
            (std::set<k8s::ListenAddress>{{ip("10.96.0.10"), 5432}, {ip("10.1.0.5"), 5432}}))
      << "listened for on the Service's port and the pod's declared TCP ports";
  EXPECT_FALSE(set.route({ip("10.1.0.9"), 5432}, 0)) << "a finished pod's address is not its any more";
  EXPECT_FALSE(set.route({ip("10.2.0.7"), 8080}, 0));
  EXPECT_FALSE(set.route({ip("10.96.0.20"), 80}, 0));
}

TEST(PeerResolution, APodSelectorAloneSelectsInTheOwnNamespace) {
  auto set = k8s::resolve_peers(peers("          - podSelector: { matchLabels: { app: postgres } }\n"), "web",
                                cluster());
  EXPECT_EQ(set.resolve("www.web"), std::vector<uint32_t>{ip("10.96.0.20")});
  EXPECT_TRUE(set.resolve("pg.analytics").empty());
  EXPECT_EQ(set.route({ip("10.96.0.20"), 80}, 0), (k8s::Endpoint{ip("10.2.0.7"), 8080}));
}

TEST(PeerResolution, PortsLimitWhatIsReachable) {
  auto set = k8s::resolve_peers(
      peers("          - namespaceSelector: {}\n            ports: [{ port: postgresql }]\n"), "sandboxd",
      cluster());
  EXPECT_TRUE(set.route({ip("10.1.0.5"), 5432}, 0)) << "the named port, as the pod names it";
  EXPECT_FALSE(set.route({ip("10.2.0.7"), 8080}, 0));
  EXPECT_TRUE(set.resolve("www.web").empty()) << "its only endpoint port is not allowed";
  EXPECT_FALSE(set.resolve("pg.analytics").empty());
}

TEST(PeerResolution, AddressBlocksAndListeners) {
  auto set = k8s::resolve_peers(peers("          - ipBlock: { cidr: 10.2.0.0/16, except: [10.2.9.0/24] }\n"
                                      "            ports: [{ port: 8080 }]\n"
                                      "          - podSelector: { matchLabels: { app: postgres } }\n"
                                      "            namespaceSelector: { matchLabels: { team: data } }\n"),
                                "sandboxd", cluster());
  EXPECT_TRUE(set.route({ip("10.2.0.7"), 8080}, 0));
  EXPECT_TRUE(set.route({ip("10.2.200.1"), 8080}, 0));
  EXPECT_FALSE(set.route({ip("10.2.9.1"), 8080}, 0)) << "excepted";
  EXPECT_FALSE(set.route({ip("10.2.0.7"), 8081}, 0));
  EXPECT_EQ(set.resolve("www.web"), std::vector<uint32_t>{ip("10.96.0.20")})
      << "its endpoint is in the block";
  size_t dropped = 0;
  auto listeners = set.listeners(64, &dropped);
  EXPECT_EQ(dropped, 0u);
  std::set<k8s::ListenAddress> got(listeners.begin(), listeners.end());
  EXPECT_EQ(got, (std::set<k8s::ListenAddress>{
                     {0, 8080}, {ip("10.96.0.10"), 5432}, {ip("10.96.0.20"), 80}, {ip("10.1.0.5"), 5432}}));
  auto cut = set.listeners(2, &dropped);
  EXPECT_EQ(cut.size(), 2u);
  EXPECT_EQ(dropped, 2u);
  EXPECT_EQ(cut[0], (k8s::ListenAddress{0, 8080})) << "the block's port is kept first";
}

TEST(PeerResolution, ANamedPortOfAnAddressBlockNamesThePortsOfThePodsInIt) {
  auto set = k8s::resolve_peers(peers("          - ipBlock: { cidr: 10.1.0.0/16 }\n"
                                      "            ports: [{ port: postgresql }, { port: 9000 }]\n"),
                                "sandboxd", cluster());
  EXPECT_TRUE(set.route({ip("10.1.0.5"), 5432}, 0)) << "the pod in the block names 5432 postgresql";
  EXPECT_FALSE(set.route({ip("10.1.0.5"), 5433}, 0));
  EXPECT_FALSE(set.route({ip("10.1.0.6"), 5432}, 0)) << "no pod there to name the port";
  EXPECT_TRUE(set.route({ip("10.1.0.6"), 9000}, 0)) << "the numeric port reaches every address of the block";
  EXPECT_FALSE(set.route({ip("10.2.0.7"), 5432}, 0)) << "outside the block";
  auto listeners = set.listeners(64, nullptr);
  std::set<k8s::ListenAddress> got(listeners.begin(), listeners.end());
  EXPECT_EQ(got, (std::set<k8s::ListenAddress>{{0, 9000}, {ip("10.1.0.5"), 5432}, {ip("10.96.0.10"), 5432}}))
      << "and the Service whose endpoint that pod is";
}

// A DNS query as a resolver sends it.
std::string query(uint16_t id, const std::string& name, uint16_t type) {
  std::string q = {
      static_cast<char>(id >> 8), static_cast<char>(id & 0xff), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    q.push_back(static_cast<char>(dot - start));
    q += name.substr(start, dot - start);
    start = dot + 1;
  }
  q.push_back(0);
  q += {0, static_cast<char>(type), 0, 1};
  return q;
}

TEST(SandboxDns, AnswersKnownNamesAndRefusesTheRest) {
  auto lookup = [](const std::string& name) -> std::optional<std::vector<uint32_t>> {
    if (name == "pg.analytics") return std::vector<uint32_t>{0x0a60000a};
    return std::nullopt;
  };
  auto reply = sandboxd::server::dns_reply(query(0x1234, "PG.Analytics", 1), lookup);
  ASSERT_TRUE(reply);
  ASSERT_EQ(reply->size(), query(0, "pg.analytics", 1).size() + 16);
  EXPECT_EQ(reply->substr(0, 2), "\x12\x34");
  EXPECT_EQ(static_cast<uint8_t>((*reply)[2]) & 0x80, 0x80) << "a response";
  EXPECT_EQ(static_cast<uint8_t>((*reply)[3]) & 0x0f, 0) << "NOERROR";
  EXPECT_EQ(reply->substr(reply->size() - 4), std::string("\x0a\x60\x00\x0a", 4));
  auto aaaa = sandboxd::server::dns_reply(query(1, "pg.analytics", 28), lookup);
  ASSERT_TRUE(aaaa);
  EXPECT_EQ(static_cast<uint8_t>((*aaaa)[3]) & 0x0f, 0) << "a known name, no IPv6 record";
  EXPECT_EQ((*aaaa)[7], 0) << "no answers";
  auto unknown = sandboxd::server::dns_reply(query(2, "other.analytics", 1), lookup);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(static_cast<uint8_t>((*unknown)[3]) & 0x0f, 3) << "NXDOMAIN";
  // Hostile queries: cut short, compressed, responses, two questions.
  EXPECT_FALSE(sandboxd::server::dns_reply(std::string("\x01\x02\x03"), lookup));
  std::string cut = query(3, "pg.analytics", 1);
  cut.resize(cut.size() - 6);
  EXPECT_EQ(static_cast<uint8_t>((*sandboxd::server::dns_reply(cut, lookup))[3]) & 0x0f, 1) << "FORMERR";
  std::string pointer = query(4, "x", 1);
  pointer[12] = static_cast<char>(0xc0);
  EXPECT_EQ(static_cast<uint8_t>((*sandboxd::server::dns_reply(pointer, lookup))[3]) & 0x0f, 1);
  std::string response = query(5, "pg.analytics", 1);
  response[2] = static_cast<char>(0x81);
  EXPECT_FALSE(sandboxd::server::dns_reply(response, lookup));
  std::string two = query(6, "pg.analytics", 1);
  two[5] = 2;
  EXPECT_EQ(static_cast<uint8_t>((*sandboxd::server::dns_reply(two, lookup))[3]) & 0x0f, 1);
}

}  // namespace
