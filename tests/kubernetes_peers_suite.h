// Allowed services as Kubernetes NetworkPolicy peers, from inside a sandbox: a real
// `sandboxd serve` resolving the peers through a scripted Kubernetes API server
// (scripted_kubernetes.h: HTTPS, a service-account token, list and watch), with real
// services behind the addresses it lists: the test's PostgreSQL on 127.0.0.1 (a pod
// selected by namespace and pod labels, behind a Service) and a Python HTTP server on
// 127.0.0.2 (selected by an ipBlock on one port).
//
// One suite for both isolation tiers (runtime.isolation), instantiated once per tier by
// kubernetes_peers_test.cc (native) and gvisor_kubernetes_peers_test.cc (gvisor: its own
// executable, SERIAL for runsc's ptrace platform): the same resolver on 127.0.2.53, the
// same peer addresses, the same refusals, on both.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include "eventually.h"
#include "postgres_harness.h"
#include "runtime/gvisor_launcher.h"
#include "scripted_kubernetes.h"
#include "server_harness.h"

namespace sandboxd::testing {

namespace bj = boost::json;

enum class PeersTier { kNative, kGvisor };

inline std::string peers_tier_name(const ::testing::TestParamInfo<PeersTier>& info) {
  return info.param == PeersTier::kNative ? "native" : "gvisor";
}
// How GoogleTest (and so CTest's listing) shows the parameter.
inline void PrintTo(PeersTier tier, std::ostream* os) {
  *os << (tier == PeersTier::kNative ? "native" : "gvisor");
}

inline constexpr const char* kServiceIp = "10.96.0.10";
inline constexpr const char* kOtherServiceIp = "10.96.0.11";

inline bj::object ns_object(const std::string& name) {
  return {{"metadata", {{"name", name}, {"labels", {{"kubernetes.io/metadata.name", name}}}}}};
}

inline bj::object pod_object(const std::string& ns, const std::string& name, const std::string& app,
                             const std::string& ip, uint16_t port) {
  return {{"metadata", {{"namespace", ns}, {"name", name}, {"labels", {{"app", app}}}}},
          {"spec",
           {{"containers", bj::array{bj::object{{"name", "main"},
                                                {"ports", bj::array{bj::object{{"name", "service"},
                                                                               {"containerPort", port},
                                                                               {"protocol", "TCP"}}}}}}}}},
          {"status", {{"phase", "Running"}, {"podIP", ip}, {"podIPs", bj::array{bj::object{{"ip", ip}}}}}}};
}

inline bj::object service_object(const std::string& ns, const std::string& name,
                                 const std::string& cluster_ip, uint16_t port) {
  return {{"metadata", {{"namespace", ns}, {"name", name}}},
          {"spec",
           {{"type", "ClusterIP"},
            {"clusterIP", cluster_ip},
            {"clusterIPs", bj::array{bj::value(cluster_ip)}},
            {"ports",
             bj::array{bj::object{
                 {"name", "service"}, {"port", port}, {"targetPort", "service"}, {"protocol", "TCP"}}}}}}};
}

inline bj::object slice_object(const std::string& ns, const std::string& service, const std::string& pod,
                               const std::string& ip, uint16_t port) {
  return {
      {"metadata",
       {{"namespace", ns}, {"name", service + "-x1"}, {"labels", {{"kubernetes.io/service-name", service}}}}},
      {"addressType", "IPv4"},
      {"ports", bj::array{bj::object{{"name", "service"}, {"port", port}, {"protocol", "TCP"}}}},
      {"endpoints",
       bj::array{bj::object{{"addresses", bj::array{bj::value(ip)}},
                            {"conditions", {{"ready", true}}},
                            {"targetRef", {{"kind", "Pod"}, {"namespace", ns}, {"name", pod}}}}}}};
}

class KubernetesPeersTest : public ::testing::TestWithParam<PeersTier> {
 protected:
  void SetUp() override {
    if (GetParam() == PeersTier::kGvisor && sandboxd::runtime::find_runsc().empty())
      GTEST_SKIP()
          << "runsc is not installed (Debian: apt-get install runsc): the gvisor tier cannot run here";
    postgres = &PostgresEnvironment::server();
    // The HTTP "pod" on 127.0.0.2, serving one file.
    web_port = free_loopback_port();
    web_dir = fs::path(k8s.ca_file()).parent_path() / "www";
    fs::create_directories(web_dir);
    std::ofstream(web_dir / "hello.txt") << "hello from the web pod\n";
    web_pid = std::stoi(sh("cd " + web_dir.string() + " && (python3 -m http.server --bind 127.0.0.2 " +
                           std::to_string(web_port) + " >/dev/null 2>&1 & echo $!)"));
    ASSERT_TRUE(eventually([&] {
      return sh("curl -s -m 2 http://127.0.0.2:" + std::to_string(web_port) + "/hello.txt") ==
             "hello from the web pod\n";
    }));
    const uint16_t pg = postgres->port();
    for (const char* name : {"analytics", "web", "sandboxd"}) k8s.put("namespaces", ns_object(name));
    k8s.put("pods", pod_object("analytics", "pg-0", "postgres", "127.0.0.1", pg));
    k8s.put("pods", pod_object("analytics", "other-0", "other", "127.0.0.3", pg));
    k8s.put("pods", pod_object("web", "www-0", "www", "127.0.0.2", web_port));
    k8s.put("services", service_object("analytics", "pg", kServiceIp, 5432));
    k8s.put("services", service_object("analytics", "other", kOtherServiceIp, 5432));
    k8s.put("endpointslices", slice_object("analytics", "pg", "pg-0", "127.0.0.1", pg));
    k8s.put("endpointslices", slice_object("analytics", "other", "other-0", "127.0.0.3", pg));
    server = std::make_unique<ServerProcess>(
        k8s.config_yaml() +
        (GetParam() == PeersTier::kGvisor ? "runtime:\n  isolation: gvisor\n  gvisorPlatform: ptrace\n"
                                          : "") +
        "external:\n  opensandbox:\n    codeExecution:\n      internal:\n        services:\n"
        "          - namespaceSelector: { matchLabels: { kubernetes.io/metadata.name: analytics } }\n"
        "            podSelector: { matchLabels: { app: postgres } }\n"
        "          - ipBlock: { cidr: 127.0.0.2/32 }\n"
        "            ports: [{ protocol: TCP, port: " +
        std::to_string(web_port) + " }]\n");
    ASSERT_TRUE(eventually([&] { return ready().at("status") == "ready"; }))
        << bj::serialize(ready()) << server->log();
    // (The parameter's suffix, "/native", is not part of a container id.)
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    container = "k-" + test.substr(0, test.find('/'));
  }
  void TearDown() override {
    server.reset();
    if (web_pid > 0) kill(web_pid, SIGTERM);
  }

