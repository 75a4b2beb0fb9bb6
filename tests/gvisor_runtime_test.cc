// The runtime suite (runtime_suite.h) on the gvisor tier (runtime.isolation: gvisor, the
// real runsc): the same sandbox contract from inside as on the native tier. Skipped
// (shown as Skipped) where runsc is not installed.

#include "runtime_suite.h"

using sandboxd::testing::RuntimeTest;
using sandboxd::testing::sandbox_tier_name;
using sandboxd::testing::SandboxTier;

INSTANTIATE_TEST_SUITE_P(Gvisor, RuntimeTest, ::testing::Values(SandboxTier::kGvisor), sandbox_tier_name);
