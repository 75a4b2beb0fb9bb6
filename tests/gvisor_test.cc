// The gvisor tier (runtime.isolation: gvisor) end to end: a real server whose every
// sandbox is a runsc container, driven through the HTTP API as a client would. What is
// checked here is the sandbox contract as it holds on this tier today
// (docs/isolation-tiers.md says what does not yet).
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "base/base64.h"
#include "eventually.h"
#include "runtime/gvisor_launcher.h"
#include "shared_server_suite.h"

namespace {

namespace bj = boost::json;
using sandboxd::testing::eventually;
using sandboxd::testing::file_id;
using sandboxd::testing::sh;

// A Connect envelope around one JSON message (envd's streaming calls).
std::string envelope(const std::string& json) {
  std::string out(5, '\0');
  const auto n = static_cast<uint32_t>(json.size());
  out[1] = static_cast<char>(n >> 24);
  out[2] = static_cast<char>(n >> 16);
  out[3] = static_cast<char>(n >> 8);
  out[4] = static_cast<char>(n);
  return out + json;
}

// The thread that reads a process's stream, joined on every path (an ASSERT returns
// early): `end` (deleting the sandbox) ends the stream first when it is still open.
struct StreamReader {
  std::thread thread;
  std::function<void()> end;
  ~StreamReader() {
    if (!thread.joinable()) return;
    end();
    thread.join();
  }
};

// Every `stream` chunk ("stdout" or "stderr") of a process's Connect stream, decoded
// and joined (found by hand: std::regex recurses per character, and a stream of
// megabytes would overflow the stack).
std::string streamed(const std::string& stream_text, const std::string& stream) {
  std::string joined;
  const std::string key = "\"" + stream + "\":\"";
  for (size_t at = stream_text.find(key); at != std::string::npos; at = stream_text.find(key, at)) {
    at += key.size();
    const size_t end = stream_text.find('"', at);
    if (end == std::string::npos) break;
    if (auto bytes = sandboxd::base64_decode(stream_text.substr(at, end - at))) joined += *bytes;
    at = end;
  }
  return joined;
}

class GvisorTest : public sandboxd::testing::SharedServerSuite {
 protected:
  static void SetUpTestSuite() {
    if (sandboxd::runtime::find_runsc().empty()) return;
    // A memory limit small enough to cross, large enough for bash and python to start.
    start_server(
        "runtime:\n  isolation: gvisor\n  gvisorPlatform: ptrace\n"
        "codeInterpreter:\n  memoryLimitMb: 128\n"
        "auth:\n  adminToken: admin-secret-for-tests-x\n");
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
  // The pool's ready sandboxes, as the admin API lists them (-1: no answer).
  static int64_t prestarted_sandboxes() {
    auto view = server->curl_json(server->url("/admin/sandboxes"), "admin-secret-for-tests-x");
    return view.is_object() && view.as_object().contains("prestarted")
               ? view.at("prestarted").to_number<int64_t>()
               : -1;
  }
  static std::string text(const bj::object& reply, const char* field) {
    auto it = reply.find(field);
    return it != reply.end() && it->value().is_string() ? std::string(it->value().as_string()) : "";
  }

  // One cell of the persistent Python (code_execution's direct endpoint).
  bj::object python(const std::string& code) {
    std::ofstream(*work / "cell.json") << bj::serialize(bj::object{{"code", code}});
    auto reply = server->curl_json("-X POST " + server->base() + "/containers/" + container +
                                   "/tools/code_execution -d @" + (*work / "cell.json").string());
    EXPECT_TRUE(reply.is_object() && reply.as_object().contains("return_code")) << bj::serialize(reply);
    return reply.is_object() ? reply.as_object() : bj::object{};
  }

  // An E2B sandbox of this server, and envd's calls addressed to it (as E2B's SDK makes them).
  std::string create_e2b_sandbox() {
    auto made = server->curl_json("-X POST " + server->url("/e2b/sandboxes") +
                                  " -H 'Content-Type: application/json' -d '{\"templateID\": \"base\", "
                                  "\"timeout\": 600}'");
    EXPECT_TRUE(made.is_object() && made.as_object().contains("sandboxID")) << bj::serialize(made);
    return made.is_object() && made.as_object().contains("sandboxID")
               ? std::string(made.at("sandboxID").as_string())
               : "";
  }
  std::string envd(const std::string& sandbox, const std::string& method) const {
    return server->url("/e2b/sandbox/process.Process/" + method) + " -H 'E2b-Sandbox-Id: " + sandbox +
           "' -H 'E2b-Sandbox-Port: 49983' ";
  }
  // A unary call: "<status>\n<body>".
  std::string envd_call(const std::string& sandbox, const std::string& method, const std::string& json) {
    const auto body = *work / (method + ".json");
    std::ofstream(body, std::ios::binary) << json;
    const std::string out =
        server->curl("-m 30 -w '\\n%{http_code}' -X POST " + envd(sandbox, method) +
                     "-H 'Content-Type: application/json' --data-binary @" + body.string());
    const auto cut = out.rfind('\n');
    return out.substr(cut + 1) + "\n" + out.substr(0, cut);
  }
  // Starts a process through envd's streaming Start; its stream goes into `into` as it
  // comes, on a thread of its own (joined by the caller) until the process ends.
  std::thread start_e2b_process(const std::string& sandbox, const std::string& message,
                                const std::filesystem::path& into) {
    const auto body = *work / (into.filename().string() + ".start");
    std::ofstream(body, std::ios::binary) << envelope(message);
    const std::string args = "-N -m 300 -o " + into.string() + " -X POST " + envd(sandbox, "Start") +
                             "-H 'Content-Type: application/connect+json' --data-binary @" + body.string();
    return std::thread([args] { server->curl(args); });
  }
  static std::string read_all(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

TEST_F(GvisorTest, ACommandsOutputAndExitCodeComeBackFromGvisorsKernel) {
  auto reply = bash("echo out; echo err >&2; exit 3");
  EXPECT_EQ(text(reply, "stdout"), "out\n");
  EXPECT_EQ(text(reply, "stderr"), "err\n");
  EXPECT_EQ(reply.at("return_code"), 3);
  // The kernel the command sees is gVisor's (the sentry's), not the host's; its log is
  // closed to commands as the native tier's is (the seccomp filter refuses syslog).
  auto kernel = bash("uname -r; dmesg 2>&1 | head -1");
  EXPECT_EQ(text(kernel, "stdout").find(sh("uname -r")), std::string::npos) << "the host's kernel release";
  EXPECT_NE(text(kernel, "stdout").find("Operation not permitted"), std::string::npos)
      << text(kernel, "stdout");
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

// runtime.prestartedSandboxes (2 by default) holds on this tier too: a new container's
// first command runs in a sandbox that was up before the container was asked for, with
// the container's folders put in place inside it (runsc was given only the slots'
// parents; PID 1 binds each folder): the same contract as a sandbox started for it.
TEST_F(GvisorTest, ANewContainersFirstCommandRunsInAPreStartedSandboxOverItsFolders) {
  ASSERT_TRUE(eventually([&] { return prestarted_sandboxes() >= 1; }, std::chrono::seconds(60)));
  // An upload makes the container (its folders, no sandbox yet); the pool's sandbox
  // waits on meanwhile, so its PID 1 is older than the container's first command.
  sh("curl -s -X PUT " + files("/given.txt") + " -H 'Authorization: Bearer secret-alice' -d given");
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  auto first = bash(
      "ps -o etimes= -p 1 | tr -d ' '; cat /mnt/user-data/uploads/given.txt; echo; "
      "echo made > made.txt && echo out > /mnt/user-data/outputs/out.txt && echo written; "
      "touch /mnt/user-data/uploads/mine 2>&1 | grep -c 'Read-only'; "
      "ls /.sandboxd/slots 2>&1 | grep -c 'Permission denied'; "
      "stat -c '%a %u' /home/agent/workspace /mnt/user-data/outputs /mnt/user-data/uploads");
  const std::string out = text(first, "stdout");
  std::istringstream lines(out);
  std::string age;
  std::getline(lines, age);
  EXPECT_GE(std::atoi(age.c_str()), 2) << "PID 1 started for this command:\n" << out;
  EXPECT_EQ(out.substr(out.find('\n') + 1), "given\nwritten\n1\n1\n755 1000\n755 1000\n755 1000\n")
      << out << text(first, "stderr");
  // The writes reached the container's own folders, as the Files API sees them.
  EXPECT_EQ(server->curl(files("/" + file_id("/mnt/user-data/outputs/out.txt") + "/content")), "out\n");
  EXPECT_EQ(text(bash("cat made.txt"), "stdout"), "made\n");
  // PID 1 gave up CAP_SYS_ADMIN (bit 21) once the folders were bound; it kept what the
  // commands' tree management needs.
  auto caps = bash("grep '^CapEff:' /proc/1/status | cut -f2");
  const unsigned long long effective = std::stoull(text(caps, "stdout"), nullptr, 16);
  EXPECT_EQ(effective & (1ull << 21), 0u) << text(caps, "stdout");
  EXPECT_NE(effective & (1ull << 5), 0u) << "CAP_KILL: " << text(caps, "stdout");
}

// A container's volume is mounted by the server alone: no sandbox started after that
// mount keeps a copy of it (runsc's launcher copies the server's mounts), so that once
// the server unmounts it (an idle container) no file system of it is left alive for the
// next mount to stand beside, each with its own view of the same image.
TEST_F(GvisorTest, NoSandboxKeepsAnotherContainersVolumeMounted) {
  ASSERT_EQ(bash("echo mine > mine.txt").at("return_code"), 0);
  std::string volume;
  for (const auto& entry : std::filesystem::directory_iterator(server->data_dir() / "containers"))
    if (std::filesystem::exists(entry.path() / "volume" / "workspace" / "mine.txt"))
      volume = (entry.path() / "volume").string();
  ASSERT_FALSE(volume.empty()) << "the container's volume is under the data directory";
  // Sandboxes started after the mount: the pool's refill, and one for another container.
  ASSERT_TRUE(eventually([&] { return prestarted_sandboxes() >= 2; }, std::chrono::seconds(60)));
  name_container("gv-other");
  ASSERT_EQ(bash("true").at("return_code"), 0);
  // Every process whose mounts show the volume at its place is in the server's (and
  // this test's) mount namespace.
  const std::string holders = sh("for f in /proc/[0-9]*/mountinfo; do grep -q ' " + volume +
                                 " ' $f 2>/dev/null && readlink ${f%/mountinfo}/ns/mnt; done | sort -u");
  EXPECT_EQ(holders, sh("readlink /proc/self/ns/mnt")) << volume;
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

// The persistent Python runs as a long-lived process inside gVisor, its pipes kept by
// the sandbox's PID 1 and relayed as messages: its state is there for the next call.
TEST_F(GvisorTest, ThePythonKernelKeepsItsVariablesBetweenCalls) {
  auto first = python("import math\nx = 41\nprint('set')");
  EXPECT_EQ(text(first, "stdout"), "set\n") << bj::serialize(first);
  EXPECT_EQ(first.at("return_code"), 0);
  auto second = python("x + 1");
  EXPECT_EQ(text(second, "stdout"), "42\n") << bj::serialize(second);
  // It runs inside gVisor (its kernel release is the sentry's, not the host's), as the agent.
  auto where = python("import os, platform\nprint(os.getuid(), platform.release())");
  EXPECT_EQ(text(where, "stdout"), "1000 " + text(bash("uname -r"), "stdout")) << bj::serialize(where);
  EXPECT_EQ(text(where, "stdout").find(sh("uname -r")), std::string::npos) << "the host's kernel release";
}

// E2B's processes (what the SDK's commands.run({background, stdin}), sendStdin, connect
// and kill do): its output streamed as it writes, its stdin taken, and a kill ends it.
TEST_F(GvisorTest, AnE2bProcessStreamsItsOutputTakesStdinAndIsKilled) {
  const std::string sandbox = create_e2b_sandbox();
  ASSERT_FALSE(sandbox.empty());
  const auto stream = *work / "process.stream";
  auto delete_sandbox = [&] { server->curl("-X DELETE " + server->url("/e2b/sandboxes/" + sandbox)); };
  StreamReader reader{
      start_e2b_process(
          sandbox,
          R"({"process": {"cmd": "/bin/bash", "args": ["-c", "echo started; echo to-stderr >&2; read line; )"
          R"(echo \"got $line\"; sleep 600"]}, "stdin": true})",
          stream),
      delete_sandbox};
  std::smatch pid;
  std::string seen;
  ASSERT_TRUE(eventually([&] {
    seen = read_all(stream);
    return std::regex_search(seen, pid, std::regex("\"start\":\\{\"pid\":([0-9]+)")) &&
           streamed(seen, "stdout") == "started\n";
  })) << seen;
  const std::string selector = "{\"process\": {\"pid\": " + pid[1].str() + "}";
  // Its output came while it waits for its stdin: streamed, not held to its end.
  EXPECT_EQ(streamed(seen, "stderr"), "to-stderr\n");
  const std::string sent =
      envd_call(sandbox, "SendInput",
                selector + ", \"input\": {\"stdin\": \"" + sandboxd::base64_encode("ping\n") + "\"}}");
  EXPECT_EQ(sent.substr(0, 4), "200\n") << sent;
  ASSERT_TRUE(eventually([&] {
    return streamed(seen = read_all(stream), "stdout") == "started\ngot ping\n";
  })) << seen;
  const std::string killed = envd_call(sandbox, "SendSignal", selector + ", \"signal\": \"SIGNAL_SIGKILL\"}");
  EXPECT_EQ(killed.substr(0, 4), "200\n") << killed;
  reader.thread.join();  // the stream ends with the process
  seen = read_all(stream);
  EXPECT_NE(seen.find("\"end\""), std::string::npos) << seen;
  const std::string listed = envd_call(sandbox, "List", "{}");
  EXPECT_EQ(listed.find("\"pid\":" + pid[1].str() + ","), std::string::npos) << listed;
  EXPECT_EQ(text(bash("pgrep -c sleep || true"), "stdout"), "0\n") << "its tree ended with it";
  delete_sandbox();
}

// More than the relay's window each way (the process's stdin and its output are carried
// in bounded pieces, acknowledged as the pipes take them): every byte, in order.
TEST_F(GvisorTest, AnE2bProcessGetsAndGivesMoreThanItsPipesHold) {
  const std::string sandbox = create_e2b_sandbox();
  ASSERT_FALSE(sandbox.empty());
  const auto stream = *work / "md5.stream";
  auto delete_sandbox = [&] { server->curl("-X DELETE " + server->url("/e2b/sandboxes/" + sandbox)); };
  StreamReader reader{
      start_e2b_process(
          sandbox,
          R"({"process": {"cmd": "/bin/sh", "args": ["-c", "md5sum; head -c 1500000 /dev/zero | tr '\\0' a"]}, )"
          R"("tag": "md5", "stdin": true})",
          stream),
      delete_sandbox};
  const std::string selector = R"({"process": {"tag": "md5"})";
  ASSERT_TRUE(eventually([&] { return envd_call(sandbox, "List", "{}").find("md5") != std::string::npos; }));
  std::string all_sent;
  for (int i = 0; i < 3; ++i) {
    const std::string piece(600 * 1024, static_cast<char>('a' + i));
    std::string answer;
    ASSERT_TRUE(eventually([&] {
      answer = envd_call(sandbox, "SendInput",
                         selector + R"(, "input": {"stdin": ")" + sandboxd::base64_encode(piece) + "\"}}");
      return answer.substr(0, 4) != "429\n";  // a write that does not fit yet is sent again
    })) << answer.substr(0, 300);
    ASSERT_EQ(answer.substr(0, 4), "200\n") << answer.substr(0, 300) << read_all(stream);
    all_sent += piece;
  }
  const std::string closed = envd_call(sandbox, "CloseStdin", selector + "}");
  EXPECT_EQ(closed.substr(0, 4), "200\n") << closed;
  reader.thread.join();
  const std::string out = streamed(read_all(stream), "stdout");
  std::ofstream(*work / "sent.bin", std::ios::binary) << all_sent;
  const std::string md5 = sh("md5sum < " + (*work / "sent.bin").string());
  ASSERT_GE(out.size(), md5.size());
  EXPECT_EQ(out.substr(0, md5.size()), md5);
  EXPECT_EQ(out.size(), md5.size() + 1500000);
  EXPECT_TRUE(out.substr(md5.size()) == std::string(1500000, 'a'))
      << "the output after the sum is not 1500000 times 'a': "
      << out.substr(md5.size()).find_first_not_of('a');
  delete_sandbox();
}

}  // namespace
