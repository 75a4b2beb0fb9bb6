// The security suite (security_suite.h) on the gvisor tier (runtime.isolation: gvisor, the
// real runsc): the same escape and exhaustion attempts from inside as on the native tier.
// Skipped (shown as Skipped) where runsc is not installed.

#include "security_suite.h"

using sandboxd::testing::sandbox_tier_name;
using sandboxd::testing::SandboxTier;
using sandboxd::testing::SecurityTest;

INSTANTIATE_TEST_SUITE_P(Gvisor, SecurityTest, ::testing::Values(SandboxTier::kGvisor), sandbox_tier_name);
