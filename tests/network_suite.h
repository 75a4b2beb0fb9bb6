// The sandbox's network, tried from inside a sandbox the way code (or an attacker)
// would: the allow-listed services by name (a TCP echo server and a real PostgreSQL),
// nothing else reachable, immediate refusals, unknown names failing at once, the model
// called through ANTHROPIC_BASE_URL with the scoped token, and that token refused
// everywhere else. A real `sandboxd serve` on loopback and a scripted upstream model.
//
// One suite for both isolation tiers (runtime.isolation), instantiated once per tier by
// network_test.cc (native) and gvisor_network_test.cc (gvisor: its own executable,
// because runsc's ptrace platform makes it a SERIAL test): the same checks, the same
// names and addresses, on both.
#pragma once

#include <gtest/gtest.h>

#include "postgres_harness.h"
#include "runtime/gvisor_launcher.h"
#include "scripted_upstream.h"
#include "server_harness.h"
#include "tcp_echo.h"

namespace sandboxd::testing {

enum class Tier { kNative, kGvisor };

inline std::string tier_name(const ::testing::TestParamInfo<Tier>& info) {
  return info.param == Tier::kNative ? "native" : "gvisor";
}
// How GoogleTest (and so CTest's listing) shows the parameter.
inline void PrintTo(Tier tier, std::ostream* os) { *os << (tier == Tier::kNative ? "native" : "gvisor"); }

namespace bj = boost::json;

class NetworkTest : public ::testing::TestWithParam<Tier> {
 protected:
  // One tier per process (CTest runs each test on its own), started by the first test.
  void start_suite() {
    if (server || skip_reason) return;
    if (GetParam() == Tier::kGvisor && sandboxd::runtime::find_runsc().empty()) {
      skip_reason = new std::string(
          "runsc is not installed (Debian: apt-get install runsc): the gvisor tier cannot run here");
      return;
    }
    // The owners' real tokens are in the server's environment too: none of it may reach
    // a sandbox.
    setenv("SANDBOXD_TEST_LEAK", "secret-alice", 1);
    echo = new TcpEcho();
    // The one test PostgreSQL (postgres_harness.h). One that does not start fails only
    // the test that queries it.
    try {
      postgres = &PostgresEnvironment::server();
    } catch (const std::exception& e) {
      postgres_error = new std::string(e.what());
    }
    upstream = new ScriptedUpstream();
    down_port = free_loopback_port();  // nothing listens there
    std::string services =
        "          - { name: echo, host: 127.0.0.1, port: " + std::to_string(echo->port()) +
        " }\n"
        "          - { name: down, host: 127.0.0.1, port: " +
        std::to_string(down_port) + " }\n";
    if (postgres)
      services +=
          "          - { name: db.internal, host: localhost, port: " + std::to_string(postgres->port()) +
          " }\n";
    server = new ServerProcess(
        "model:\n  baseUrl: \"" + upstream->base_url() +
        "\"\n  models: { default: upstream-model }\n  timeoutSec: 20\n  maxNestingDepth: 1\n"
        "runtime:\n  maxConnectionsPerSandbox: 6\n" +
        (GetParam() == Tier::kGvisor ? "  isolation: gvisor\n  gvisorPlatform: ptrace\n" : "") +
        "external:\n  opensandbox:\n    codeExecution:\n      internal:\n        services:\n" + services);
    unsetenv("SANDBOXD_TEST_LEAK");
  }
  static void TearDownTestSuite() {
    delete server;
    delete upstream;
    delete postgres_error;
    delete echo;
  }
  void SetUp() override {
    start_suite();
    if (skip_reason) GTEST_SKIP() << *skip_reason;
    // (The parameter's suffix, "/native", is not part of a container id.)
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    container = "n-" + test.substr(0, test.find('/'));
  }
  void TearDown() override {
    if (upstream) {
      EXPECT_EQ(upstream->pending_steps(), 0u) << "every scripted step was used";
    }
  }
  // A call's timeout that tells a refusal at once from a hang (a probe's own is 20 s):
  // gVisor's ptrace platform takes seconds to start python on a loaded machine.
  int quick() const { return GetParam() == Tier::kGvisor ? 15 : 5; }