  bj::object ready() {
    boost::system::error_code ec;
    auto body = bj::parse(sh("curl -s -m 10 '" + server->url("/ready") + "'"), ec);
    return body.is_object() ? body.as_object() : bj::object{{"status", "(no answer)"}};
  }
  bj::object bash(const std::string& command) {
    fs::path file = server->dir() / ("cmd-" + std::to_string(++commands) + ".json");
    std::ofstream(file) << bj::serialize(bj::object{{"command", command}, {"timeout", 40}});
    auto reply = server->curl_json(
        "-X POST '" + server->base() + "/containers/" + container +
        "/tools/bash_code_execution' -H 'content-type: application/json' --data-binary @" + file.string());
    return reply.is_object() ? reply.as_object() : bj::object{};
  }
  static std::string out(const bj::object& result) {
    return result.contains("stdout") ? std::string(result.at("stdout").as_string()) : "(no result)";
  }
  std::string psql(const std::string& host) {
    return out(bash((postgres->bin() / "psql").string() + " -h " + host +
                    " -p 5432 -U postgres -d postgres -At -c 'select 6*7' 2>&1"));
  }
  // A python connection's outcome: "ok <first line of the reply>", or the exception's
  // class and errno.
  std::string probe(const std::string& host, int port) {
    return out(bash("python3 - " + host + " " + std::to_string(port) + " <<'PY'\n" + kProbe + "PY\n"));
  }
  static constexpr const char* kProbe = R"PROBE(import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
    s.sendall(b"GET /hello.txt HTTP/1.0\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk: break
        data += chunk
    print("ok", data.decode().split("\r\n")[0] if data else "(nothing)")
except socket.gaierror as e:
    print("gaierror", e.args[0])
except OSError as e:
    print(type(e).__name__, e.errno)
)PROBE";

