// The persistent Python of a sandbox (code_execution), end to end: a real `sandboxd
// serve` on loopback, real sandboxes, IPython's kernel from Debian's python3-ipykernel
// in them, driven through the direct tool endpoint
// POST /api/gpt/v1/containers/{id}/tools/code_execution.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "server_harness.h"

namespace {

using sandboxd::testing::ServerProcess;
using sandboxd::testing::sh;

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

// The sandbox stops on its TTL: the kernel goes with it, the next call starts afresh.
TEST(PythonKernelLifetime, TheStateIsGoneAfterTheSandboxStopsOnItsTtl) {
  ServerProcess server(kConfig + "external:\n  opensandbox:\n    sessionTTLSeconds: 2\n");
  EXPECT_EQ(code_of(cell(server, "ttl", "before_ttl = 1")), 0);
  // (Asking for the container's state is activity too: it is asked once, after the TTL.)
  std::this_thread::sleep_for(std::chrono::seconds(5));
  auto described = server.curl_json(server.base() + "/containers/ttl");
  const std::string state = described.is_object() ? std::string(described.at("state").as_string()) : "";
  ASSERT_EQ(state, "stopped");
  EXPECT_EQ(field(cell(server, "ttl", "print('before_ttl' in globals())"), "stdout"), "False\n");
}

}  // namespace
