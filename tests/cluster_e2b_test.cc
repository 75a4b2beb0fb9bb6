// E2B's API in cluster mode, through E2B's own SDK (npm `e2b`, unmodified, run by node
// from tests/e2b/cluster.mjs) against real parts the test starts: two `sandboxd serve`
// replicas (separate processes and data directories) on one real PostgreSQL
// (tests/cluster_harness.h) and one bucket of a real S3 server (s3rver,
// tests/s3_server.h). A sandbox made through replica A is used through replica B
// (commands, streamed output, a background process, files, list, get, timeout, kill,
// pause and connect), another key finds it on neither, a timeout set through B is
// enforced by A (its holder); then A is killed (SIGKILL) and B takes the sandbox over,
// its files from the bucket, still usable through the SDK, and ends at its timeout a
// sandbox A held. Snapshots and forks (a second test): a snapshot taken through A is
// made into a sandbox, listed and deleted through B, a fork through B of A's sandbox is
// taken on A, the snapshot's objects are in the bucket (the volume's data extents, not its
// apparent size) and outlive A (SIGTERM), and its deletion removes them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <sstream>

#include "base/unique_fd.h"
#include "store/s3_client.h"

#include "cluster_harness.h"
#include "eventually.h"
#include "s3_server.h"
#include "scripted_upstream.h"

using namespace sandboxd::testing;

namespace {

constexpr int kLeaseSeconds = 3;
constexpr int kFlushIntervalSec = 1;

// Runs one phase of tests/e2b/cluster.mjs; its exit status, its output in `output`.
int run_phase(const std::string& phase, const fs::path& state, const Replica& a, const Replica& b,
              std::string& output) {
  std::ostringstream command;
  command << "cd '" << SANDBOXD_E2B_TEST_DIR << "' && REPLICA_A='" << a.url() << "' REPLICA_B='" << b.url()
          << "' ALICE_KEY='" << Replica::kToken << "' BOB_KEY='" << Replica::kBobToken << "' '"
          << SANDBOXD_NODE_PATH << "' cluster.mjs " << phase << " '" << state.string() << "' 2>&1";
  int status = -1;
  output = sh(command.str(), &status);
  return status;
}

// The lines of `log` that name both `event` and `sandbox`.
size_t events_of(const std::string& log, const std::string& event, const std::string& sandbox) {
  size_t count = 0;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);)
    if (line.find(event) != std::string::npos && line.find(sandbox) != std::string::npos) ++count;
  return count;
}

std::string id_in(const std::string& state, const std::string& key) {
  return std::string(json(state).at(key).as_string());
}

class ClusterE2b : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-cluster-e2b-XXXXXX").string();
    root_ = mkdtemp(pattern.data());
    metadata_ = std::make_unique<SharedMetadata>(sandboxd::store::db::Backend::kPostgres);
    s3_ = std::make_unique<S3Server>();
    upstream_ = std::make_unique<ScriptedUpstream>();
    const std::string extra =
        s3_->storage_yaml("sbx/", kFlushIntervalSec) + "capacity:\n  retryAfterSec: 1\n";
    for (const char* id : {"replica-a", "replica-b"})
      replicas_.push_back(std::make_unique<Replica>(id, root_, *metadata_, upstream_->base_url(),
                                                    kLeaseSeconds, extra, runtime_yaml()));
    for (auto& replica : replicas_) replica->start();
  }
  void TearDown() override {
    if (HasFailure())
      for (const auto& replica : replicas_) replica->print_log_tail();
    replicas_.clear();
    upstream_.reset();
    s3_.reset();
    metadata_.reset();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // Lines of the replicas' `runtime:` section.
  virtual std::string runtime_yaml() const { return ""; }
  Replica& a() { return *replicas_[0]; }
  Replica& b() { return *replicas_[1]; }

  fs::path root_;
  std::unique_ptr<SharedMetadata> metadata_;
  std::unique_ptr<S3Server> s3_;
  std::unique_ptr<ScriptedUpstream> upstream_;
  std::vector<std::unique_ptr<Replica>> replicas_;
};

