// A container's memory moves with it between replicas (runtime.keepMemory on the gvisor
// tier, docs/isolation-tiers.md): two `sandboxd serve` replicas on real runsc, with
// storage.backend s3 on a real S3 server (s3rver) and the shared metadata in a real
// PostgreSQL. The holder of a container whose Python kernel has state is stopped with
// SIGTERM (as a rolling upgrade does): it checkpoints the sandbox, the flush takes the
// checkpoint to the bucket with the files, and the next call through the other replica
// finds the kernel's variables there. Skipped where runsc is not installed.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "cluster_client.h"
#include "cluster_harness.h"
#include "runtime/gvisor_launcher.h"
#include "s3_server.h"
#include "scripted_upstream.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

constexpr int kLeaseSeconds = 3;
constexpr int kFlushIntervalSec = 1;

class ClusterMemory : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (sandboxd::runtime::find_runsc().empty()) return;
    std::string pattern = (fs::temp_directory_path() / "sandboxd-cluster-memory-XXXXXX").string();
    root = mkdtemp(pattern.data());
    metadata = new SharedMetadata(sandboxd::store::db::Backend::kPostgres);
    s3 = new S3Server();
    upstream = new ScriptedUpstream();
    const std::string extra = s3->storage_yaml("mem/", kFlushIntervalSec) + "capacity:\n  retryAfterSec: 1\n";
    for (const char* id : {"replica-a", "replica-b"})
      replicas.push_back(new Replica(id, root, *metadata, upstream->base_url(), kLeaseSeconds, extra,
                                     "  isolation: gvisor\n  gvisorPlatform: ptrace\n"));
    for (auto* replica : replicas) replica->start();
  }
  static void TearDownTestSuite() {
    for (auto* replica : replicas) delete replica;
    replicas.clear();
    delete upstream;
    delete s3;
    delete metadata;
    std::error_code ec;
    if (!root.empty()) fs::remove_all(root, ec);
  }
  void SetUp() override {
    if (replicas.empty())
      GTEST_SKIP()
          << "runsc is not installed (Debian: apt-get install runsc): the gvisor tier cannot run here";
  }
  void TearDown() override {
    if (HasFailure())
      for (auto* replica : replicas) {
        const std::string log = replica->log();
        std::cerr << "---- " << replica->id() << " log tail:\n"
                  << (log.size() > 30000 ? log.substr(log.size() - 30000) : log);
      }
  }

  static Answer python(const Replica& through, const std::string& container, const std::string& code) {
    const fs::path body = root / ("cell-" + std::to_string(++counter) + ".json");
    std::ofstream(body) << bj::serialize(bj::object{{"code", code}});
    Answer answer = curl_as_alice(root, counter,
                                  "-X POST '" + through.url("/api/gpt/v1/containers/" + container) +
                                      "/tools/code_execution' --data-binary @" + body.string());
    fs::remove(body);
    return answer;
  }
  static std::string stdout_of(const Answer& answer) {
    if (answer.status != 200) return "<" + answer.describe() + ">";
    auto value = json(answer.body);
    auto* out = value.as_object().if_contains("stdout");
    return out && out->is_string() ? std::string(out->as_string()) : "<no stdout>";
  }

  static inline fs::path root;
  static inline SharedMetadata* metadata = nullptr;
  static inline S3Server* s3 = nullptr;
  static inline ScriptedUpstream* upstream = nullptr;
  static inline std::vector<Replica*> replicas;
  static inline std::atomic<int> counter{0};
};

TEST_F(ClusterMemory, TheHoldersSigtermMovesThePythonKernelsStateToTheNextReplica) {
  Replica& a = *replicas[0];
  Replica& b = *replicas[1];
  const std::string container = "mem-move";
  ASSERT_EQ(stdout_of(python(a, container, "moved = 41\nprint('set')")), "set\n");
  ASSERT_EQ(metadata->lease_of("alice", container)->holder, "replica-a");

  // A rolling upgrade's stop: checkpointed, flushed with the files, the lease let go.
  EXPECT_EQ(a.stop(SIGTERM), 0);
  EXPECT_NE(a.log().find("sandbox_checkpointed"), std::string::npos) << "the holder checkpointed at its stop";

  Answer answer;
  ASSERT_TRUE(eventually(
      [&] {
        answer = python(b, container, "print(moved + 1)");
        return answer.status != 503;
      },
      std::chrono::seconds(kLeaseSeconds + 30)))
      << answer.describe();
  EXPECT_EQ(stdout_of(answer), "42\n");
  EXPECT_EQ(metadata->lease_of("alice", container)->holder, "replica-b");
  EXPECT_NE(b.log().find("sandbox_restored"), std::string::npos);
  a.start();
}

}  // namespace
