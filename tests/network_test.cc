// The network suite (network_suite.h) on the native tier, and the configuration checks
// of the allow-list that need no sandbox.

#include "network_suite.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

INSTANTIATE_TEST_SUITE_P(Native, NetworkTest, ::testing::Values(Tier::kNative), tier_name);

namespace {

// Outside Kubernetes (no in-cluster configuration, no kubernetes.apiServer) the peer
// form cannot be resolved: refused, naming what it needs.
TEST(NetworkConfig, KubernetesPeersOutsideKubernetesAreRefusedWithAClearMessage) {
  fs::path file = fs::temp_directory_path() / "sandboxd-netcfg.yaml";
  std::ofstream(file) << "external:\n  opensandbox:\n    codeExecution:\n      internal:\n        services:\n"
                         "          - namespaceSelector:\n              matchLabels: { name: databases }\n"
                         "            podSelector:\n              matchLabels: { app: postgres }\n";
  int status = 0;
  auto text = sh("env -u KUBERNETES_SERVICE_HOST " + std::string(SANDBOXD_PATH) + " config check " +
                     file.string() + " 2>&1",
                 &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(text.find("external.opensandbox.codeExecution.internal.services: Kubernetes NetworkPolicy peers"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("need the Kubernetes API"), std::string::npos) << text;
  EXPECT_NE(text.find("kubernetes.apiServer"), std::string::npos) << text;
  for (const char* bad :
       {"{ name: \"../etc\", host: h, port: 1 }", "{ name: sandboxd.internal, host: h, port: 1 }",
        "{ name: db, host: h, port: 70000 }", "{ name: db, host: h }"}) {
    std::ofstream(file)
        << "external:\n  opensandbox:\n    codeExecution:\n      internal:\n        services:\n"
           "          - "
        << bad << "\n";
    text = sh(std::string(SANDBOXD_PATH) + " config check " + file.string() + " 2>&1", &status);
    EXPECT_NE(status, 0) << bad;
    EXPECT_NE(text.find("services[0]"), std::string::npos) << bad << ": " << text;
  }
  fs::remove(file);
}

}  // namespace
