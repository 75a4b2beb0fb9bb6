// A GoogleTest suite whose tests share one `sandboxd serve` (started once for the suite,
// with the suite's configuration), a scratch folder for request bodies, and a container
// of their own each, named "<prefix>-<test name>".
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "server_harness.h"

namespace sandboxd::testing {

class SharedServerSuite : public ::testing::Test {
 protected:
  // From a suite's SetUpTestSuite; `extra_yaml` as for ServerProcess.
  static void start_server(const std::string& extra_yaml = "") {
    server = new ServerProcess(extra_yaml);
    work = new std::filesystem::path(server->dir() / "client");
    std::filesystem::create_directories(*work);
  }
  static void TearDownTestSuite() {
    delete server;
    server = nullptr;
    delete work;
    work = nullptr;
  }
  // From a suite's SetUp: the test's own container id.
  void name_container(const std::string& prefix) {
    container = prefix + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  static inline ServerProcess* server = nullptr;
  static inline std::filesystem::path* work = nullptr;
  std::string container;
};

}  // namespace sandboxd::testing
