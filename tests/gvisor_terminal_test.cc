// Terminals in real sandboxes on the gvisor tier (runtime.isolation: gvisor, the real
// runsc; the suite: terminal_suite.h): the terminal is gVisor's own and PID 1 relays its
// master. Skipped (shown as Skipped) where runsc is not installed.

#include "terminal_suite.h"

using sandboxd::testing::sandbox_tier_name;
using sandboxd::testing::SandboxTier;
using sandboxd::testing::TerminalTest;

INSTANTIATE_TEST_SUITE_P(Gvisor, TerminalTest, ::testing::Values(SandboxTier::kGvisor), sandbox_tier_name);