TEST_F(ClusterE2b, TheSdkThroughEitherReplicaAndAfterItsHolderDies) {
  const fs::path state = root_ / "state.json";
  std::string output;
  ASSERT_EQ(run_phase("before", state, a(), b(), output), 0) << output;
  ASSERT_NE(output.find("phase before: passed"), std::string::npos) << output;
  const std::string ids = read_file(state);
  const std::string main = id_in(ids, "main"), orphan = id_in(ids, "orphan"), timed = id_in(ids, "timed");

  // The sandbox made through A is held by A; the one whose timeout was set through B was
  // ended by A, its holder, not by B.
  auto lease = metadata_->lease_of("alice", main);
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->holder, "replica-a");
  EXPECT_EQ(events_of(a().log(), "e2b_sandbox_timeout", timed), 1u) << a().log();
  EXPECT_EQ(events_of(b().log(), "e2b_sandbox_timeout", timed), 0u);
  // The records are the database's: nothing under a replica's data directory.
  EXPECT_FALSE(fs::exists(a().dir() / "data" / "e2b"));
  EXPECT_FALSE(fs::exists(b().dir() / "data" / "e2b"));

  // The upload under outputs/ went to the bucket with its body: its manifest row was
  // written before the SDK's write returned (no flush awaited here), naming an object.
  {
    const auto rows = metadata_->manifest_of("alice", main);
    auto report = rows.find("/mnt/user-data/outputs/report.txt");
    ASSERT_NE(report, rows.end()) << "an E2B upload under outputs/ did not reach the bucket with its answer";
    EXPECT_EQ(report->second.size, 17u);  // "report through B\n"
    EXPECT_FALSE(report->second.object_key.empty());
  }
  // The file written through B is in the bucket's manifest before A goes.
  ASSERT_TRUE(eventually([&] {
    for (const auto& [path, row] : metadata_->manifest_of("alice", main))
      if (path.find("notes.txt") != std::string::npos) return true;
    return false;
  })) << "the sandbox's files never reached the bucket";
  ASSERT_EQ(a().stop(SIGKILL), -SIGKILL);

  ASSERT_EQ(run_phase("after", state, a(), b(), output), 0) << output;
  ASSERT_NE(output.find("phase after: passed"), std::string::npos) << output;
  EXPECT_NE(b().log().find("bucket: restoring container " + main), std::string::npos)
      << "B had no copy of the sandbox's files: it restored them from the bucket";
  EXPECT_EQ(events_of(b().log(), "e2b_sandbox_timeout", orphan), 1u) << "B ended A's sandbox at its timeout";
  EXPECT_FALSE(metadata_->lease_of("alice", main)) << "the killed sandbox's container is gone";
}

// The snapshots' objects in the bucket.
std::vector<sandboxd::store::S3Object> snapshot_objects(const S3Server& s3) {
  sandboxd::store::S3Client bucket(s3.client_settings());
  auto listed = bucket.list_objects("sbx/snapshots/");
  if (!listed) throw std::runtime_error("listing the bucket: " + listed.error().describe());
  return *listed;
}

bool no_entries(const fs::path& folder) {
  std::error_code ec;
  return !fs::exists(folder, ec) || fs::is_empty(folder, ec);
}

