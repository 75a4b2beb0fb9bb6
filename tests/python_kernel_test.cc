// The persistent Python of a sandbox (code_execution), end to end: a real `sandboxd
// serve` on loopback, real sandboxes, IPython's kernel from Debian's python3-ipykernel
// in them, driven through the direct tool endpoint
// POST /api/gpt/v1/containers/{id}/tools/code_execution.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "eventually.h"
#include "server_harness.h"

namespace {

using sandboxd::testing::count_fds;
using sandboxd::testing::eventually;
using sandboxd::testing::rss_kib;
using sandboxd::testing::ServerProcess;
using sandboxd::testing::sh;
namespace fs = std::filesystem;

// Runs one cell; returns the result block (or whatever came back).
boost::json::object cell(const ServerProcess& server, const std::string& container,
                         boost::json::object input) {
  const std::string body = boost::json::serialize(input);
  std::string path =
      (server.dir() / ("cell-" + std::to_string(std::hash<std::string>{}(body)) + ".json")).string();
  std::ofstream(path) << body;
  auto reply = server.curl_json("-X POST -H 'Content-Type: application/json' " + server.base() +
                                "/containers/" + container + "/tools/code_execution --data-binary @" + path);
  EXPECT_TRUE(reply.is_object()) << boost::json::serialize(reply);
  return reply.is_object() ? reply.as_object() : boost::json::object{};
}
boost::json::object cell(const ServerProcess& server, const std::string& container, const std::string& code) {
  return cell(server, container, boost::json::object{{"code", code}});
}

std::string field(const boost::json::object& block, const char* key) {
  auto* v = block.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string())
                             : "<" + std::string(key) + " missing in " + boost::json::serialize(block) + ">";
}
int64_t code_of(const boost::json::object& block) {
  auto* v = block.if_contains("return_code");
  return v && v->is_int64() ? v->as_int64() : -999;
}

// The cell's outputs of `type` (the direct endpoint's rich outputs).
std::vector<boost::json::object> outputs_of(const boost::json::object& block, const std::string& type) {
  std::vector<boost::json::object> found;
  if (auto* outputs = block.if_contains("outputs"); outputs && outputs->is_array())
    for (const auto& o : outputs->as_array())
      if (o.is_object() && o.as_object().at("type").as_string() == type) found.push_back(o.as_object());
  return found;
}

const std::string kConfig = "runtime: { prestartedSandboxes: 0 }\n";

class PythonKernel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess(kConfig); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static ServerProcess* server_;
};
ServerProcess* PythonKernel::server_ = nullptr;

TEST_F(PythonKernel, VariablesImportsAndOpenFilesSurviveBetweenCalls) {
  auto& server = *server_;
  auto first =
      cell(server, "state", "import math\nx = 41\nlog = open('/tmp/kernel-log.txt', 'w')\nprint('set')");
  EXPECT_EQ(field(first, "type"), "code_execution_result");
  EXPECT_EQ(field(first, "stdout"), "set\n");
  EXPECT_EQ(code_of(first), 0);
  ASSERT_TRUE(first.contains("content") && first.at("content").is_array()) << boost::json::serialize(first);
  // The last expression's value: its text/plain in stdout, its bundle in outputs.
  auto second = cell(server, "state", "log.write('kept'); log.flush()\nx + 1");
  EXPECT_EQ(field(second, "stdout"), "42\n");
  auto results = outputs_of(second, "execute_result");
  ASSERT_EQ(results.size(), 1u) << boost::json::serialize(second);
  EXPECT_EQ(results[0].at("data").at("text/plain").as_string(), "42");
  auto third =
      cell(server, "state", "log.close()\nprint(round(math.pi, 2), open('/tmp/kernel-log.txt').read())");
  EXPECT_EQ(field(third, "stdout"), "3.14 kept\n");
  // Processes the code starts write into the same stdout.
  auto shell = cell(server, "state", "import subprocess\n_ = subprocess.run(['echo', 'from a child'])");
  EXPECT_EQ(field(shell, "stdout"), "from a child\n");
}

