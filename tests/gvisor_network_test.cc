// The network suite (network_suite.h) on the gvisor tier (runtime.isolation: gvisor, the
// real runsc): the same names, addresses, refusals and model calls as on the native tier.
// Skipped (shown as Skipped) where runsc is not installed.

#include "network_suite.h"

using sandboxd::testing::NetworkTest;
using sandboxd::testing::Tier;
using sandboxd::testing::tier_name;

INSTANTIATE_TEST_SUITE_P(Gvisor, NetworkTest, ::testing::Values(Tier::kGvisor), tier_name);