TEST_F(ClusterE2b, SnapshotsLiveInTheBucketAndOutliveTheReplicaThatTookThem) {
  const fs::path state = root_ / "snapshots.json";
  std::string output;
  ASSERT_EQ(run_phase("snapshots-before", state, a(), b(), output), 0) << output;
  ASSERT_NE(output.find("phase snapshots-before: passed"), std::string::npos) << output;
  const auto ids = json(read_file(state)).as_object();
  const std::string source = std::string(ids.at("source").as_string());
  const std::string copy = std::string(ids.at("copy").as_string());

  // The snapshot was taken on A (the source's holder); the sandbox made from it through
  // B is B's, its state fetched from the bucket; the forks asked of B were made on A,
  // where their source is.
  auto source_lease = metadata_->lease_of("alice", source);
  auto copy_lease = metadata_->lease_of("alice", copy);
  ASSERT_TRUE(source_lease && copy_lease);
  EXPECT_EQ(source_lease->holder, "replica-a");
  EXPECT_EQ(copy_lease->holder, "replica-b");
  ASSERT_EQ(ids.at("forks").as_array().size(), 2u);
  for (const auto& fork : ids.at("forks").as_array()) {
    auto lease = metadata_->lease_of("alice", std::string(fork.as_string()));
    ASSERT_TRUE(lease);
    EXPECT_EQ(lease->holder, "replica-a");
  }

  // In the bucket: the volume's list of extents and their data, under the snapshot's
  // prefix; the data far smaller than the image's apparent size (the volume's quota);
  // the one upload's bytes and the list of the uploads.
  const auto objects = snapshot_objects(*s3_);
  const sandboxd::store::S3Object* extents = nullptr;
  const sandboxd::store::S3Object* data = nullptr;
  const sandboxd::store::S3Object* upload = nullptr;
  const sandboxd::store::S3Object* uploads_list = nullptr;
  for (const auto& object : objects) {
    if (object.key.ends_with("/volume.extents")) extents = &object;
    if (object.key.ends_with("/volume.data")) data = &object;
    if (object.key.ends_with("/uploads/0")) upload = &object;
    if (object.key.ends_with("/uploads.list")) uploads_list = &object;
  }
  ASSERT_EQ(objects.size(), 4u) << "a native snapshot is its volume's two objects and its uploads' two";
  ASSERT_TRUE(extents && data && upload && uploads_list);
  EXPECT_EQ(upload->size, std::string("uploaded notes").size());
  {
    const fs::path list = root_ / "extents.txt";
    sandboxd::UniqueFd file(::open(list.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600));
    ASSERT_TRUE(sandboxd::store::S3Client(s3_->client_settings()).get_object(extents->key, file.get()));
    std::istringstream in(read_file(list));
    std::string header;
    uint64_t apparent = 0;
    ASSERT_TRUE(std::getline(in, header) && in >> apparent);
    EXPECT_EQ(header, "sandboxd-extents 1");
    EXPECT_GT(data->size, 0u);
    EXPECT_LT(data->size * 4, apparent) << "the volume went up whole, holes included";
  }
  // Nothing of the snapshot stays on either replica's disk (the folders of the moment
  // went): the bucket holds the one copy.
  EXPECT_TRUE(no_entries(a().dir() / "data" / "snapshots"));
  EXPECT_TRUE(no_entries(b().dir() / "data" / "snapshots"));

  // A goes; its snapshot stays the cluster's. Its forks' files reached the bucket too.
  ASSERT_EQ(a().stop(SIGTERM), 0) << a().log();
  ASSERT_EQ(run_phase("snapshots-after", state, a(), b(), output), 0) << output;
  ASSERT_NE(output.find("phase snapshots-after: passed"), std::string::npos) << output;
  EXPECT_TRUE(snapshot_objects(*s3_).empty()) << "the deleted snapshot's objects stayed in the bucket";
  EXPECT_TRUE(no_entries(b().dir() / "data" / "snapshots"));
}

// The gvisor tier: the replicas run their sandboxes under runsc (ptrace, as
// cluster_memory_test), so a snapshot holds the sandbox's memory.
class ClusterE2bGvisor : public ClusterE2b {
 protected:
  void SetUp() override {
    if (sh("command -v runsc || true").empty())
      GTEST_SKIP()
          << "runsc is not installed (Debian: apt-get install runsc): the gvisor tier cannot run here";
    ClusterE2b::SetUp();
  }
  std::string runtime_yaml() const override { return "  isolation: gvisor\n  gvisorPlatform: ptrace\n"; }
};

TEST_F(ClusterE2bGvisor, ASnapshotCarriesTheSandboxesMemoryThroughTheBucket) {
  const fs::path state = root_ / "memory.json";
  std::string output;
  ASSERT_EQ(run_phase("snapshots-memory", state, a(), b(), output), 0) << output;
  ASSERT_NE(output.find("phase snapshots-memory: passed"), std::string::npos) << output;
  const auto ids = json(read_file(state)).as_object();
  auto copy_lease = metadata_->lease_of("alice", std::string(ids.at("copy").as_string()));
  ASSERT_TRUE(copy_lease);
  EXPECT_EQ(copy_lease->holder, "replica-b") << "made through B, its memory fetched from the bucket";
  // The checkpoint's files beside the volume's objects, its list of kernels among them.
  size_t memory_files = 0;
  bool kernels = false;
  for (const auto& object : snapshot_objects(*s3_)) {
    if (object.key.find("/memory/") == std::string::npos) continue;
    ++memory_files;
    if (object.key.ends_with("/memory/kernels")) kernels = true;
  }
  EXPECT_GT(memory_files, 1u);
  EXPECT_TRUE(kernels) << "the checkpoint's list of kernels did not reach the bucket";
}

}  // namespace
