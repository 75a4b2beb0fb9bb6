// Egress by policy on the native tier (the suite: egress_suite.h).

#include "egress_suite.h"

using sandboxd::testing::egress_tier_name;
using sandboxd::testing::EgressTest;
using sandboxd::testing::EgressTier;

INSTANTIATE_TEST_SUITE_P(Native, EgressTest, ::testing::Values(EgressTier::kNative), egress_tier_name);
