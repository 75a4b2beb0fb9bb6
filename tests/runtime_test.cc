// The sandbox contract from inside real sandboxes on the native tier (the suite:
// runtime_suite.h).

#include "runtime_suite.h"

using sandboxd::testing::RuntimeTest;
using sandboxd::testing::sandbox_tier_name;
using sandboxd::testing::SandboxTier;

INSTANTIATE_TEST_SUITE_P(Native, RuntimeTest, ::testing::Values(SandboxTier::kNative), sandbox_tier_name);
