// Fixtures for runtime suites: one harness (a runtime) for the whole suite, a
// container's folders for each test and its sandbox stopped after it. SandboxPerTest
// starts that sandbox before each test; a suite that starts it itself (with limits of
// its own) derives from SandboxSuite.
#pragma once

#include <gtest/gtest.h>

#include <memory>

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

}  // namespace sandboxd::testing
