// The gvisor tier's memory (runtime.keepMemory, docs/isolation-tiers.md): a sandbox that
// stops is checkpointed, and its next start goes on from there. Checked as a client sees
// it, through the HTTP API of a real server on real runsc: background processes run on
// with the same pid, /tmp is as it was, the Python kernel's variables are there, after
// an explicit stop and after an idle one (the idle one through /messages, the model's
// persistent Python as Anthropic's code_execution_20260120); a checkpoint that cannot be restored starts the
// sandbox fresh over the same files and says so; a deleted container's checkpoint goes.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "eventually.h"
#include "runtime/gvisor_launcher.h"
#include "scripted_upstream.h"
#include "shared_server_suite.h"

namespace {

namespace bj = boost::json;
namespace fs = std::filesystem;
using sandboxd::testing::eventually;
using U = sandboxd::testing::ScriptedUpstream;

class GvisorMemoryTest : public sandboxd::testing::SharedServerSuite {
 protected:
  static void SetUpTestSuite() {
    if (sandboxd::runtime::find_runsc().empty()) return;
    upstream = new U();
    start_server(config_yaml());
  }
  static void TearDownTestSuite() {
    SharedServerSuite::TearDownTestSuite();
    delete upstream;
    upstream = nullptr;
  }
  // The suite's configuration; `extra_runtime` adds lines to its runtime section,
  // `ttl_seconds` sets the idle TTL (the idle test shortens it for a while), `extra`
  // adds sections and `hold_seconds` is runtime.pauseHoldSeconds (none by default: most
  // tests look at the checkpoint a stop takes).
  static std::string config_yaml(const std::string& extra_runtime = "", int ttl_seconds = 600,
                                 const std::string& extra = "", int hold_seconds = 0) {
    return "model:\n  baseUrl: \"" + upstream->base_url() +
           "\"\n  apiKey: upstream-key\n  models: { default: upstream-model }\n  timeoutSec: 30\n"
           "runtime:\n  isolation: gvisor\n  gvisorPlatform: ptrace\n  pauseHoldSeconds: " +
           std::to_string(hold_seconds) + "\n" + extra_runtime +
           "codeInterpreter:\n  memoryLimitMb: 256\n"
           "external:\n  opensandbox:\n    sessionTTLSeconds: " +
           std::to_string(ttl_seconds) + "\n" + extra;
  }
  void SetUp() override {
    if (!server)
      GTEST_SKIP()
          << "runsc is not installed (Debian: apt-get install runsc): the gvisor tier cannot run here";
    name_container("mem");
  }

