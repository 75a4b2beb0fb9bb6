// Fixtures for runtime suites: one harness (a runtime) for the whole suite, a
// container's folders for each test and its sandbox stopped after it. SandboxPerTest
// starts that sandbox before each test; a suite that starts it itself (with limits of
// its own) derives from SandboxSuite. TieredSandboxSuite is SandboxSuite for a suite that
// runs on both isolation tiers (runtime.isolation), one instantiation per tier and
// executable (the gvisor one serial: runsc's ptrace platform stops on every system call).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>

#include "runtime/gvisor_launcher.h"
#include "sandbox_harness.h"

namespace sandboxd::testing {

class SandboxSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { harness = new Harness(); }
  static void TearDownTestSuite() {
    delete harness;
    harness = nullptr;
  }
  void SetUp() override {
    dirs = std::make_unique<ContainerDirs>(harness->runtime->options().host_uid,
                                           harness->runtime->options().host_gid);
  }
  void TearDown() override {
    if (sandbox) harness->stop(*sandbox);
  }

  static inline Harness* harness = nullptr;
  std::unique_ptr<ContainerDirs> dirs;
  std::shared_ptr<rt::Sandbox> sandbox;
};

class SandboxPerTest : public SandboxSuite {
 protected:
  void SetUp() override {
    SandboxSuite::SetUp();
    sandbox = harness->start(harness->options_for(*dirs));
  }
};

enum class SandboxTier { kNative, kGvisor };

inline std::string sandbox_tier_name(const ::testing::TestParamInfo<SandboxTier>& info) {
  return info.param == SandboxTier::kNative ? "native" : "gvisor";
}
// How GoogleTest (and so CTest's listing) shows the parameter.
inline void PrintTo(SandboxTier tier, std::ostream* os) {
  *os << (tier == SandboxTier::kNative ? "native" : "gvisor");
}

// The runtime's options for a tier, as `sandboxd serve` sets them (app/serve.cc): on the
// gvisor tier runsc's ptrace platform (it works on any host) and the agent's files owned
// by uid 1000 on the host (gVisor maps no user ids; ops/config.cc).
inline rt::RuntimeOptions runtime_options_for(SandboxTier tier) {
  rt::RuntimeOptions options;
  if (tier == SandboxTier::kGvisor) {
    options.isolation = rt::Isolation::kGvisor;
    options.gvisor.platform = "ptrace";
    options.host_uid = options.host_gid = 1000;
    // A start through runsc takes seconds on a loaded machine with the ptrace platform.
    options.start_timeout = std::chrono::seconds(60);
  }
  return options;
}

class TieredSandboxSuite : public ::testing::TestWithParam<SandboxTier> {
 protected:
  static void TearDownTestSuite() {
    delete harness;
    harness = nullptr;
  }
  void SetUp() override {
    if (GetParam() == SandboxTier::kGvisor && rt::find_runsc().empty())
      GTEST_SKIP()
          << "runsc is not installed (Debian: apt-get install runsc): the gvisor tier cannot run here";
    // One tier per executable: the first test makes the suite's runtime.
    if (!harness) harness = new Harness(runtime_options_for(GetParam()));
    dirs = std::make_unique<ContainerDirs>(harness->runtime->options().host_uid,
                                           harness->runtime->options().host_gid);
  }
  void TearDown() override {
    if (sandbox) harness->stop(*sandbox);
  }
  bool on_gvisor() const { return GetParam() == SandboxTier::kGvisor; }

  static inline Harness* harness = nullptr;
  std::unique_ptr<ContainerDirs> dirs;
  std::shared_ptr<rt::Sandbox> sandbox;
};

}  // namespace sandboxd::testing
