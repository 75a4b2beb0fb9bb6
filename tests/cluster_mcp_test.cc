// MCP 2026-07-28 in cluster mode, end to end: two `sandboxd serve` replicas (separate
// processes, data directories and ports) on one shared metadata file
// (tests/cluster_harness.h). A stateless request carries everything it needs, so one
// container's requests alternate between the replicas with no session affinity: the
// replica that does not hold the container relays a tools/call or resources/read to the
// one that does, as it relays the HTTP API's calls.
#include <gtest/gtest.h>

#include <atomic>

#include "eventually.h"

#include "cluster_harness.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

constexpr int kLeaseSeconds = 3;
constexpr const char* kVersion = "2026-07-28";

class ClusterMcp : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-cluster-mcp-XXXXXX").string();
    root_ = mkdtemp(pattern.data());
    metadata_ = std::make_unique<SharedMetadata>(sandboxd::store::db::Backend::kSqlite);
    // No model is called: /mcp runs the tools itself.
    for (const char* id : {"replica-a", "replica-b"})
      replicas_.push_back(
          std::make_unique<Replica>(id, root_, *metadata_, "http://127.0.0.1:9", kLeaseSeconds, ""));
    for (auto& replica : replicas_) replica->start();
  }
  void TearDown() override {
    if (HasFailure())
      for (const auto& replica : replicas_) replica->print_log_tail(20000);
    replicas_.clear();
    metadata_.reset();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  Replica& a() { return *replicas_[0]; }
  Replica& b() { return *replicas_[1]; }

  // One 2026-07-28 request to `replica`, its headers mirroring the body; the parsed
  // answer and its status in `status`.
  // `tasks`: the client takes tasks (the Tasks extension in its capabilities).
  bj::value rpc(Replica& replica, const std::string& method, bj::object params, int* status = nullptr,
                bool tasks = false) {
    bj::object capabilities;
    if (tasks) capabilities["extensions"] = bj::object{{"io.modelcontextprotocol/tasks", bj::object{}}};
    params["_meta"] =
        bj::object{{"io.modelcontextprotocol/protocolVersion", kVersion},
                   {"io.modelcontextprotocol/clientInfo", {{"name", "cluster"}, {"version", "0"}}},
                   {"io.modelcontextprotocol/clientCapabilities", capabilities}};
    std::string name;
    if (auto* n = params.if_contains("name")) name = std::string(n->as_string());
    if (auto* u = params.if_contains("uri")) name = std::string(u->as_string());
    if (auto* t = params.if_contains("taskId")) name = std::string(t->as_string());
    const fs::path body = root_ / ("body-" + std::to_string(++counter_));
    std::ofstream(body) << bj::serialize(
        bj::object{{"jsonrpc", "2.0"}, {"id", counter_.load()}, {"method", method}, {"params", params}});
    const fs::path out = root_ / ("out-" + std::to_string(counter_.load()));
    std::string args =
        "curl -s -o '" + out.string() + "' -w '%{http_code}' -H 'Authorization: Bearer " + Replica::kToken +
        "' -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' "
        "-H 'MCP-Protocol-Version: " +
        kVersion + "' -H 'Mcp-Method: " + method + "'";
    if (!name.empty()) args += " -H 'Mcp-Name: " + name + "'";
    args += " --data-binary @'" + body.string() + "' '" + replica.url("/mcp") + "'";
    const int code = std::atoi(sh(args).c_str());
    if (status) *status = code;
    const std::string text = read_file(out);
    return text.empty() ? bj::value() : json(text);
  }

  // bash_code_execution in `container` through `replica`: its structuredContent.
  bj::object bash(Replica& replica, const std::string& container, const std::string& command) {
    int status = 0;
    auto answer = rpc(replica, "tools/call",
                      bj::object{{"name", "bash_code_execution"},
                                 {"arguments", {{"container", container}, {"command", command}}}},
                      &status);
    EXPECT_EQ(status, 200) << bj::serialize(answer);
    if (!answer.is_object() || !answer.as_object().contains("result")) {
      ADD_FAILURE() << bj::serialize(answer);
      return {};
    }
    return answer.at("result").at("structuredContent").as_object();
  }

  // A bash call's stdout.
  std::string out(Replica& replica, const std::string& container, const std::string& command) {
    auto result = bash(replica, container, command);
    auto* stdout_value = result.if_contains("stdout");
    return stdout_value && stdout_value->is_string() ? std::string(stdout_value->as_string()) : "(none)";
  }

  // A bash call made a task through `replica`: the CreateTaskResult.
  bj::object start_task(Replica& replica, const std::string& container, const std::string& command) {
    int status = 0;
    auto answer = rpc(replica, "tools/call",
                      bj::object{{"name", "bash_code_execution"},
                                 {"arguments", {{"container", container}, {"command", command}}}},
                      &status, /*tasks=*/true);
    EXPECT_EQ(status, 200) << bj::serialize(answer);
    if (!answer.is_object() || !answer.as_object().contains("result")) {
      ADD_FAILURE() << bj::serialize(answer);
      return {};
    }
    return answer.at("result").as_object();
  }
  // tasks/get (or another tasks/ method) through `replica`: its result, or {} after a failure.
  bj::object task(Replica& replica, const std::string& task_id, const std::string& method = "tasks/get") {
    int status = 0;
    auto answer = rpc(replica, method, bj::object{{"taskId", task_id}}, &status, /*tasks=*/true);
    EXPECT_EQ(status, 200) << bj::serialize(answer);
    if (!answer.is_object() || !answer.as_object().contains("result")) {
      ADD_FAILURE() << bj::serialize(answer);
      return {};
    }
    return answer.at("result").as_object();
  }
  static std::string field(const bj::object& object, const char* name) {
    auto* value = object.if_contains(name);
    return value && value->is_string() ? std::string(value->as_string()) : std::string();
  }

  fs::path root_;
  std::unique_ptr<SharedMetadata> metadata_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::atomic<int> counter_{0};
};

