// The skills of a /messages request in a sandbox (skills_suite.h) on the gvisor tier
// (runtime.isolation: gvisor, the real runsc): bound into the running sandbox for that
// request only, and a process left using a skill ended inside gVisor as it comes off,
// the sandbox's other processes running on. Skipped (shown as Skipped) where runsc is not
// installed.

#include "skills_suite.h"

INSTANTIATE_TEST_SUITE_P(Gvisor, SkillsInSandboxTest, ::testing::Values(SandboxTier::kGvisor),
                         sandbox_tier_name);