  // Runs `command` with bash in `in` (default: this test's container); the result block.
  bj::object bash(const std::string& command, const std::string& in = "", int timeout = 30) {
    fs::path file = server->dir() / ("cmd-" + std::to_string(++commands) + ".json");
    std::ofstream(file) << bj::serialize(bj::object{{"command", command}, {"timeout", timeout}});
    auto reply = server->curl_json(
        "-X POST '" + server->base() + "/containers/" + (in.empty() ? container : in) +
        "/tools/bash_code_execution' -H 'content-type: application/json' --data-binary @" + file.string());
    EXPECT_TRUE(reply.is_object()) << bj::serialize(reply);
    return reply.as_object();
  }
  // The command's stdout, or what came instead (an error's body) for the failure message.
  static std::string out(const bj::object& result) {
    return result.contains("stdout") ? std::string(result.at("stdout").as_string())
                                     : "(no result: " + bj::serialize(result) + ")";
  }
  std::string token_of(const std::string& in = "") {
    return out(bash("printf %s \"$ANTHROPIC_AUTH_TOKEN\"", in));
  }

  static TcpEcho* echo;
  static uint16_t down_port;
  static PostgresServer* postgres;  // the process's, not ours to stop
  static std::string* postgres_error;
  static ScriptedUpstream* upstream;
  static ServerProcess* server;
  static std::string* skip_reason;
  std::string container;
  int commands = 0;
};
TcpEcho* NetworkTest::echo = nullptr;
uint16_t NetworkTest::down_port = 0;
PostgresServer* NetworkTest::postgres = nullptr;
std::string* NetworkTest::postgres_error = nullptr;
ScriptedUpstream* NetworkTest::upstream = nullptr;
ServerProcess* NetworkTest::server = nullptr;
std::string* NetworkTest::skip_reason = nullptr;

using U = ScriptedUpstream;

// A python one-liner's outcome: "ok <reply>" or the exception's class and errno.
inline const char* kConnectProbe = R"(python3 - "$@" <<'PY'
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    s = socket.create_connection((host, port), timeout=20)
    s.sendall(b"ping")
    s.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk: break
        data += chunk
    print("ok", data.decode())
except socket.gaierror as e:
    print("gaierror", e.args[0])
except OSError as e:
    print(type(e).__name__, e.errno)
PY
)";

inline std::string probe(const std::string& host, int port) {
  return std::string("set -- ") + host + " " + std::to_string(port) + "\n" + kConnectProbe;
}

TEST_P(NetworkTest, AnAllowListedServiceIsReachedByItsName) {
  auto hosts = out(bash("cat /etc/hosts"));
  EXPECT_NE(hosts.find("\techo\n"), std::string::npos) << hosts;
  EXPECT_NE(hosts.find("\tsandboxd.internal\n"), std::string::npos) << hosts;
  auto result = bash(probe("echo", echo->port()));
  EXPECT_EQ(out(result), "ok ping\n") << bj::serialize(result);
  // A megabyte each way, both directions at once (backpressure: the echo server writes
  // while the client still sends).
  auto big = bash("python3 -c \"\nimport socket, threading, hashlib\ns = socket.create_connection(('echo', " +
                  std::to_string(echo->port()) +
                  "))\npayload = bytes(range(256)) * 4096 * 4\ndef send():\n    s.sendall(payload)\n    "
                  "s.shutdown(socket.SHUT_WR)\n"
                  "t = threading.Thread(target=send); t.start()\ngot = bytearray()\nwhile True:\n    c = "
                  "s.recv(1 << 16)\n"
                  "    if not c: break\n    got += c\nt.join()\nprint(len(got), got == payload)\n\"");
  EXPECT_EQ(out(big), "4194304 True\n") << bj::serialize(big);
}

