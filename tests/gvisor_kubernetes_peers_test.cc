// The Kubernetes NetworkPolicy peers suite (kubernetes_peers_suite.h) on the gvisor tier
// (runtime.isolation: gvisor, the real runsc): the DNS relay and the peers' listeners the
// server opens in the sandbox's namespace, reached through gVisor's hostinet. Skipped
// (shown as Skipped) where runsc is not installed.

#include "kubernetes_peers_suite.h"

using sandboxd::testing::KubernetesPeersTest;
using sandboxd::testing::peers_tier_name;
using sandboxd::testing::PeersTier;

INSTANTIATE_TEST_SUITE_P(Gvisor, KubernetesPeersTest, ::testing::Values(PeersTier::kGvisor), peers_tier_name);
