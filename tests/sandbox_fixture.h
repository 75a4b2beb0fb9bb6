// A fixture for runtime suites: one harness (a runtime) for the whole suite, and a
// sandbox started fresh for each test and stopped after it.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "sandbox_harness.h"

namespace sandboxd::testing {

class SandboxPerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { harness = new Harness(); }
  static void TearDownTestSuite() {
    delete harness;
    harness = nullptr;
  }
  void SetUp() override {
    dirs = std::make_unique<ContainerDirs>(harness->runtime->options().host_uid, harness->runtime->options().host_gid);
    sandbox = harness->start(harness->options_for(*dirs));
  }
  void TearDown() override {
    if (sandbox) harness->stop(*sandbox);
  }

  static inline Harness* harness = nullptr;
  std::unique_ptr<ContainerDirs> dirs;
  std::shared_ptr<rt::Sandbox> sandbox;
};

}  // namespace sandboxd::testing