TEST_P(NetworkTest, NothingElseIsReachableAndRefusalsAreImmediate) {
  // The host's loopback ports (the sandboxd API itself, the echo server's real port) are
  // the sandbox's own loopback: nothing listens there.
  EXPECT_EQ(out(bash(probe("127.0.0.1", server->port()))), "ConnectionRefusedError 111\n");
  EXPECT_EQ(out(bash(probe("127.0.0.1", echo->port()))), "ConnectionRefusedError 111\n");
  EXPECT_EQ(out(bash(probe("localhost", echo->port()))), "ConnectionRefusedError 111\n");
  // An allowed name on another port, the API's address on another port.
  EXPECT_EQ(out(bash(probe("echo", 22))), "ConnectionRefusedError 111\n");
  EXPECT_EQ(out(bash(probe("sandboxd.internal", 8080))), "ConnectionRefusedError 111\n");
  // Any address off the loopback: no route, refused by the sandbox's kernel at once
  // (the probe's own timeout is 20 s; the call's is 5 s, so a hang would show as 124).
  // Linux says "network unreachable"; gVisor's network stack, "no route to host".
  const std::string no_route = GetParam() == Tier::kGvisor ? "OSError 113\n" : "OSError 101\n";
  for (const char* address : {"10.0.0.1", "192.168.1.1", "8.8.8.8", "169.254.169.254"}) {
    auto result = bash(probe(address, 80), "", quick());
    EXPECT_EQ(out(result), no_route) << address << " " << bj::serialize(result);
    EXPECT_EQ(result.at("return_code"), 0);
  }
  auto v6 = bash(
      "python3 -c \"import socket\ntry:\n  socket.create_connection(('2001:4860:4860::8888', 80), "
      "timeout=20)\n"
      "except OSError as e: print(e.errno)\"",
      "", quick());
  EXPECT_EQ(out(v6), no_route.substr(std::string("OSError ").size())) << bj::serialize(v6);
  // The host's own addresses are not reachable either.
  std::string host_ips = sh("hostname -I 2>/dev/null");
  std::istringstream ips(host_ips);
  for (std::string ip; ips >> ip;) {
    if (ip.find(':') != std::string::npos) continue;
    auto result = bash(probe(ip, server->port()), "", quick());
    EXPECT_EQ(out(result), no_route) << ip << " " << bj::serialize(result);
  }
  // No interface but lo.
  EXPECT_EQ(out(bash("ls /sys/class/net")), "lo\n");
}

TEST_P(NetworkTest, AnAllowListedServiceThatIsDownResetsTheConnectionAtOnce) {
  auto result = bash(probe("down", down_port), "", quick());
  const std::string text = out(result);
  // The reset lands on whichever call comes next: the send (EPIPE), the read (ECONNRESET),
  // or the shutdown when it already closed the socket (ENOTCONN); never a hang.
  EXPECT_TRUE(text == "ConnectionResetError 104\n" || text == "BrokenPipeError 32\n" ||
              text == "OSError 107\n")
      << bj::serialize(result);
  EXPECT_NE(server->log().find("service down: connecting to 127.0.0.1:" + std::to_string(down_port)),
            std::string::npos);
}

TEST_P(NetworkTest, UnknownNamesFailAtOnce) {
  auto result =
      bash("getent hosts example.com; echo rc=$?; " + probe("internal-db.example", 5432), "", quick());
  EXPECT_EQ(out(result), "rc=2\ngaierror -2\n") << bj::serialize(result);  // EAI_NONAME
  EXPECT_EQ(result.at("return_code"), 0) << "no resolver to wait for";
  EXPECT_EQ(out(bash("cat /etc/resolv.conf | grep -c nameserver")), "0\n");
}