  ScriptedKubernetes k8s;
  PostgresServer* postgres = nullptr;
  fs::path web_dir;
  uint16_t web_port = 0;
  pid_t web_pid = -1;
  std::unique_ptr<ServerProcess> server;
  std::string container;
  int commands = 0;
};

TEST_P(KubernetesPeersTest, TheSelectedPostgresAnswersByItsServiceNames) {
  // The sandbox's very first command: its resolver and peer listeners are open before
  // the sandbox is handed out, so nothing here may need a retry.
  for (const char* name : {"pg.analytics.svc.cluster.local", "pg.analytics.svc", "pg.analytics"})
    EXPECT_EQ(psql(name), "42\n") << name;
  EXPECT_EQ(k8s.unauthorized(), 0);
  // The resolver is the server's, on the sandbox's own loopback.
  EXPECT_EQ(out(bash("grep -c '^nameserver 127.0.2.53$' /etc/resolv.conf")), "1\n");
}

TEST_P(KubernetesPeersTest, AnUnselectedServiceDoesNotResolve) {
  // Its pod is in the selected namespace but not labelled app=postgres.
  EXPECT_EQ(probe("other.analytics.svc.cluster.local", 5432), "gaierror -2\n");  // EAI_NONAME
  EXPECT_EQ(probe("other.analytics", 5432), "gaierror -2\n");
  EXPECT_NE(psql("other.analytics").find("could not translate host name"), std::string::npos);
  EXPECT_EQ(probe("nothing.example.com", 443), "gaierror -2\n");
  // Nor is its address reachable, nor the other pod's.
  EXPECT_NE(probe(kOtherServiceIp, 5432).rfind("ok", 0), 0u);
  EXPECT_EQ(probe("127.0.0.3", postgres->port()), "ConnectionRefusedError 111\n");
}

TEST_P(KubernetesPeersTest, AnIpBlockAddressAnswersOnItsListedPortOnly) {
  EXPECT_EQ(out(bash("curl -s -m 20 http://127.0.0.2:" + std::to_string(web_port) + "/hello.txt")),
            "hello from the web pod\n");
  EXPECT_EQ(probe("127.0.0.2", web_port), "ok HTTP/1.0 200 OK\n");
  // Another port of the same address: refused by the sandbox's kernel.
  EXPECT_EQ(probe("127.0.0.2", postgres->port()), "ConnectionRefusedError 111\n");
  // The listed port on an address outside the block: the server resets it.
  const std::string outside = probe("127.0.0.4", web_port);
  EXPECT_NE(outside.rfind("ok", 0), 0u) << outside;
  // The pod of the Service is reachable by its own address too (its port), not others.
  EXPECT_EQ(probe("127.0.0.1", 1), "ConnectionRefusedError 111\n");
}

TEST_P(KubernetesPeersTest, RelabellingThePodRevokesNewConnectionsAndBackRestoresThem) {
  ASSERT_EQ(psql("pg.analytics"), "42\n");
  const uint16_t pg = postgres->port();
  k8s.put("pods", pod_object("analytics", "pg-0", "retired", "127.0.0.1", pg));
  EXPECT_TRUE(
      eventually([&] { return probe("pg.analytics", 5432) == "gaierror -2\n"; }, std::chrono::seconds(30)));
  const std::string by_address = probe(kServiceIp, 5432);
  EXPECT_NE(by_address.rfind("ok", 0), 0u) << by_address;
  EXPECT_NE(psql(std::string(kServiceIp)), "42\n");
  // Labelled again: reachable again, without a restart.
  k8s.put("pods", pod_object("analytics", "pg-0", "postgres", "127.0.0.1", pg));
  EXPECT_TRUE(eventually([&] { return psql("pg.analytics") == "42\n"; }, std::chrono::seconds(30)));
  // A Service added while the sandbox runs is reachable by its name.
  k8s.put("services", service_object("analytics", "pg-replica", "10.96.0.12", 5433));
  k8s.put("endpointslices", slice_object("analytics", "pg-replica", "pg-0", "127.0.0.1", pg));
  EXPECT_TRUE(eventually(
      [&] {
        return out(bash((postgres->bin() / "psql").string() +
                        " -h pg-replica.analytics -p 5433 -U postgres -d postgres -At -c 'select 7' 2>&1")) ==
               "7\n";
      },
      std::chrono::seconds(30)));
}

TEST_P(KubernetesPeersTest, ALostApiServerKeepsTheLastSetAndReadySaysSo) {
  ASSERT_EQ(psql("pg.analytics"), "42\n");
  EXPECT_EQ(ready().at("network_peers").at("current"), true) << bj::serialize(ready());
  EXPECT_EQ(server->metric("sandboxd_network_peers_watch_current"), 1);
  k8s.stop();
  ASSERT_TRUE(eventually(
      [&] {
        auto body = ready();
        return body.contains("network_peers") && body.at("network_peers").at("current") == false;
      },
      std::chrono::seconds(30)))
      << bj::serialize(ready());
  // Still ready (sandboxes start), the last set in force.
  EXPECT_EQ(ready().at("status"), "ready");
  EXPECT_EQ(server->metric("sandboxd_network_peers_watch_current"), 0);
  EXPECT_EQ(psql("pg.analytics"), "42\n");
  EXPECT_EQ(probe("other.analytics", 5432), "gaierror -2\n");
  // Back: current again. Then its history expires: 410 Gone, listed again, current.
  k8s.start();
  EXPECT_TRUE(
      eventually([&] { return ready().at("network_peers").at("current") == true; }, std::chrono::seconds(60)))
      << bj::serialize(ready());
  const int lists = k8s.lists();
  k8s.expire_watches();
  EXPECT_TRUE(eventually([&] { return k8s.gone_answers() > 0 && k8s.lists() >= lists + 4; },
                         std::chrono::seconds(60)));
  k8s.bookmark();
  EXPECT_TRUE(eventually([&] { return ready().at("network_peers").at("current") == true; },
                         std::chrono::seconds(60)));
  EXPECT_EQ(psql("pg.analytics"), "42\n");
}

}  // namespace sandboxd::testing
