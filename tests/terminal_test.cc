// Terminals in real sandboxes on the native tier (the suite: terminal_suite.h).

#include "terminal_suite.h"

using sandboxd::testing::sandbox_tier_name;
using sandboxd::testing::SandboxTier;
using sandboxd::testing::TerminalTest;

INSTANTIATE_TEST_SUITE_P(Native, TerminalTest, ::testing::Values(SandboxTier::kNative), sandbox_tier_name);