TEST_P(NetworkTest, PostgresIsQueriedByNameWithPsql) {
  // scripts/setup.sh installs PostgreSQL: a server that does not start is a failure.
  ASSERT_TRUE(postgres) << "PostgreSQL could not be started: " << *postgres_error;
  const std::string psql = (postgres->bin() / "psql").string() + " -h db.internal -p " +
                           std::to_string(postgres->port()) + " -U postgres -d postgres -At";
  auto result = bash(psql + " -c 'create table notes (id int, body text)' && " + psql +
                     " -c \"insert into notes values (1, 'from the sandbox')\" && " + psql +
                     " -c 'select id, body, 6*7 from notes'");
  EXPECT_EQ(out(result), "CREATE TABLE\nINSERT 0 1\n1|from the sandbox|42\n") << bj::serialize(result);
  EXPECT_EQ(result.at("return_code"), 0);
  // The row is really in the database on the host.
  auto host =
      sh((postgres->bin() / "psql").string() + " -h 127.0.0.1 -p " + std::to_string(postgres->port()) +
         " -U postgres -d postgres -At -c 'select body from notes'");
  EXPECT_EQ(host, "from the sandbox\n");
}

TEST_P(NetworkTest, CodeCallsTheModelThroughAnthropicBaseUrl) {
  upstream->push_message(U::message({U::text_block("Hello from the model.")}, "end_turn", 12, 5));
  // What the SDKs do: POST $ANTHROPIC_BASE_URL/v1/messages with the token as a Bearer.
  const std::string call =
      "curl -s -m 20 \"$ANTHROPIC_BASE_URL/v1/messages\" -H \"Authorization: Bearer $ANTHROPIC_AUTH_TOKEN\" "
      "-H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' "
      "-d \"{\\\"model\\\": \\\"$ANTHROPIC_MODEL\\\", \\\"max_tokens\\\": 100, "
      "\\\"messages\\\": [{\\\"role\\\": \\\"user\\\", \\\"content\\\": \\\"hi\\\"}]}\"";
  auto result = bash("echo \"$ANTHROPIC_BASE_URL $ANTHROPIC_MODEL\"; " + call);
  auto text = out(result);
  ASSERT_EQ(text.substr(0, text.find('\n')), "http://sandboxd.internal/api/gpt upstream-model") << text;
  auto reply = json(text.substr(text.find('\n') + 1));
  ASSERT_TRUE(reply.is_object()) << text;
  EXPECT_EQ(reply.at("type"), "message") << text;
  EXPECT_EQ(reply.at("content").at(0).at("text"), "Hello from the model.");
  auto calls = upstream->requests();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back().at("model"), "upstream-model");
}

TEST_P(NetworkTest, TheOfficialSdkInsideNeedsNoConfiguration) {
  // The official TypeScript SDK (tests/sdk, installed by `npm ci` in scripts/test.sh),
  // copied into the container, constructed with no arguments: it finds
  // ANTHROPIC_BASE_URL and ANTHROPIC_AUTH_TOKEN in the environment.
  const fs::path modules = SANDBOXD_SDK_MODULES;
  // scripts/test.sh installs both (node from Debian, so under the /usr a sandbox sees).
  ASSERT_TRUE(fs::exists(modules / "@anthropic-ai" / "sdk"))
      << "run npm ci --prefix tests/sdk (scripts/test.sh does)";
  ASSERT_EQ(access("/usr/bin/node", X_OK), 0) << "node must be /usr/bin/node, visible inside a sandbox";
  const fs::path tarball = server->dir() / "sdk.tgz";
  ASSERT_EQ(
      std::system(("tar -czf " + tarball.string() + " -C " + modules.parent_path().string() + " node_modules")
                      .c_str()),
      0);
  ASSERT_EQ(server->status("-X PUT -T " + tarball.string() + " '" + server->base() +
                           "/files/sdk.tgz?scope_id=" + container + "'"),
            200);
  upstream->push_message(U::message({U::text_block("Hello, SDK.")}, "end_turn", 7, 3));
  auto result = bash(
      "mkdir -p /tmp/sdk && tar -xzf /mnt/user-data/uploads/sdk.tgz -C /tmp/sdk && cat > /tmp/sdk/call.cjs "
      "<<'JS'\n"
      "const Anthropic = require('/tmp/sdk/node_modules/@anthropic-ai/sdk').default;\n"
      "new Anthropic().messages.create({model: process.env.ANTHROPIC_MODEL, max_tokens: 50,\n"
      "  messages: [{role: 'user', content: 'hi'}]})\n"
      "  .then(m => console.log(m.content[0].text, m.model))\n"
      "  .catch(e => { console.log('error', e.status, e.message); process.exit(1); });\n"
      "JS\nnode /tmp/sdk/call.cjs",
      "", 60);
  EXPECT_EQ(out(result), "Hello, SDK. upstream-model\n") << bj::serialize(result);
  auto calls = upstream->requests();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back().at("messages").at(0).at("content").at(0).at("text"), "hi");
}

