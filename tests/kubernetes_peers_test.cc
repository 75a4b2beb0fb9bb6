// The Kubernetes NetworkPolicy peers suite (kubernetes_peers_suite.h) on the native tier.

#include "kubernetes_peers_suite.h"

using sandboxd::testing::KubernetesPeersTest;
using sandboxd::testing::peers_tier_name;
using sandboxd::testing::PeersTier;

INSTANTIATE_TEST_SUITE_P(Native, KubernetesPeersTest, ::testing::Values(PeersTier::kNative), peers_tier_name);
