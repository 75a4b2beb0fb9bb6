// The gvisor tier (runtime.isolation: gvisor) end to end: a real server whose every
// sandbox is a runsc container, driven through the HTTP API as a client would. What is
// checked here is the sandbox contract as it holds on this tier today
// (docs/isolation-tiers.md says what does not yet).
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/gvisor_launcher.h"
#include "shared_server_suite.h"

namespace {

namespace bj = boost::json;
using sandboxd::testing::file_id;
using sandboxd::testing::sh;

class GvisorTest : public sandboxd::testing::SharedServerSuite {
 protected:
  static void SetUpTestSuite() {
    if (sandboxd::runtime::find_runsc().empty()) return;
    // A memory limit small enough to cross, large enough for bash and python to start.
    start_server(
        "runtime:\n  isolation: gvisor\n  gvisorPlatform: ptrace\n"
        "codeInterpreter:\n  memoryLimitMb: 128\n");
  }
  void SetUp() override {
    if (!server)
      GTEST_SKIP()
          << "runsc is not installed (Debian: apt-get install runsc): the gvisor tier cannot run here";
    name_container("gv");
  }

  bj::object bash(const std::string& command, const std::string& extra = "") {
    std::string body = bj::serialize(bj::object{{"command", command}});
    if (!extra.empty()) body = body.substr(0, body.size() - 1) + "," + extra + "}";
    std::ofstream(*work / "body.json") << body;
    auto reply = server->curl_json("-X POST " + server->base() + "/containers/" + container +
                                   "/tools/bash_code_execution -d @" + (*work / "body.json").string());
    EXPECT_TRUE(reply.is_object() && reply.as_object().contains("return_code")) << bj::serialize(reply);
    return reply.is_object() ? reply.as_object() : bj::object{};
  }
  std::string files(const std::string& suffix = "") const {
    return "'" + server->base() + "/files" + suffix + "?scope_id=" + container + "'";
  }
  static std::string text(const bj::object& reply, const char* field) {
    auto it = reply.find(field);
    return it != reply.end() && it->value().is_string() ? std::string(it->value().as_string()) : "";
  }
};

TEST_F(GvisorTest, ACommandsOutputAndExitCodeComeBackFromGvisorsKernel) {
  auto reply = bash("echo out; echo err >&2; exit 3");
  EXPECT_EQ(text(reply, "stdout"), "out\n");
  EXPECT_EQ(text(reply, "stderr"), "err\n");
  EXPECT_EQ(reply.at("return_code"), 3);
  // The kernel the command sees is gVisor's (the sentry's), not the host's.
  auto kernel = bash("dmesg 2>/dev/null | head -1; uname -r");
  EXPECT_NE(text(kernel, "stdout").find("gVisor"), std::string::npos) << text(kernel, "stdout");
  EXPECT_EQ(text(kernel, "stdout").find(sh("uname -r")), std::string::npos) << "the host's kernel release";
}

TEST_F(GvisorTest, CommandsRunAsAgentWithNoCapabilities) {
  // (gVisor's /proc/self/status has no CapAmb line: it keeps no ambient set.)
  auto reply =
      bash("id -u; id -g; id -un; grep -E '^Cap(Inh|Prm|Eff|Bnd):' /proc/self/status | tr -s '\\t' ' '");
  EXPECT_EQ(text(reply, "stdout"),
            "1000\n1000\nagent\nCapInh: 0000000000000000\nCapPrm: 0000000000000000\n"
            "CapEff: 0000000000000000\nCapBnd: 0000000000000000\n")
      << text(reply, "stderr");
  auto escalate = bash("su -c id root </dev/null; mount -t tmpfs none /tmp 2>&1; echo done");
  EXPECT_EQ(text(escalate, "stdout").find("uid=0"), std::string::npos) << text(escalate, "stdout");
}

TEST_F(GvisorTest, FilesPersistAcrossCommandsAndAreSeenThroughTheFilesApi) {
  ASSERT_EQ(bash("echo hello > notes.txt && echo chart > /mnt/user-data/outputs/chart.txt").at("return_code"),
            0);
  auto again = bash("cat /home/agent/workspace/notes.txt; stat -c %u notes.txt");
  EXPECT_EQ(text(again, "stdout"), "hello\n1000\n");
  EXPECT_EQ(server->curl(files("/" + file_id("/mnt/user-data/outputs/chart.txt") + "/content")), "chart\n");
  // And the other way: a file put through the API is there for the next command.
  sh("curl -s -X PUT " + files("/up.txt") + " -H 'Authorization: Bearer secret-alice' -d uploaded");
  EXPECT_EQ(text(bash("cat /mnt/user-data/uploads/up.txt"), "stdout"), "uploaded");
}

TEST_F(GvisorTest, ATimeoutIs124AndKillsTheWholeTree) {
  auto timed_out = bash("sleep 300 & (sleep 301 &) ; sleep 302", "\"timeout\": 1");
  EXPECT_EQ(timed_out.at("return_code"), 124);
  EXPECT_EQ(text(timed_out, "stderr"), "Command timed out after 1s.");
  auto left = bash("ps -e -o comm= | grep -c '^sleep' || true");
  EXPECT_EQ(text(left, "stdout"), "0\n") << "every process of the timed-out command was killed";
}

TEST_F(GvisorTest, ABackgroundProcessOutlivesItsCommand) {
  ASSERT_EQ(bash("sleep 600 >/dev/null 2>&1 & echo started").at("return_code"), 0);
  EXPECT_EQ(text(bash("pgrep -c sleep"), "stdout"), "1\n");
}

TEST_F(GvisorTest, TheMemoryLimitHoldsAndEndsTheWholeSandboxNotTheFiles) {
  ASSERT_EQ(bash("echo kept > kept.txt").at("return_code"), 0);
  // gVisor has no OOM killer of its own: past the limit the host's kills the sentry,
  // and the command's answer says the sandbox stopped (docs/isolation-tiers.md).
  std::ofstream(*work / "bomb.json") << bj::serialize(
      bj::object{{"command", "python3 -c 'x = bytearray(512 * 1024 * 1024); print(len(x))'"}});
  const std::string reply = server->curl("-X POST " + server->base() + "/containers/" + container +
                                         "/tools/bash_code_execution -d @" + (*work / "bomb.json").string());
  EXPECT_EQ(reply.find("536870912"), std::string::npos) << "512 MiB was allocated past 128: " << reply;
  const bool stopped = reply.find("The sandbox stopped during the command") != std::string::npos;
  const bool failed =
      reply.find("\"return_code\":0") == std::string::npos && reply.find("return_code") != std::string::npos;
  EXPECT_TRUE(stopped || failed) << reply;
  // The next command gets a sandbox again, over the same files.
  EXPECT_EQ(text(bash("cat kept.txt"), "stdout"), "kept\n");
}

}  // namespace