TEST_P(NetworkTest, NestedCodeExecutionActsForTheOwnerUpToTheDepthLimit) {
  bash("echo marker-of-the-outer-container > /home/agent/workspace/marker");
  // The nested request: code_execution, no container named (so: this container), and
  // its own code tries one more level (depth 2 > maxNestingDepth 1: refused).
  const std::string nested_body =
      R"({"model":"default","max_tokens":100,"tools":[{"name":"code_execution","type":"code_execution_v1"}],)"
      R"("messages":[{"role":"user","content":"go"}]})";
  const std::string call =
      "curl -s -m 20 \"$ANTHROPIC_BASE_URL/v1/messages\" -H \"Authorization: Bearer "
      "$ANTHROPIC_AUTH_TOKEN\" -H 'content-type: application/json' -d '" +
      nested_body + "'";
  upstream->push_message(U::message({U::tool_use("toolu_n1", "bash_code_execution",
                                                 {{"command", "cat /home/agent/workspace/marker; " + call}})},
                                    "tool_use"));
  upstream->push_message(U::message({U::text_block("inner done")}, "end_turn"));
  auto result = bash(call);
  auto reply = json(out(result));
  ASSERT_TRUE(reply.is_object()) << bj::serialize(result);
  EXPECT_EQ(reply.at("container").at("id").as_string(), container)
      << "the nested call runs in its own container";
  const auto& content = reply.at("content").as_array();
  ASSERT_EQ(content.size(), 3u) << bj::serialize(reply);
  std::string inner = std::string(content[1].at("content").at("stdout").as_string());
  EXPECT_EQ(inner.substr(0, inner.find('\n')), "marker-of-the-outer-container");
  auto deeper = json(inner.substr(inner.find('\n') + 1));
  ASSERT_TRUE(deeper.is_object()) << inner;
  EXPECT_EQ(deeper.at("error").at("type"), "invalid_request_error");
  EXPECT_NE(std::string(deeper.at("error").at("message").as_string()).find("cannot be nested more than 1"),
            std::string::npos)
      << inner;
  EXPECT_EQ(content[2].at("text"), "inner done");
}

