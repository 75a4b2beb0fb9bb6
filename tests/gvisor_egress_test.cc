// Egress by policy on the gvisor tier (runtime.isolation: gvisor, the real runsc): the
// same names, refusals and audit as on the native tier (the suite: egress_suite.h).
// Skipped (shown as Skipped) where runsc is not installed.

#include "egress_suite.h"

using sandboxd::testing::egress_tier_name;
using sandboxd::testing::EgressTest;
using sandboxd::testing::EgressTier;

INSTANTIATE_TEST_SUITE_P(Gvisor, EgressTest, ::testing::Values(EgressTier::kGvisor), egress_tier_name);