TEST_F(PythonKernel, RichResultsAFigureAsPngADataFrameAsHtml) {
  auto& server = *server_;
  auto figure =
      cell(server, "rich", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()");
  EXPECT_EQ(code_of(figure), 0) << boost::json::serialize(figure);
  auto displays = outputs_of(figure, "display_data");
  ASSERT_EQ(displays.size(), 1u) << boost::json::serialize(figure);
  const auto& data = displays[0].at("data").as_object();
  ASSERT_TRUE(data.contains("image/png")) << boost::json::serialize(data);
  // Base64 of a PNG's signature (\x89PNG\r\n\x1a\n).
  EXPECT_EQ(std::string(data.at("image/png").as_string()).substr(0, 11), "iVBORw0KGgo");
  EXPECT_NE(field(figure, "stdout").find("<Figure size"), std::string::npos);

  auto frame =
      cell(server, "rich", "import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Lima'], 'n': [1, 2]})");
  auto results = outputs_of(frame, "execute_result");
  ASSERT_EQ(results.size(), 1u) << boost::json::serialize(frame);
  const auto& bundle = results[0].at("data").as_object();
  ASSERT_TRUE(bundle.contains("text/html"));
  EXPECT_NE(std::string(bundle.at("text/html").as_string()).find("<table"), std::string::npos);
  EXPECT_NE(std::string(bundle.at("text/plain").as_string()).find("Oslo"), std::string::npos);
  EXPECT_NE(field(frame, "stdout").find("Lima"), std::string::npos);
}

TEST_F(PythonKernel, AnExceptionIsATracebackWithItsName) {
  auto& server = *server_;
  auto failed = cell(server, "errors", "def f():\n    return 1 / 0\nf()");
  EXPECT_EQ(code_of(failed), 1);
  EXPECT_NE(field(failed, "stderr").find("ZeroDivisionError"), std::string::npos);
  auto errors = outputs_of(failed, "error");
  ASSERT_EQ(errors.size(), 1u) << boost::json::serialize(failed);
  EXPECT_EQ(errors[0].at("ename").as_string(), "ZeroDivisionError");
  EXPECT_EQ(errors[0].at("evalue").as_string(), "division by zero");
  EXPECT_FALSE(errors[0].at("traceback").as_array().empty());
  // A syntax error too; the kernel is fine afterwards.
  auto syntax = cell(server, "errors", "def (");
  EXPECT_EQ(code_of(syntax), 1);
  ASSERT_EQ(outputs_of(syntax, "error").size(), 1u) << boost::json::serialize(syntax);
  EXPECT_EQ(outputs_of(syntax, "error")[0].at("ename").as_string(), "SyntaxError");
  EXPECT_EQ(field(cell(server, "errors", "print('fine')"), "stdout"), "fine\n");
}

TEST_F(PythonKernel, ATimeoutInterruptsThatCallOnlyAndTheStateStays) {
  auto& server = *server_;
  cell(server, "timeout", "kept = 'still here'");
  auto slow =
      cell(server, "timeout",
           boost::json::object{{"code", "import time\nprint('before')\ntime.sleep(60)"}, {"timeout", 1}});
  EXPECT_EQ(code_of(slow), 124) << boost::json::serialize(slow);
  EXPECT_EQ(field(slow, "stdout"), "before\n");
  EXPECT_NE(field(slow, "stderr").find("KeyboardInterrupt"), std::string::npos);
  EXPECT_NE(field(slow, "stderr").find("Command timed out after 1s."), std::string::npos);
  EXPECT_EQ(field(cell(server, "timeout", "print(kept)"), "stdout"), "still here\n");

  // Code that ignores SIGINT cannot be interrupted: the kernel is restarted instead.
  auto stubborn =
      cell(server, "timeout",
           boost::json::object{{"code",
                                "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                "time.sleep(60)"},
                               {"timeout", 1}});
  EXPECT_EQ(code_of(stubborn), 124) << boost::json::serialize(stubborn);
  EXPECT_NE(field(stubborn, "stderr").find("restarted"), std::string::npos);
  EXPECT_EQ(field(cell(server, "timeout", "print('kept' in globals())"), "stdout"), "False\n");
}

TEST_F(PythonKernel, ACrashIsAnErrorAndTheNextCallGetsAFreshKernel) {
  auto& server = *server_;
  cell(server, "crash", "doomed = 1");
  auto exited = cell(server, "crash", "import os\nos._exit(3)");
  EXPECT_EQ(code_of(exited), 3) << boost::json::serialize(exited);
  EXPECT_NE(field(exited, "stderr").find("The Python kernel exited with code 3"), std::string::npos);
  EXPECT_EQ(field(cell(server, "crash", "print('doomed' in globals())"), "stdout"), "False\n");

  cell(server, "crash", "doomed = 2");
  auto segfault = cell(server, "crash", "import ctypes\nctypes.string_at(0)");
  EXPECT_EQ(code_of(segfault), 128 + 11) << boost::json::serialize(segfault);
  EXPECT_EQ(field(cell(server, "crash", "print('doomed' in globals())"), "stdout"), "False\n");
}

TEST_F(PythonKernel, RestartAndABashRestartClearTheState) {
  auto& server = *server_;
  cell(server, "restart", "value = 7");
  auto restarted = cell(server, "restart", boost::json::object{{"restart", true}});
  EXPECT_EQ(code_of(restarted), 0) << boost::json::serialize(restarted);
  EXPECT_EQ(field(cell(server, "restart", "print('value' in globals())"), "stdout"), "False\n");
  // A restart with code runs it in the fresh kernel.
  cell(server, "restart", "value = 8");
  auto again = cell(server, "restart",
                    boost::json::object{{"restart", true}, {"code", "print('value' in globals())"}});
  EXPECT_EQ(field(again, "stdout"), "False\n");
  // bash's restart restarts the whole sandbox: the kernel goes with it.
  cell(server, "restart", "value = 9");
  auto bash = server.curl_json("-X POST -H 'Content-Type: application/json' " + server.base() +
                               "/containers/restart/tools/bash_code_execution -d '{\"restart\": true}'");
  ASSERT_TRUE(bash.is_object()) << boost::json::serialize(bash);
  EXPECT_EQ(field(cell(server, "restart", "print('value' in globals())"), "stdout"), "False\n");
}

TEST_F(PythonKernel, AnotherContainersKernelIsSeparate) {
  auto& server = *server_;
  cell(server, "mine", "secret = 'alice-a'");
  EXPECT_EQ(field(cell(server, "other", "print('secret' in globals())"), "stdout"), "False\n");
  EXPECT_EQ(field(cell(server, "mine", "print(secret)"), "stdout"), "alice-a\n");
  // The kernel runs as the agent, like commands.
  EXPECT_EQ(field(cell(server, "mine", "import os\nprint(os.getuid(), os.getcwd())"), "stdout"),
            "1000 /home/agent/workspace\n");
}

TEST_F(PythonKernel, HostileCodeOnlyHurtsItsOwnKernel) {
  auto& server = *server_;
  cell(server, "bystander", "safe = True");
  // Garbage on every descriptor that might be the protocol's.
  auto garbage = cell(
      server, "hostile",
      "import os\nfor fd in range(3, 256):\n    try:\n        os.write(fd, b'\\xff\\xff\\xff\\x7fjunk')\n"
      "    except OSError:\n        pass\nimport time\ntime.sleep(5)");
  EXPECT_NE(code_of(garbage), 0) << boost::json::serialize(garbage);
  EXPECT_EQ(field(cell(server, "hostile", "print(1 + 1)"), "stdout"), "2\n");
  // Closing every descriptor: the channel is gone both ways.
  auto closed = cell(server, "hostile", "import os\nos.closerange(0, 1024)\nimport time\ntime.sleep(5)");
  EXPECT_NE(code_of(closed), 0) << boost::json::serialize(closed);
  EXPECT_NE(field(closed, "stderr").find("The Python kernel exited"), std::string::npos);
  EXPECT_EQ(field(cell(server, "hostile", "print(2 + 2)"), "stdout"), "4\n");
  // A fork bomb fills its own sandbox's process limit until the timeout kills its tree.
  auto bomb = cell(server, "hostile",
                   boost::json::object{{"code",
                                        "import os\nwhile True:\n    try:\n        os.fork()\n"
                                        "    except OSError:\n        pass"},
                                       {"timeout", 2}});
  EXPECT_EQ(code_of(bomb), 124) << boost::json::serialize(bomb);
  EXPECT_EQ(field(cell(server, "hostile", "print(3 + 3)"), "stdout"), "6\n");
  // The other sandbox's kernel never noticed.
  EXPECT_EQ(field(cell(server, "bystander", "print(safe)"), "stdout"), "True\n");
  // The interrupt stopped the cell, not the forked copies still looping: stopping the
  // sandbox ends them (and the next call gets a fresh kernel).
  server.curl("-X POST " + server.base() + "/containers/hostile/stop");
  EXPECT_EQ(field(cell(server, "hostile", "print('six' in globals())"), "stdout"), "False\n");
}

TEST_F(PythonKernel, BadInputIsAnInvalidToolInputBlock) {
  auto& server = *server_;
  auto missing = cell(server, "input", boost::json::object{{"cmd", "x"}});
  EXPECT_EQ(field(missing, "type"), "code_execution_tool_result_error");
  EXPECT_EQ(field(missing, "error_code"), "invalid_tool_input");
  auto wrong = cell(server, "input", boost::json::object{{"code", 5}});
  EXPECT_EQ(field(wrong, "error_code"), "invalid_tool_input");
}

// The channel to the server from the attacker's side: code in a cell finds the driver's
// protocol descriptor and its own call's id (in the driver's globals, found through the
// garbage collector) and writes frames of its own to it. `forge` is defined in the cell
// for that.
const std::string kForge =
    "import gc, json, os, struct\n"
    "_g = next(o for o in gc.get_objects() if isinstance(o, dict) and 'PROTOCOL_OUT' in o and '_running' in "
    "o)\n"
    "channel, call = _g['PROTOCOL_OUT'], _g['_running']['id']\n"
    "def write_all(data):\n"
    "    view = memoryview(data)\n"
    "    while view:\n"
    "        view = view[os.write(channel, view):]\n"
    "def forge(message):\n"
    "    data = json.dumps(message).encode()\n"
    "    write_all(struct.pack('>I', len(data)) + data)\n";

// What an attack may add to the server's RSS at its peak.
constexpr long kRssSlackKib = 64 * 1024;
// Within 80 MiB of `before`, given a few seconds to settle: the 64 MiB of freed memory
// the allocator may keep (app/memory_release.h, kFreeMemoryKept: it is handed back only
// past that), and 16 MiB for what the server holds live after the attack (its records,
// logs, caches) and what the allocator cannot hand back between live blocks.
constexpr long kRssSettledSlackKib = 80 * 1024;
void expect_rss_back_near(pid_t pid, long before) {
  long after = rss_kib(pid);
  for (int i = 0; i < 50 && after - before >= kRssSettledSlackKib; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    after = rss_kib(pid);
  }
  EXPECT_LT(after - before, kRssSettledSlackKib) << "RSS " << before << " -> " << after << " KiB";
}

// Bob's `echo ok` and /health, again and again while it lives, each checked.
class BobServed {
 public:
  explicit BobServed(const ServerProcess& server) : server_(server) {
    thread_ = std::thread([this] {
      while (!stop_ || answered_ < 3) {
        auto echo = server_.curl_json("--max-time 20 -X POST '" + server_.base() +
                                          "/containers/bob-channel/tools/bash_code_execution' -d "
                                          "'{\"command\": \"echo ok\"}'",
                                      "secret-bob-x");
        const bool ok = echo.is_object() && echo.as_object().contains("stdout") &&
                        echo.at("stdout") == "ok\n" &&
                        server_.status("--max-time 20 " + server_.url("/health")) == 200;
        std::lock_guard lock(mutex_);
        if (ok)
          ++answered_;
        else
          failures_.push_back(boost::json::serialize(echo));
      }
    });
  }
  ~BobServed() { finish(); }
  // Ends the loop; every answer Bob had must have been right.
  void check() {
    finish();
    EXPECT_TRUE(failures_.empty()) << failures_.size() << " failed, the first: " << failures_[0];
    EXPECT_GE(answered_.load(), 3);
  }

 private:
  void finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::vector<std::string> failures_;
  std::atomic<int> answered_{0};
  const ServerProcess& server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mutex_;
};

class PythonKernelChannel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess(kConfig); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  // The server's memory and descriptors once Bob's container and `containers`' kernels
  // are up (the baseline an attack is measured against).
  static void warm_up(const std::vector<std::string>& containers) {
    auto& server = *server_;
    ASSERT_EQ(
        server
            .curl_json("-X POST '" + server.base() +
                           "/containers/bob-channel/tools/bash_code_execution' -d '{\"command\": \"true\"}'",
                       "secret-bob-x")
            .at("return_code"),
        0);
    for (const auto& container : containers) ASSERT_EQ(code_of(cell(server, container, "kept = 1")), 0);
  }
  static ServerProcess* server_;
};
ServerProcess* PythonKernelChannel::server_ = nullptr;

// Frames that are not the call's own: a non-streamed cell's "event" frames of 20 MiB
// each (they used to be parsed and dropped uncounted), and bare headers announcing
// 64 MiB (they used to allocate and zero 64 MiB each until the cell's timeout). The
// first ends its kernel, which the result says; the second costs the server nothing
// while it waits; the server's memory and descriptors come back to where they were, and
// Bob is served throughout.
TEST_F(PythonKernelChannel, StrayAndAnnouncedFramesAreBoundedAndEndTheKernel) {
  auto& server = *server_;
  const std::vector<std::string> attackers = {"stray-1", "stray-2", "stray-3", "stray-4"};
  warm_up(attackers);
  const long rss_before = rss_kib(server.pid()), fds_before = count_fds(server.pid());
  BobServed bob(server);

  // Four kernels announce a 64 MiB frame each and send nothing more, past the timeout.
  std::vector<boost::json::object> announced(attackers.size());
  std::atomic<int> running{static_cast<int>(attackers.size())};
  std::vector<std::thread> cells;
  for (size_t i = 0; i < attackers.size(); ++i)
    cells.emplace_back([&, i] {
      announced[i] = cell(server, attackers[i],
                          boost::json::object{{"code", kForge +
                                                           "write_all(struct.pack('>I', 64 << 20))\n"
                                                           "import time\ntime.sleep(30)  # " +
                                                           attackers[i]},
                                              {"timeout", 2}});
      --running;
    });
  long peak = rss_before;
  while (running > 0) {
    peak = std::max(peak, rss_kib(server.pid()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& t : cells) t.join();
  for (const auto& result : announced) {
    EXPECT_EQ(code_of(result), 124) << boost::json::serialize(result);
    EXPECT_NE(field(result, "stderr").find("restarted"), std::string::npos) << boost::json::serialize(result);
  }
  EXPECT_LT(peak - rss_before, kRssSlackKib) << "RSS " << rss_before << " -> peak " << peak << " KiB";
  // Their kernels were restarted: each gets state again.
  for (const auto& container : attackers) ASSERT_EQ(code_of(cell(server, container, "kept = 2")), 0);

  // Event frames of a call that is not streamed: the first ends the kernel.
  auto stray =
      cell(server, "stray-1",
           kForge +
               "text = 'x' * (20 << 20)\nfor _ in range(8):\n"
               "    forge({'op': 'event', 'id': call, 'event': {'type': 'stdout', 'text': text}})\n");
  EXPECT_EQ(code_of(stray), 1) << field(stray, "stderr").substr(0, 400);
  EXPECT_NE(field(stray, "stderr")
                .find("The Python kernel was ended for breaking its channel to the server (more "
                      "than 1 MiB that were not its call's)"),
            std::string::npos)
      << field(stray, "stderr").substr(0, 400);
  EXPECT_LE(field(stray, "stdout").size(), 100u);
  // A frame over the bound, and one that is not JSON, end it too.
  auto over = cell(server, "stray-2",
                   kForge + "write_all(struct.pack('>I', (64 << 20) + 1))\nimport time\ntime.sleep(5)");
  EXPECT_NE(field(over, "stderr")
                .find("breaking its channel to the server (a frame of 67108865 bytes, over the "
                      "limit of 64 MiB)"),
            std::string::npos)
      << boost::json::serialize(over);
  auto garbled = cell(server, "stray-3",
                      kForge + "write_all(struct.pack('>I', 5) + b'{nope')\nimport time\ntime.sleep(5)");
  EXPECT_NE(field(garbled, "stderr").find("(a frame of 5 bytes that is not a JSON object)"),
            std::string::npos)
      << boost::json::serialize(garbled);
  // A few stray frames are skipped: the call ends as usual, its state kept.
  auto few = cell(server, "stray-4",
                  kForge +
                      "for n in range(3):\n    forge({'op': 'done', 'id': call + 1000})\n"
                      "print('after', kept)");
  EXPECT_EQ(field(few, "stdout"), "after 2\n") << boost::json::serialize(few);
  // Each ended kernel's next call starts a fresh one.
  for (const char* container : {"stray-1", "stray-2", "stray-3"})
    EXPECT_EQ(field(cell(server, container, "print('kept' in globals())"), "stdout"), "False\n") << container;

  bob.check();
  expect_rss_back_near(server.pid(), rss_before);
  EXPECT_LE(count_fds(server.pid()), fds_before + 8);
}

// A "done" frame of the code's own, with 8 MiB of stdout and of stderr and an 8 MiB
// value: the result is capped at the output limit (1 MiB) as a command's output is,
// ending with the same marker; Bob is served meanwhile.
TEST_F(PythonKernelChannel, AForgedDoneFrameIsCappedAsCommandsAre) {
  auto& server = *server_;
  warm_up({"forged"});
  const long rss_before = rss_kib(server.pid());
  BobServed bob(server);
  auto forged =
      cell(server, "forged",
           kForge +
               "forge({'op': 'done', 'id': call, 'status': 'ok', 'execution_count': 1,\n"
               "       'stdout': 'o' * (8 << 20), 'stderr': 'e' * (8 << 20),\n"
               "       'outputs': [{'type': 'execute_result', 'data': {'text/plain': 'v' * (8 << 20)}}]})\n"
               "import time\ntime.sleep(1)");
  const std::string marker = "...[truncated]";
  const std::string out = field(forged, "stdout"), err = field(forged, "stderr");
  EXPECT_EQ(out.size(), (1u << 20) + marker.size());
  EXPECT_TRUE(out.size() > marker.size() && out.substr(out.size() - marker.size()) == marker);
  EXPECT_EQ(out.find_first_not_of('o'), 1u << 20);
  EXPECT_EQ(err.size(), (1u << 20) + marker.size());
  EXPECT_TRUE(err.size() > marker.size() && err.substr(err.size() - marker.size()) == marker);
  // bash's cap, for comparison: the same size and marker.
  const fs::path body = server.dir() / "bash-cap.json";
  std::ofstream(body) << boost::json::serialize(
      boost::json::object{{"command", "head -c 9000000 /dev/zero | tr '\\0' o"}});
  auto bash =
      server.curl_json("-X POST '" + server.base() +
                       "/containers/forged/tools/bash_code_execution' --data-binary @" + body.string());
  const std::string bash_out(bash.at("stdout").as_string());
  EXPECT_TRUE(bash_out == out) << "bash kept " << bash_out.size() << " bytes, the kernel's cell "
                               << out.size();
  // The kernel goes on: the real "done" that came after is skipped as a stray.
  EXPECT_EQ(field(cell(server, "forged", "print(kept)"), "stdout"), "1\n");
  bob.check();
  expect_rss_back_near(server.pid(), rss_before);
}

// The sandbox stops on its TTL: the kernel goes with it, the next call starts afresh.
TEST(PythonKernelLifetime, TheStateIsGoneAfterTheSandboxStopsOnItsTtl) {
  ServerProcess server(kConfig + "external:\n  opensandbox:\n    sessionTTLSeconds: 2\n");
  EXPECT_EQ(code_of(cell(server, "ttl", "before_ttl = 1")), 0);
  // (Asking for the container's state is activity too: it is asked once, after the idle
  // reaper stopped the only sandbox there is, which /metrics shows without touching it.)
  ASSERT_TRUE(
      eventually([&] { return server.metric("sandboxd_sandboxes_running") == 0; }, std::chrono::seconds(60)))
      << server.log();
  auto described = server.curl_json(server.base() + "/containers/ttl");
  const std::string state = described.is_object() ? std::string(described.at("state").as_string()) : "";
  ASSERT_EQ(state, "stopped");
  EXPECT_EQ(field(cell(server, "ttl", "print('before_ttl' in globals())"), "stdout"), "False\n");
}

}  // namespace