TEST_P(NetworkTest, TheScopedTokenWorksOnlyForMessagesFromItsOwnSandbox) {
  const std::string token = token_of();
  ASSERT_TRUE(token.starts_with("sbx-scoped-1-")) << token;
  // From outside: refused everywhere, messages included.
  EXPECT_EQ(server->status("'" + server->base() + "/files?scope_id=" + container + "'", token), 401);
  EXPECT_EQ(server->status("-X POST '" + server->base() + "/messages/validate' -d '{}'", token), 401);
  EXPECT_EQ(server->status("'" + server->base() + "/containers'", token), 401);
  // From inside: only the messages endpoints.
  const std::string inside =
      "curl -s -o /dev/null -w '%{http_code} ' -H \"Authorization: Bearer $ANTHROPIC_AUTH_TOKEN\" ";
  auto codes = out(bash(
      inside + "http://sandboxd.internal/api/gpt/v1/files?scope_id=" + container + "; " + inside +
      "http://sandboxd.internal/api/gpt/v1/containers; " + inside + "http://sandboxd.internal/metrics; " +
      inside + "http://sandboxd.internal/admin/sandboxes; " + inside +
      "-X POST http://sandboxd.internal/api/gpt/v1/messages/validate -d "
      "'{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}'"));
  EXPECT_EQ(codes, "403 403 403 403 200 ") << codes;
  // The owner's real token is not accepted from inside either, nor no token at all.
  auto others =
      out(bash("curl -s -o /dev/null -w '%{http_code} ' -H 'x-api-key: secret-alice' -X POST "
               "http://sandboxd.internal/api/gpt/v1/messages/validate -d '{}'; "
               "curl -s -o /dev/null -w '%{http_code}' -X POST "
               "http://sandboxd.internal/api/gpt/v1/messages/validate -d '{}'"));
  EXPECT_EQ(others, "401 401");
  // Another container's sandbox cannot use it.
  const std::string other = container + "-other";
  auto elsewhere = out(
      bash("curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer " + token +
               "' -X POST http://sandboxd.internal/api/gpt/v1/messages/validate -d "
               "'{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}'",
           other));
  EXPECT_EQ(elsewhere, "401");
  // Deleted, then made again under the same id: the old token is dead.
  EXPECT_EQ(server->status("-X DELETE '" + server->base() + "/containers/" + container + "'"), 200);
  auto after =
      out(bash("curl -s -o /dev/null -w '%{http_code} ' -H 'Authorization: Bearer " + token +
               "' -X POST http://sandboxd.internal/api/gpt/v1/messages/validate -d "
               "'{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}'; "
               "printf %s \"$ANTHROPIC_AUTH_TOKEN\""));
  EXPECT_EQ(after.substr(0, 4), "401 ") << after;
  EXPECT_NE(after.substr(4), token) << "the new container has a new token";
}

TEST_P(NetworkTest, TheOwnersRealTokenIsNeverVisibleInside) {
  auto result = bash(
      "env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'; "
      "grep -rIs secret- /etc /home /tmp /mnt /run /var 2>/dev/null; echo done");
  const std::string text = out(result);
  EXPECT_EQ(text.find("secret-alice"), std::string::npos) << text;
  EXPECT_EQ(text.find("secret-bob"), std::string::npos) << text;
  EXPECT_EQ(text.find("SANDBOXD_TEST_LEAK"), std::string::npos) << text;
  EXPECT_NE(text.find("ANTHROPIC_AUTH_TOKEN=sbx-scoped-"), std::string::npos) << text;
  EXPECT_TRUE(text.ends_with("done\n"));
}

TEST_P(NetworkTest, ConnectionsPerSandboxAreLimited) {
  // Six held open (the limit), the seventh is closed at once (the reset may reach it on its
  // connect, its send or its read); after one closes, a new one is served again (the proxy
  // sees the close a moment later: until then a new connection is still reset, and the
  // client tries again).
  auto result = bash(
      "python3 -c \"\nimport socket\nport = " + std::to_string(echo->port()) +
      "\nheld = []\nfor i in range(6):\n    s = socket.create_connection(('echo', port)); s.sendall(b'x');"
      " assert s.recv(1) == b'x'; held.append(s)\ntry:\n"
      "    extra = socket.create_connection(('echo', port)); extra.settimeout(10)\n"
      "    extra.sendall(b'y'); print('seventh:', extra.recv(1))\n"
      "except OSError as e: print('seventh: error', e.errno)\nheld.pop().close()\nimport time\n"
      "for attempt in range(100):\n    try:\n        s = socket.create_connection(('echo', port)); "
      "s.settimeout(10)\n"
      "        s.sendall(b'z'); got = s.recv(1)\n    except OSError: got = b''\n    if got == b'z': break\n"
      "    time.sleep(0.05)\nprint('after one closed:', got)\n\"");
  const std::string text = out(result);
  EXPECT_EQ(text, "seventh: error 104\nafter one closed: b'z'\n") << bj::serialize(result);
}

}  // namespace sandboxd::testing