TEST_F(ClusterMcp, StatelessRequestsForOneContainerWorkThroughEitherReplica) {
  // Made through A: A holds it.
  EXPECT_EQ(out(a(), "shared", "echo 0 > /home/agent/workspace/count; echo made"), "made\n");
  auto lease = metadata_->lease_of("alice", "shared");
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->holder, "replica-a");

  // Alternating between the replicas, each request sees what the one before it did:
  // one container, one sandbox (B relays to A), no session anywhere.
  for (int i = 1; i <= 6; ++i) {
    Replica& replica = i % 2 ? b() : a();
    EXPECT_EQ(out(replica, "shared", "n=$(( $(cat count) + 1 )); echo $n > count; echo $n"),
              std::to_string(i) + "\n")
        << replica.id();
  }
  EXPECT_EQ(metadata_->lease_of("alice", "shared")->holder, "replica-a");

  // An output written through B is read as a resource through A, and the other way round.
  bash(b(), "shared", "echo from-b > /mnt/user-data/outputs/b.txt");
  int status = 0;
  auto read =
      rpc(a(), "resources/read",
          bj::object{{"uri", "sandboxd://containers/shared/files/mnt/user-data/outputs/b.txt"}}, &status);
  ASSERT_EQ(status, 200) << bj::serialize(read);
  EXPECT_EQ(bj::value_to<std::string>(read.at("result").at("contents").at(0).at("text")), "from-b\n");
  read = rpc(b(), "resources/read",
             bj::object{{"uri", "sandboxd://containers/shared/files/mnt/user-data/outputs/b.txt"}}, &status);
  ASSERT_EQ(status, 200) << bj::serialize(read);
  EXPECT_EQ(bj::value_to<std::string>(read.at("result").at("contents").at(0).at("text")), "from-b\n");

  // A container made through B is B's, and A relays to it.
  EXPECT_EQ(out(b(), "second", "echo b-made"), "b-made\n");
  EXPECT_EQ(metadata_->lease_of("alice", "second")->holder, "replica-b");
  EXPECT_EQ(out(a(), "second", "echo via-a"), "via-a\n");

  // What needs no container is answered wherever it lands.
  for (Replica* replica : {&a(), &b()}) {
    auto discovered = rpc(*replica, "server/discover", bj::object{}, &status);
    EXPECT_EQ(status, 200);
    EXPECT_EQ(bj::value_to<std::string>(discovered.at("result").at("supportedVersions").at(0)), kVersion);
  }
}

TEST_F(ClusterMcp, ATaskStartedThroughOneReplicaIsReadAndCancelledThroughTheOther) {
  EXPECT_EQ(out(a(), "tasked", "echo made"), "made\n");  // A holds the container
  ASSERT_EQ(metadata_->lease_of("alice", "tasked")->holder, "replica-a");

  // Started through B, which relays it to A: the task runs and is kept there, and its id
  // names the container so that either replica finds it.
  auto started =
      start_task(b(), "tasked", "echo begun; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo ended");
  ASSERT_EQ(field(started, "resultType"), "task") << bj::serialize(started);
  EXPECT_EQ(field(started, "status"), "working");
  const std::string id = field(started, "taskId");
  ASSERT_TRUE(id.ends_with(".tasked")) << id;

  // Its output shows through A and through B while it runs.
  for (Replica* replica : {&a(), &b()})
    EXPECT_TRUE(eventually([&] {
      return field(task(*replica, id), "statusMessage").find("begun") != std::string::npos;
    })) << replica->id();
  EXPECT_EQ(field(task(b(), id), "status"), "working");
  EXPECT_EQ(out(b(), "tasked", "touch /tmp/go; echo go"), "go\n");
  bj::object ended;
  ASSERT_TRUE(eventually([&] {
    ended = task(b(), id);
    return field(ended, "status") == "completed";
  })) << bj::serialize(ended);
  EXPECT_EQ(bj::serialize(ended.at("result").at("structuredContent").at("stdout")), "\"begun\\nended\\n\"");
  EXPECT_EQ(bj::serialize(task(a(), id).at("result")), bj::serialize(ended.at("result")));

  // Started through A, cancelled through B: its command is killed on A.
  const std::string count_sleeps =
      "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '[s]leep 301'";
  auto second = start_task(a(), "tasked", "sleep 301; echo never");
  const std::string second_id = field(second, "taskId");
  ASSERT_FALSE(second_id.empty());
  EXPECT_TRUE(eventually([&] { return out(b(), "tasked", count_sleeps) != "0\n"; }));  // it runs
  EXPECT_EQ(field(task(b(), second_id, "tasks/cancel"), "resultType"), "complete");
  EXPECT_EQ(field(task(a(), second_id), "status"), "cancelled");
  EXPECT_TRUE(eventually([&] { return out(a(), "tasked", count_sleeps) == "0\n"; }));
  EXPECT_EQ(field(task(b(), second_id), "status"), "cancelled");

  // An id that names the container but no task: not found, wherever it is asked.
  int status = 0;
  auto unknown =
      rpc(b(), "tasks/get", bj::object{{"taskId", "mcpt_" + std::string(32, '0') + ".tasked"}}, &status,
          /*tasks=*/true);
  EXPECT_EQ(bj::value_to<int64_t>(unknown.at("error").at("code")), -32602) << bj::serialize(unknown);
}

}  // namespace
