// Operating sandboxd, end to end over HTTP: readiness from a real sandbox start,
// metrics that promtool accepts, and admission (capacity.*): a full house waits in
// line, then gets 429 with Retry-After.

#include <gtest/gtest.h>

#include <ctime>
#include <future>
#include <regex>

#include "eventually.h"
#include "server_harness.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

std::string bash_body(const fs::path& dir, const std::string& name, const std::string& command) {
  fs::path file = dir / (name + ".json");
  std::ofstream(file) << bj::serialize(bj::object{{"command", command}});
  return file.string();
}

TEST(Ops, ReadyStartsARealSandbox) {
  ServerProcess server;
  EXPECT_EQ(json(sh("curl -sS " + server.url("/ready"))), json(R"({"status":"ready"})"));
  EXPECT_EQ(server.status(server.url("/ready"), "no-token-needed"), 200);
  ServerProcess none("runtime:\n  provider: none\n");
  std::string headers = sh("curl -sS -D - -o /dev/null " + none.url("/ready"));
  EXPECT_NE(headers.find("503"), std::string::npos) << headers;
  EXPECT_NE(headers.find("Retry-After: 10"), std::string::npos) << headers;
  auto reply = json(sh("curl -sS " + none.url("/ready")));
  EXPECT_EQ(reply.at("reason"), "code_execution provider is not configured.");
}

TEST(Ops, HealthAnswersFromTheBackgroundCheckAnd503OnceItStops) {
  ServerProcess healthy;
  auto body = json(healthy.curl(healthy.url("/health"))).as_object();
  EXPECT_EQ(body.at("status"), "ok");
  EXPECT_TRUE(body.at("check").at("problems").as_array().empty()) << bj::serialize(body);
  EXPECT_GT(body.at("check").at("data_free_bytes").as_int64(), 0);

  // The failpoint stops the check after a second, as a crashed check would.
  setenv("SANDBOXD_FAILPOINT_STOP_HEALTH_CHECK", "1", 1);
  ServerProcess server;
  unsetenv("SANDBOXD_FAILPOINT_STOP_HEALTH_CHECK");
  ASSERT_TRUE(
      eventually([&] { return server.status(server.url("/health")) == 503; }, std::chrono::seconds(30)))
      << server.log();
  body = json(server.curl(server.url("/health"))).as_object();
  EXPECT_EQ(body.at("status"), "unavailable");
  EXPECT_NE(std::string(body.at("reason").as_string()).find("the background health check has not run for"),
            std::string::npos)
      << bj::serialize(body);
  // Only liveness says so: the rest keeps serving.
  EXPECT_EQ(json(server.curl("-X POST " + server.base() +
                             "/containers/h/tools/bash_code_execution -d "
                             "'{\"command\":\"echo still\"}'"))
                .at("stdout"),
            "still\n");
  // The healthy server kept running its check all along.
  EXPECT_EQ(healthy.status(healthy.url("/health")), 200);
}

// A host that cannot attach a container's volume is full, not broken: 503
// overloaded_error with Retry-After, in the documented shape, and the server goes on.
TEST(Ops, NoFreeLoopDeviceIs503OverloadedWithRetryAfter) {
  setenv("SANDBOXD_FAILPOINT_NO_LOOP_DEVICE", "1", 1);
  ServerProcess server;
  unsetenv("SANDBOXD_FAILPOINT_NO_LOOP_DEVICE");
  std::string headers =
      server.curl("-D - -o /dev/null -X POST " + server.base() + "/containers -d '{\"id\":\"full\"}'");
  EXPECT_NE(headers.find(" 503"), std::string::npos) << headers;
  EXPECT_NE(headers.find("Retry-After: 2"), std::string::npos) << headers;
  auto reply =
      server.curl_json("-X POST " + server.base() + "/containers -d '{\"id\":\"full\"}'").as_object();
  EXPECT_EQ(reply.at("type"), "error") << bj::serialize(reply);
  EXPECT_EQ(reply.at("error").at("type"), "overloaded_error") << bj::serialize(reply);
  EXPECT_NE(std::string(reply.at("error").at("message").as_string()).find("no free volume device"),
            std::string::npos)
      << bj::serialize(reply);
  // Nothing of the container was kept: it is not listed, and the server still answers.
  auto listed = server.curl_json(server.base() + "/containers").as_object();
  EXPECT_TRUE(listed.at("data").as_array().empty()) << bj::serialize(listed);
  EXPECT_EQ(server.status(server.url("/health")), 200);
}