  std::string containers(const std::string& suffix) const {
    return server->base() + "/containers/" + container + suffix;
  }
  bj::object post(const std::string& suffix, const bj::object& body) {
    std::ofstream(*work / "body.json") << bj::serialize(body);
    auto reply =
        server->curl_json("-X POST " + containers(suffix) + " -d @" + (*work / "body.json").string());
    return reply.is_object() ? reply.as_object() : bj::object{};
  }
  bj::object bash(const std::string& command) {
    auto reply = post("/tools/bash_code_execution", {{"command", command}});
    EXPECT_TRUE(reply.contains("return_code")) << bj::serialize(reply);
    return reply;
  }
  bj::object python(const std::string& code) {
    auto reply = post("/tools/code_execution", {{"code", code}});
    EXPECT_TRUE(reply.contains("return_code")) << bj::serialize(reply);
    return reply;
  }
  // Starts a background process that writes a growing count into `file` every
  // `interval` seconds; returns its pid (empty, and a failure, when it did not start).
  std::string start_counter(const std::string& file, const std::string& interval) {
    auto started = bash("nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > " + file + "; sleep " +
                        interval + "; done' >/dev/null 2>&1 & echo $!");
    std::string pid = text(started, "stdout");
    if (!pid.empty() && pid.back() == '\n') pid.pop_back();
    EXPECT_FALSE(pid.empty()) << bj::serialize(started);
    return pid;
  }
  static std::string text(const bj::object& reply, const char* field) {
    auto it = reply.find(field);
    return it != reply.end() && it->value().is_string() ? std::string(it->value().as_string()) : "";
  }
  void stop() {
    const std::string status =
        server->curl("-s -o /dev/null -w '%{http_code}' -X POST " + containers("/stop"));
    ASSERT_EQ(status, "200") << "stopping " << container;
  }
  double metric(const std::string& sample) const { return server->metric(sample); }
  // One /messages turn on the test's container in which the model runs `code` in the
  // persistent Python (code_execution_20260120) and then ends; returns the code's result
  // (code_execution_result).
  bj::object model_runs_python(const std::string& code) {
    upstream->push_message(U::message(
        {U::tool_use("toolu_" + std::to_string(++turns), "code_execution", {{"code", code}})}, "tool_use"));
    upstream->push_message(U::message({U::text_block("done")}, "end_turn"));
    bj::object body{
        {"model", "default"},
        {"max_tokens", 1024},
        {"container", container},
        {"messages", bj::array{bj::object{{"role", "user"}, {"content", "Run it."}}}},
        {"tools", bj::array{bj::object{{"name", "code_execution"}, {"type", "code_execution_20260120"}}}}};
    std::ofstream(*work / "message.json") << bj::serialize(body);
    auto reply = server->curl_json("-X POST '" + server->base() +
                                   "/messages' -H 'content-type: application/json' --data-binary @" +
                                   (*work / "message.json").string());
    if (reply.is_object() && reply.as_object().contains("content"))
      for (const auto& block : reply.at("content").as_array())
        if (block.at("type") == "code_execution_tool_result" && block.at("content").is_object())
          return block.at("content").as_object();
    ADD_FAILURE() << "no code_execution_tool_result: " << bj::serialize(reply);
    return {};
  }
  static inline U* upstream = nullptr;
  int turns = 0;
  // The checkpoints on the host now, each in its container's folder.
  std::set<fs::path> memory_folders() const {
    std::set<fs::path> found;
    for (const auto& entry : fs::directory_iterator(server->data_dir() / "containers"))
      if (fs::exists(entry.path() / "memory" / "kernels")) found.insert(entry.path() / "memory");
    return found;
  }
  // Stops the test's container; returns the checkpoint its stop made (empty: none).
  fs::path stop_and_find_checkpoint() {
    const auto before = memory_folders();
    stop();
    for (const auto& folder : memory_folders())
      if (!before.count(folder)) return folder;
    return {};
  }
};

TEST_F(GvisorMemoryTest, AStoppedSandboxGoesOnWithItsProcessesTmpAndPythonVariables) {
  // A background process counting, a file in /tmp (gVisor's memory, not the volume), a
  // Python variable and an import.
  const std::string pid = start_counter("/tmp/count", "0.1");
  ASSERT_FALSE(pid.empty());
  ASSERT_EQ(bash("echo kept > /tmp/note").at("return_code"), 0);
  auto defined = python("import json\nx = 41\nprint('defined')");
  ASSERT_EQ(text(defined, "stdout"), "defined\n") << bj::serialize(defined);
  const double checkpoints = metric("sandboxd_memory_checkpoints_total{result=\"ok\"}");
  const double restores = metric("sandboxd_memory_restores_total{result=\"ok\"}");

  const fs::path checkpoint = stop_and_find_checkpoint();
  EXPECT_EQ(metric("sandboxd_memory_checkpoints_total{result=\"ok\"}"), checkpoints + 1);
  EXPECT_FALSE(checkpoint.empty()) << "the checkpoint is beside the volume";

  auto again = python("print(x + 1, json.dumps([1]))");
  EXPECT_EQ(text(again, "stdout"), "42 [1]\n") << bj::serialize(again);
  EXPECT_EQ(metric("sandboxd_memory_restores_total{result=\"ok\"}"), restores + 1);
  EXPECT_FALSE(fs::exists(checkpoint)) << "a checkpoint is used once";
  // The same process (same pid), still counting; /tmp as it was.
  auto same = bash("cat /tmp/note; kill -0 " + pid + " && echo alive");
  EXPECT_EQ(text(same, "stdout"), "kept\nalive\n") << bj::serialize(same);
  auto first = bash("cat /tmp/count");
  EXPECT_TRUE(eventually([&] { return text(bash("cat /tmp/count"), "stdout") != text(first, "stdout"); }))
      << "the background process counts on";
  // The files API never lists the checkpoint.
  const std::string listing = server->curl("'" + server->base() + "/files?scope_id=" + container + "'");
  EXPECT_EQ(listing.find("checkpoint"), std::string::npos) << listing;
}

// runtime.pauseHoldSeconds: a stop first pauses the sandbox in place (nothing in it runs,
// nothing is written), the next command resumes it without a checkpoint, and the hold's
// end takes the checkpoint a stop takes without one.
TEST_F(GvisorMemoryTest, AStopHeldInPlaceResumesWithoutACheckpointAndItsEndTakesOne) {
  server->write_config(config_yaml("", 600, "", 4));
  server->reload();
  // A counter that writes into the workspace, which the host reads.
  const std::string pid = start_counter("/home/agent/workspace/count", "0.05");
  ASSERT_FALSE(pid.empty());
  auto defined = python("x = 41\nprint('defined')");
  ASSERT_EQ(text(defined, "stdout"), "defined\n") << bj::serialize(defined);
  const double holds = metric("sandboxd_memory_holds_total{result=\"ok\"}");
  const double resumes = metric("sandboxd_memory_hold_resumes_total");
  const double checkpoints = metric("sandboxd_memory_checkpoints_total{result=\"ok\"}");
  const double restores = metric("sandboxd_memory_restores_total{result=\"ok\"}");

  const fs::path checkpoint = stop_and_find_checkpoint();
  EXPECT_TRUE(checkpoint.empty()) << "a held stop takes no checkpoint";
  EXPECT_EQ(metric("sandboxd_memory_holds_total{result=\"ok\"}"), holds + 1);
  // Paused: the counter writes nothing while it is held.
  auto counted = [&] {
    for (const auto& entry : fs::directory_iterator(server->data_dir() / "containers"))
      if (fs::exists(entry.path() / "volume" / "workspace" / "count")) {
        std::ifstream in(entry.path() / "volume" / "workspace" / "count");
        return std::string(std::istreambuf_iterator<char>(in), {});
      }
    return std::string();
  };
  const std::string held_at = counted();
  ASSERT_FALSE(held_at.empty()) << "the counter's file is in the workspace";
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  EXPECT_EQ(counted(), held_at) << "nothing runs in a held sandbox";

  auto again = python("print(x + 1)");
  EXPECT_EQ(text(again, "stdout"), "42\n") << bj::serialize(again);
  EXPECT_EQ(metric("sandboxd_memory_hold_resumes_total"), resumes + 1);
  EXPECT_EQ(metric("sandboxd_memory_restores_total{result=\"ok\"}"), restores) << "no restore";
  auto same = bash("kill -0 " + pid + " && echo alive");
  EXPECT_EQ(text(same, "stdout"), "alive\n") << bj::serialize(same);
  EXPECT_TRUE(eventually([&] { return counted() != held_at; })) << "the counter counts on";

  // Held again, until the hold ends: then the checkpoint, which the next command restores.
  stop();
  EXPECT_TRUE(eventually([&] { return !memory_folders().empty(); }, std::chrono::seconds(30)))
      << "the hold's end takes a checkpoint";
  EXPECT_TRUE(eventually(
      [&] { return metric("sandboxd_memory_checkpoints_total{result=\"ok\"}") == checkpoints + 1; }));
  auto restored = python("print(x + 2)");
  EXPECT_EQ(text(restored, "stdout"), "43\n") << bj::serialize(restored);
  EXPECT_EQ(metric("sandboxd_memory_restores_total{result=\"ok\"}"), restores + 1);
  auto still = bash("kill -0 " + pid + " && echo alive");
  EXPECT_EQ(text(still, "stdout"), "alive\n") << bj::serialize(still);

  // Held once more, then deleted: its sandbox ends with it, and no checkpoint is taken.
  stop();
  const std::string deleted = server->curl("-s -o /dev/null -w '%{http_code}' -X DELETE " + containers(""));
  EXPECT_EQ(deleted, "200");
  EXPECT_EQ(metric("sandboxd_memory_checkpoints_total{result=\"ok\"}"), checkpoints + 1);
  server->write_config(config_yaml());
  server->reload();
}

// A held sandbox still takes its owner's room: another sandbox of that owner past
// quotas.runningSandboxesPerOwner checkpoints it (its hold ends), and a shutdown
// checkpoints every held one; each comes back with its memory after the restart.
TEST_F(GvisorMemoryTest, AHeldSandboxIsCheckpointedForRoomAndAtShutdown) {
  server->write_config(config_yaml("", 600, "quotas:\n  runningSandboxesPerOwner: 1\n", 600));
  server->reload();
  const std::string first = container;
  auto defined = python("a = 'first'\nprint('ok')");
  ASSERT_EQ(text(defined, "stdout"), "ok\n") << bj::serialize(defined);
  stop();  // held
  EXPECT_TRUE(memory_folders().empty()) << "held, not checkpointed";
  const double checkpoints = metric("sandboxd_memory_checkpoints_total{result=\"ok\"}");

  // The owner's one running sandbox is the held one: the next one's start checkpoints it.
  container = first + "-b";
  auto other = python("b = 'second'\nprint('ok')");
  ASSERT_EQ(text(other, "stdout"), "ok\n") << bj::serialize(other);
  EXPECT_EQ(metric("sandboxd_memory_checkpoints_total{result=\"ok\"}"), checkpoints + 1);
  EXPECT_EQ(memory_folders().size(), 1u) << "the held sandbox made room with a checkpoint";
  stop();  // held in turn

  // A graceful shutdown checkpoints the held sandbox; after the restart both go on.
  server->restart();
  EXPECT_EQ(memory_folders().size(), 2u) << "the shutdown checkpointed the held sandbox";
  auto second_back = python("print(b)");
  EXPECT_EQ(text(second_back, "stdout"), "second\n") << bj::serialize(second_back);
  stop();  // held again: room for the first
  container = first;
  auto first_back = python("print(a)");
  EXPECT_EQ(text(first_back, "stdout"), "first\n") << bj::serialize(first_back);
  server->write_config(config_yaml());
  server->reload();
}

TEST_F(GvisorMemoryTest, AnIdleStopKeepsThePythonKernelsVariablesForTheModel) {
  auto defined = model_runs_python("x = 41\nprint('ok')");
  ASSERT_EQ(text(defined, "stdout"), "ok\n") << bj::serialize(defined);
  // A short idle TTL for a while (the reaper then looks every second), until this
  // container's sandbox is stopped (the listing, unlike GET of the container, does not
  // count as a use).
  server->write_config(config_yaml("", 2));
  server->reload();
  auto state = [&] {
    auto listing = server->curl_json("'" + server->base() + "/containers?limit=100'");
    if (!listing.is_object() || !listing.as_object().contains("data")) return std::string();
    for (const auto& item : listing.at("data").as_array())
      if (item.at("id").as_string() == container) return std::string(item.at("state").as_string());
    return std::string();
  };
  const bool stopped = eventually([&] { return state() == "stopped"; }, std::chrono::seconds(60));
  server->write_config(config_yaml());
  server->reload();
  ASSERT_TRUE(stopped) << "the idle reaper stops the sandbox";
  // The listing says "stopped" as the stop begins; the count follows once the sandbox
  // has ended (runsc's delete takes a moment).
  EXPECT_TRUE(eventually([&] { return metric("sandboxd_sandboxes_stopped_total{reason=\"idle\"}") > 0; }))
      << "the idle stop is counted";
  auto again = model_runs_python("x + 1");
  EXPECT_EQ(text(again, "stdout"), "42\n") << bj::serialize(again);
}

TEST_F(GvisorMemoryTest, ADamagedCheckpointStartsFreshOverTheSameFilesAndSaysSo) {
  auto made = bash("echo safe > /home/agent/workspace/kept.txt; echo gone > /tmp/lost");
  ASSERT_EQ(made.at("return_code").as_int64(), 0);
  python("z = 1");
  const fs::path folder = stop_and_find_checkpoint();
  ASSERT_FALSE(folder.empty());
  bool damaged = false;
  for (const auto& entry : fs::recursive_directory_iterator(folder / "image"))
    if (entry.is_regular_file()) {
      std::ofstream(entry.path(), std::ios::trunc) << "not a checkpoint";
      damaged = true;
    }
  ASSERT_TRUE(damaged) << "the image has files";
  const double failed = metric("sandboxd_memory_restores_total{result=\"failed\"}");

  auto fresh = bash("cat /home/agent/workspace/kept.txt; cat /tmp/lost 2>/dev/null || echo 'no /tmp'");
  EXPECT_EQ(fresh.at("return_code").as_int64(), 0) << bj::serialize(fresh);
  EXPECT_EQ(text(fresh, "stdout"), "safe\nno /tmp\n") << bj::serialize(fresh);
  auto lost = python("print('z' in globals())");
  EXPECT_EQ(text(lost, "stdout"), "False\n") << bj::serialize(lost);
  EXPECT_EQ(metric("sandboxd_memory_restores_total{result=\"failed\"}"), failed + 1);
  EXPECT_NE(server->log().find("sandbox_restore_failed"), std::string::npos);
  EXPECT_FALSE(fs::exists(folder)) << "a checkpoint that cannot be restored goes";
}

TEST_F(GvisorMemoryTest, ADeletedContainersCheckpointGoesWithIt) {
  python("w = 2");
  const fs::path folder = stop_and_find_checkpoint();
  ASSERT_FALSE(folder.empty());
  const std::string status = server->curl("-s -o /dev/null -w '%{http_code}' -X DELETE " + containers(""));
  EXPECT_EQ(status, "200");
  EXPECT_FALSE(fs::exists(folder));
}

TEST_F(GvisorMemoryTest, KeepMemoryFalseKeepsFilesOnly) {
  python("v = 3");
  server->write_config(config_yaml("  keepMemory: false\n"));
  const std::string reloaded = server->reload();
  const fs::path checkpoint = stop_and_find_checkpoint();
  server->write_config(config_yaml());
  server->reload();
  EXPECT_TRUE(checkpoint.empty()) << reloaded;
  auto again = python("print('v' in globals())");
  EXPECT_EQ(text(again, "stdout"), "False\n") << bj::serialize(again);
}

TEST_F(GvisorMemoryTest, ACheckpointCountsAgainstTheOwnersStoredBytes) {
  python("w = 'x' * 1000");
  const fs::path checkpoint = stop_and_find_checkpoint();
  ASSERT_FALSE(checkpoint.empty());
  uint64_t image = 0;
  for (const auto& entry : fs::recursive_directory_iterator(checkpoint / "image"))
    if (entry.is_regular_file()) image += entry.file_size();
  // A quota the checkpoint nearly fills: a 1 MiB upload does not fit beside it...
  server->write_config(
      config_yaml("", 600, "quotas:\n  storedBytesPerOwner: " + std::to_string(image + (512 << 10)) + "\n"));
  server->reload();
  const fs::path mib = *work / "mib.bin";
  std::ofstream(mib) << std::string(1 << 20, 'm');
  const std::string upload =
      "-X POST '" + server->base() + "/files?scope_id=" + container + "' -F file=@" + mib.string();
  const std::string refused = server->curl("-i " + upload);
  EXPECT_NE(refused.find(" 403"), std::string::npos) << refused.substr(0, 600);
  EXPECT_NE(refused.find("quotas.storedBytesPerOwner"), std::string::npos) << refused.substr(0, 600);
  // ...and once the next command has used the checkpoint, it no longer counts.
  auto restored = python("print(len(w))");
  EXPECT_EQ(text(restored, "stdout"), "1000\n") << bj::serialize(restored);
  EXPECT_EQ(server->status(upload), 200);
  server->write_config(config_yaml());
  server->reload();
}

}  // namespace