TEST(Ops, MetricsPassPromtoolAndCountWhatHappened) {
  ServerProcess server;
  std::string ok = bash_body(server.dir(), "ok", "true");
  std::string fail = bash_body(server.dir(), "fail", "exit 3");
  for (int i = 0; i < 3; ++i)
    server.curl("-X POST " + server.base() + "/containers/metrics/tools/bash_code_execution -d @" + ok);
  server.curl("-X POST " + server.base() + "/containers/metrics/tools/bash_code_execution -d @" + fail);
  server.curl(server.base() + "/nowhere");
  server.curl("-X POST " + server.base() + "/containers/metrics/stop");
  std::string text = sh("curl -sS " + server.url("/metrics"));
  fs::path file = server.dir() / "metrics.txt";
  std::ofstream(file) << text;
  int status = -1;
  std::string lint = sh("promtool check metrics < " + file.string() + " 2>&1", &status);
  EXPECT_EQ(status, 0) << lint << "\n" << text;
  EXPECT_NE(text.find("sandboxd_executions_completed_total{outcome=\"ok\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sandboxd_executions_completed_total{outcome=\"nonzero\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("sandboxd_http_requests_total{route=\"containers.tool\",code=\"200\"} 4\n"),
            std::string::npos);
  EXPECT_NE(text.find("sandboxd_http_requests_total{route=\"unmatched\",code=\"404\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("sandboxd_sandboxes_stopped_total{reason=\"api\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("sandboxd_execution_duration_seconds_count 4\n"), std::string::npos);
  EXPECT_NE(text.find("sandboxd_executions_limit 16\n"), std::string::npos);
  EXPECT_NE(text.find("sandboxd_executions_active 0\n"), std::string::npos);
}

TEST(Ops, AFullHouseWaitsInLineThenGets429WithRetryAfter) {
  ServerProcess server("capacity:\n  maxConcurrentExecutions: 1\n  queueTimeoutSec: 2\n  retryAfterSec: 7\n");
  std::string slow = bash_body(server.dir(), "slow", "sleep 1; echo first");
  std::string quick = bash_body(server.dir(), "quick", "echo second");
  std::string long_one = bash_body(server.dir(), "long", "sleep 4");
  // One slot: the second command waits for the first (under the 2 s line limit).
  auto first = std::async(std::launch::async, [&] {
    return server.curl("-X POST " + server.base() + "/containers/a/tools/bash_code_execution -d @" + slow);
  });
  ASSERT_TRUE(eventually([&] { return server.metric("sandboxd_executions_active") == 1; }));
  auto second =
      server.curl_json("-X POST " + server.base() + "/containers/b/tools/bash_code_execution -d @" + quick);
  EXPECT_EQ(second.at("stdout"), "second\n");
  EXPECT_EQ(json(first.get()).at("stdout"), "first\n");
  // A command that holds the slot longer than the line waits: the next is refused.
  auto holder = std::async(std::launch::async, [&] {
    return server.curl("-X POST " + server.base() + "/containers/a/tools/bash_code_execution -d @" +
                       long_one);
  });
  ASSERT_TRUE(eventually([&] { return server.metric("sandboxd_executions_active") == 1; }));
  std::string response =
      server.curl("-i -X POST " + server.base() + "/containers/b/tools/bash_code_execution -d @" + quick);
  EXPECT_NE(response.find("HTTP/1.1 429"), std::string::npos) << response;
  EXPECT_NE(response.find("Retry-After: 7"), std::string::npos) << response;
  auto body = json(response.substr(response.find("\r\n\r\n") + 4));
  EXPECT_EQ(body.at("error").at("type"), "rate_limit_error");
  EXPECT_EQ(json(holder.get()).at("return_code"), 0);
  std::string text = sh("curl -sS " + server.url("/metrics"));
  EXPECT_NE(text.find("sandboxd_executions_rejected_total{status=\"429\",reason=\"queue_timeout\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(server.status(server.url("/health")), 200);
}

// Work-conserving admission: with no per-owner cap set, one owner alone runs as many
// commands at once as the replica does; one more waits (counted as queued) and, with every
// slot still held past queueTimeoutSec, is refused.
TEST(Ops, AnOwnerAloneRunsEverySlotAndEveryWaiterIsCountedAsQueued) {
  ServerProcess server("capacity:\n  maxConcurrentExecutions: 4\n  queueTimeoutSec: 10\n");
  const std::string hold =
      bash_body(server.dir(), "hold",
                "touch /mnt/user-data/outputs/started; for i in $(seq 600); do "
                "[ -e /mnt/user-data/uploads/go ] && break; sleep 0.1; done; echo released");
  std::vector<std::future<std::string>> holders;
  for (int i = 0; i < 4; ++i)
    holders.push_back(std::async(std::launch::async, [&, i] {
      return server.curl("-X POST " + server.base() + "/containers/one-" + std::to_string(i) +
                         "/tools/bash_code_execution -d @" + hold);
    }));
  auto started = [&] {
    int n = 0;
    for (int i = 0; i < 4; ++i)
      n += server.status("'" + server.base() + "/files/" + file_id("/mnt/user-data/outputs/started") +
                         "/content?scope_id=one-" + std::to_string(i) + "'") == 200;
    return n;
  };
  // All four run at once (none can finish before the go file): none waited in a line
  // of the owner's own, so none is refused.
  ASSERT_TRUE(eventually([&] { return started() >= 4; }, std::chrono::seconds(30))) << server.log();
  ASSERT_EQ(started(), 4) << server.log();
  auto gauge = [&](const std::string& name) {
    const std::string text = sh("curl -sS " + server.url("/metrics"));
    std::smatch m;
    return std::regex_search(text, m, std::regex("\n" + name + " ([0-9]+)\n")) ? std::stoi(m[1]) : -1;
  };
  EXPECT_EQ(gauge("sandboxd_executions_active"), 4);
  EXPECT_EQ(gauge("sandboxd_executions_queued"), 0);
  EXPECT_EQ(gauge("sandboxd_quota_executions_per_owner"), 4);  // no hard cap: the whole limit
  // A fifth waits, and the metrics say so; nothing frees a slot, so it is refused.
  std::string quick = bash_body(server.dir(), "quick", "echo fifth");
  auto fifth = std::async(std::launch::async, [&] {
    return server.curl("-i -X POST " + server.base() + "/containers/one-4/tools/bash_code_execution -d @" +
                       quick);
  });
  EXPECT_TRUE(eventually([&] { return gauge("sandboxd_executions_queued") == 1; }));
  const std::string refused = fifth.get();
  EXPECT_NE(refused.find("HTTP/1.1 429"), std::string::npos) << refused;
  EXPECT_NE(refused.find("\"rate_limit_error\""), std::string::npos) << refused;
  EXPECT_EQ(gauge("sandboxd_executions_queued"), 0);
  // Released, all four finish with their output.
  std::ofstream(server.dir() / "go") << "go";
  for (int i = 0; i < 4; ++i)
    server.curl("-X POST '" + server.base() + "/files?scope_id=one-" + std::to_string(i) + "' -F file=@" +
                (server.dir() / "go").string());
  for (auto& holder : holders) EXPECT_EQ(json(holder.get()).at("stdout"), "released\n");
  EXPECT_EQ(gauge("sandboxd_executions_active"), 0);
}

}  // namespace

namespace {

TEST(Ops, PsListsRunningSandboxesAndStopStopsOneKeepingItsFiles) {
  const std::string admin = "admin-token-0123456789";
  ServerProcess server("auth:\n  adminToken: " + admin + "\n");
  std::string body = bash_body(server.dir(), "make", "echo kept > /mnt/user-data/outputs/f.txt");
  server.curl("-X POST " + server.base() + "/containers/ps-one/tools/bash_code_execution -d @" + body);
  server.curl("-X POST " + server.base() + "/containers/ps-two/tools/bash_code_execution -d @" + body,
              "secret-bob-x");
  const std::string cli = std::string(SANDBOXD_PATH) + " ";
  const std::string target = " --url " + server.url() + " --admin-token " + admin;
  int status = -1;
  std::string table = sh(cli + "ps" + target, &status);
  EXPECT_EQ(status, 0) << table;
  EXPECT_NE(table.find("CONTAINER"), std::string::npos) << table;
  std::regex row_one("ps-one +alice +[0-9]+ "), row_two("ps-two +bob +[0-9]+ ");
  EXPECT_TRUE(std::regex_search(table, row_one)) << table;
  EXPECT_TRUE(std::regex_search(table, row_two)) << table;

  // An owner's token is not an admin token; the admin token is not an owner's.
  EXPECT_EQ(server.status(server.url("/admin/sandboxes")), 401);
  EXPECT_EQ(server.status(server.base() + "/containers", admin), 401);
  sh(cli + "ps --url " + server.url() + " --admin-token wrong-token-123456", &status);
  EXPECT_EQ(status, 1);

  std::string said = sh(cli + "stop ps-one" + target, &status);
  EXPECT_EQ(status, 0) << said;
  EXPECT_NE(said.find("stopped ps-one (owner alice)"), std::string::npos) << said;
  EXPECT_EQ(server.curl_json(server.base() + "/containers/ps-one").at("state"), "stopped");
  table = sh(cli + "ps" + target);
  EXPECT_FALSE(std::regex_search(table, row_one)) << table;
  EXPECT_TRUE(std::regex_search(table, row_two)) << table;
  // Its files are kept.
  auto listing = server.curl_json("'" + server.base() + "/files?scope_id=ps-one'");
  EXPECT_EQ(listing.at("data").as_array().size(), 1u);
  sh(cli + "stop no-such" + target + " 2>/dev/null", &status);
  EXPECT_EQ(status, 1);

  // Without an admin token configured the endpoints are off.
  ServerProcess plain;
  EXPECT_EQ(plain.status(plain.url("/admin/sandboxes"), "anything-at-all-1234"), 403);
}

}  // namespace

namespace {

TEST(Ops, SighupAppliesNewLimitsToNewWorkAndABadFileChangesNothing) {
  ServerProcess server("codeInterpreter:\n  outputLimit: 1Ki\ncapacity:\n  maxConcurrentExecutions: 4\n");
  std::string body = bash_body(server.dir(), "big", "printf '%*s' 3000 '' | tr ' ' a");
  auto run = [&] {
    return std::string(
        server.curl_json("-X POST " + server.base() + "/containers/hup/tools/bash_code_execution -d @" + body)
            .at("stdout")
            .as_string());
  };
  auto limit_line = [&] {
    std::string text = sh("curl -sS " + server.url("/metrics"));
    auto at = text.find("\nsandboxd_executions_limit ");
    return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
  };
  EXPECT_TRUE(run().ends_with("...[truncated]"));
  EXPECT_EQ(limit_line(), "sandboxd_executions_limit 4");

  server.write_config("codeInterpreter:\n  outputLimit: 8Ki\ncapacity:\n  maxConcurrentExecutions: 3\n");
  EXPECT_NE(server.reload().find("configuration reloaded"), std::string::npos) << server.log();
  EXPECT_TRUE(run() == std::string(3000, 'a')) << "the new output cap applies to the next command";
  EXPECT_EQ(limit_line(), "sandboxd_executions_limit 3");

  // A bad file: nothing changes, and the log says why.
  server.write_config("codeInterpreter:\n  outputLimit: 1Ki\ncapacity:\n  maxConcurrentExecutions: -1\n");
  std::string said = server.reload();
  EXPECT_NE(said.find("not reloaded"), std::string::npos) << said;
  EXPECT_NE(said.find("capacity.maxConcurrentExecutions"), std::string::npos) << said;
  EXPECT_TRUE(run() == std::string(3000, 'a')) << "the output cap of the good file stays";
  EXPECT_EQ(limit_line(), "sandboxd_executions_limit 3");
  // What the running server is built on waits for a restart.
  server.write_config("server:\n  headerTimeoutSec: 3\ncodeInterpreter:\n  outputLimit: 8Ki\n");
  server.reload();
  EXPECT_NE(server.log().find("server.headerTimeoutSec changed"), std::string::npos) << server.log();
  EXPECT_EQ(server.status(server.url("/health")), 200);
}

}  // namespace

namespace {

TEST(Ops, JsonLogsAndTheAuditLogRecordWhoDidWhat) {
  ServerProcess server("logging:\n  format: json\n  auditMaxSize: 64Ki\n  auditFiles: 2\n");
  std::string body = bash_body(server.dir(), "exit7", "echo \"$((3+4))\"; exit 7");
  server.curl("-X POST " + server.base() + "/containers/audited/tools/bash_code_execution -d @" + body);
  server.curl("-X POST " + server.base() +
              "/containers/audited/tools/text_editor_code_execution -d "
              "'{\"command\":\"create\",\"path\":\"n.txt\",\"file_text\":\"x\"}'");
  std::ofstream(server.dir() / "up.txt") << "up";
  server.curl("-X POST '" + server.base() + "/files?scope_id=audited' -F file=@" +
              (server.dir() / "up.txt").string());
  server.curl(server.base() + "/containers/audited", "secret-bob-x");  // bob: a 404, audited as bob's

  // The server's log: every line after start-up is a JSON object (SIGTERM flushes it).
  server.stop(SIGTERM);
  bool saw_execution = false, saw_request = false;
  std::istringstream lines(server.log());
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("sandboxd:", 0) == 0) continue;  // the start-up lines on stdout
    boost::system::error_code ec;
    auto value = bj::parse(line, ec);
    ASSERT_FALSE(ec) << "not JSON: " << line;
    const auto& event = value.as_object();
    EXPECT_TRUE(event.contains("time") && event.contains("level")) << line;
    if (event.contains("event") && event.at("event") == "execution" && event.at("container") == "audited") {
      saw_execution = true;
      EXPECT_EQ(event.at("return_code"), 7);
      EXPECT_EQ(event.at("owner"), "alice");
      EXPECT_EQ(event.at("timed_out"), false);
      EXPECT_EQ(event.at("truncated"), false);
    }
    if (event.contains("event") && event.at("event") == "request" && event.at("route") == "files.upload")
      saw_request = event.at("status") == 200;
  }
  EXPECT_TRUE(saw_execution) << server.log();
  EXPECT_TRUE(saw_request) << server.log();

  // The audit log: who, what, when, in the data directory.
  std::string audit = read_file(server.data_dir() / "audit.log");
  std::vector<bj::object> records;
  std::istringstream audit_lines(audit);
  for (std::string line; std::getline(audit_lines, line);) records.push_back(json(line).as_object());
  auto find = [&](const std::string& event, const std::string& key,
                  const std::string& value) -> const bj::object* {
    for (const auto& r : records)
      if (r.at("event") == event.c_str() && r.contains(key) && r.at(key) == value.c_str()) return &r;
    return nullptr;
  };
  const auto* execution = find("execution", "container", "audited");
  ASSERT_NE(execution, nullptr) << audit;
  EXPECT_EQ(execution->at("command"), "echo \"$((3+4))\"; exit 7");
  EXPECT_EQ(execution->at("owner"), "alice");
  EXPECT_TRUE(execution->contains("time"));
  const auto* edit = find("editor", "path", "n.txt");
  ASSERT_NE(edit, nullptr) << audit;
  EXPECT_EQ(edit->at("result"), "text_editor_code_execution_create_result");
  ASSERT_NE(find("request", "route", "files.upload"), nullptr) << audit;
  const auto* denied = find("request", "owner", "bob");
  ASSERT_NE(denied, nullptr) << audit;
  EXPECT_EQ(denied->at("status"), 404);
}

TEST(Ops, TheAuditLogRotatesBySizeAndOnlyAppends) {
  ServerProcess server("logging:\n  auditMaxSize: 64Ki\n  auditFiles: 2\n");
  // Long commands: each execution's record holds the first 4 KiB of its command.
  std::string body = bash_body(server.dir(), "long", ": " + std::string(4000, 'x'));
  for (int i = 0; i < 40; ++i)
    server.curl("-X POST " + server.base() + "/containers/rot/tools/bash_code_execution -d @" + body);
  EXPECT_TRUE(fs::exists(server.data_dir() / "audit.1.log")) << "rotated past 64 KiB";
  EXPECT_LE(fs::file_size(server.data_dir() / "audit.log"), 64u << 10);
  EXPECT_FALSE(fs::exists(server.data_dir() / "audit.3.log")) << "two old files kept";
  // A restart appends: what was written stays, in the current file or (rotated) the next.
  const std::string before = read_file(server.data_dir() / "audit.log");
  ASSERT_FALSE(before.empty());
  server.restart();
  server.curl("-X POST " + server.base() + "/containers/rot/tools/bash_code_execution -d @" + body);
  const std::string now = read_file(server.data_dir() / "audit.log");
  EXPECT_TRUE((now.size() > before.size() && now.compare(0, before.size(), before) == 0) ||
              read_file(server.data_dir() / "audit.1.log") == before);
}

}  // namespace

namespace {

TEST(Ops, TheQuotaStopsTheLeastRecentlyUsedIdleSandboxThenAnswers503) {
  ServerProcess server(
      "opensandbox:\n  runtime:\n    resourceQuota:\n      enabled: true\n      pods: 2\n"
      "capacity:\n  capacityRetryAfterSec: 9\n");
  std::string mark = bash_body(server.dir(), "mark", "echo here > /mnt/user-data/outputs/mark.txt");
  auto exec = [&](const std::string& container, const std::string& body) {
    return server.curl("-i -X POST " + server.base() + "/containers/" + container +
                       "/tools/bash_code_execution -d @" + body);
  };
  auto state = [&](const std::string& container) {
    return std::string(server.curl_json(server.base() + "/containers/" + container).at("state").as_string());
  };
  EXPECT_NE(exec("q-a", mark).find("200 OK"), std::string::npos);
  // q-b's last use in a later second than q-a's (the order of last uses has seconds).
  const std::time_t a_used = std::time(nullptr);
  ASSERT_TRUE(eventually([&] { return std::time(nullptr) > a_used; }));
  EXPECT_NE(exec("q-b", mark).find("200 OK"), std::string::npos);
  // A third sandbox: q-a, the least recently used and idle, is stopped to make room.
  EXPECT_NE(exec("q-c", mark).find("200 OK"), std::string::npos);
  EXPECT_EQ(state("q-a"), "stopped");
  EXPECT_EQ(state("q-b"), "running");
  EXPECT_EQ(state("q-c"), "running");
  auto listing = server.curl_json("'" + server.base() + "/files?scope_id=q-a'");
  EXPECT_EQ(listing.at("data").as_array().size(), 1u) << "its files are kept";

  // Both running sandboxes busy: no room, 503 with Retry-After.
  std::string busy = bash_body(server.dir(), "busy", "sleep 3");
  auto b = std::async(std::launch::async, [&] { return exec("q-b", busy); });
  auto c = std::async(std::launch::async, [&] { return exec("q-c", busy); });
  ASSERT_TRUE(eventually([&] { return server.metric("sandboxd_executions_active") == 2; }));
  std::string refused = exec("q-d", mark);
  EXPECT_NE(refused.find("HTTP/1.1 503"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Retry-After: 9"), std::string::npos) << refused;
  EXPECT_NE(refused.find("overloaded_error"), std::string::npos) << refused;
  EXPECT_NE(b.get().find("200 OK"), std::string::npos);
  EXPECT_NE(c.get().find("200 OK"), std::string::npos);
  std::string text = sh("curl -sS " + server.url("/metrics"));
  EXPECT_NE(text.find("sandboxd_sandboxes_stopped_total{reason=\"quota\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sandboxd_executions_rejected_total{status=\"503\",reason=\"quota\"} 1\n"),
            std::string::npos);
  // Once one is idle again, q-d gets its room.
  EXPECT_NE(exec("q-d", mark).find("200 OK"), std::string::npos);
}

}  // namespace

namespace {

TEST(Ops, AfterACrashTheStartUpCheckMakesIndexAndDiskAgree) {
  ServerProcess server;
  for (const char* name : {"a.txt", "b.txt"}) {
    std::ofstream(server.dir() / name) << name;
    server.curl("-X POST '" + server.base() + "/files?scope_id=chk' -F file=@" +
                (server.dir() / name).string());
  }
  EXPECT_EQ(server.stop(SIGKILL), -SIGKILL);
  // What a crash and a careless hand can leave: a file gone behind the index's back, a
  // cut upload's temporary file, a folder no container owns.
  fs::path uploads;
  for (const auto& entry : fs::directory_iterator(server.data_dir() / "containers"))
    if (fs::exists(entry.path() / "uploads" / "a.txt")) uploads = entry.path() / "uploads";
  ASSERT_FALSE(uploads.empty());
  fs::remove(uploads / "a.txt");
  std::ofstream(uploads / ".sandboxd-tmp-cut") << "half an upload";
  fs::create_directories(server.data_dir() / "containers" / "stray");
  server.start();
  EXPECT_NE(server.log().find("start-up check: 1 container(s); 1 record(s) of vanished uploads dropped, "
                              "1 temporary file(s) removed, 1 problem(s) reported"),
            std::string::npos)
      << server.log();
  EXPECT_NE(server.log().find("stray belongs to no container"), std::string::npos);
  EXPECT_FALSE(fs::exists(uploads / ".sandboxd-tmp-cut"));
  auto listing = server.curl_json("'" + server.base() + "/files?scope_id=chk'");
  ASSERT_EQ(listing.at("data").as_array().size(), 1u);
  EXPECT_EQ(listing.at("data").as_array()[0].at("filename"), "b.txt");
  // b.txt is intact; a.txt's id now answers like any missing file.
  EXPECT_EQ(
      server.curl_json("'" + server.base() + "/files/L21udC91c2VyLWRhdGEvdXBsb2Fkcy9iLnR4dA?scope_id=chk'")
          .at("size_bytes"),
      5);
  EXPECT_EQ(
      server.status("'" + server.base() + "/files/L21udC91c2VyLWRhdGEvdXBsb2Fkcy9hLnR4dA?scope_id=chk'"),
      404);
}

}  // namespace
