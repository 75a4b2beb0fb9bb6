// Cluster durability with every real part at once: three `sandboxd serve` replicas (separate
// processes and data directories, fenced leases, short leaseSeconds) with
// storage.backend s3 on one bucket of a real S3 server (s3rver, tests/s3_server.h), the
// shared metadata in a real PostgreSQL (tests/cluster_harness.h: SharedMetadata, on
// tests/postgres_harness.h), and nginx in front, all
// started by the test. Files are compared by checksum, never by eye:
// - bytes uploaded through one replica, used by code through a second and downloaded
//   through the third are the same, and the bucket holds them;
// - a holder killed outright: another replica serves the container within the lease,
//   with every acknowledged upload and the workspace/outputs older than the flush
//   interval restored from the bucket;
// - a holder paused past its lease: the new holder's writes stay, the old one's late
//   upload and flush meet the fence;
// - the S3 server away: uploads are 503 with Retry-After, a stop keeps the local copy,
//   the flush completes when it is back;
// - a rolling restart under a light load loses nothing acknowledged.
#include <gtest/gtest.h>

#include <openssl/evp.h>

#include <atomic>
#include <mutex>
#include <random>
#include <set>

#include "base/hex.h"
#include "cluster_client.h"
#include "cluster_harness.h"
#include "s3_server.h"
#include "scripted_upstream.h"
#include "store/s3_client.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

constexpr int kLeaseSeconds = 3;
constexpr int kFlushIntervalSec = 1;
const std::string kFiles = "/api/gpt/v1/files";

class ClusterDurability : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // nginx comes from scripts/setup.sh: its absence is a failure, not a skip.
    ASSERT_TRUE(fs::exists("/usr/sbin/nginx")) << "nginx is not installed (scripts/setup.sh installs it)";
    std::string pattern = (fs::temp_directory_path() / "sandboxd-durability-XXXXXX").string();
    root = mkdtemp(pattern.data());
    metadata = new SharedMetadata(sandboxd::store::db::Backend::kPostgres);
    s3 = new S3Server();
    upstream = new ScriptedUpstream();
    const std::string extra = s3->storage_yaml("sbx/", kFlushIntervalSec) + "capacity:\n  retryAfterSec: 1\n";
    for (const char* id : {"replica-a", "replica-b", "replica-c"})
      replicas.push_back(new Replica(id, root, *metadata, upstream->base_url(), kLeaseSeconds, extra));
    for (auto* replica : replicas) replica->start();
    nginx = new Nginx(root / "nginx", {replicas[0]->port(), replicas[1]->port(), replicas[2]->port()});
    bucket = new sandboxd::store::S3Client(s3->client_settings());
  }
  static void TearDownTestSuite() {
    delete nginx;
    for (auto* replica : replicas) delete replica;
    replicas.clear();
    delete bucket;
    delete upstream;
    // Every request of every replica was signed as S3 expects (tests/s3/sigv4_verifier.js).
    if (s3) {
      EXPECT_EQ(s3->refused_requests(), 0u) << s3->refusals();
    }
    delete s3;
    delete metadata;
    std::error_code ec;
    if (!root.empty()) fs::remove_all(root, ec);
  }
  void SetUp() override {
    ASSERT_NE(nginx, nullptr) << "the cluster did not start (see the suite set-up)";
    work = root / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(work);
  }
  void TearDown() override {
    if (HasFailure())
      for (auto* replica : replicas)
        std::cerr << "---- " << replica->id() << " log tail:\n" << tail(replica->log());
  }
  static std::string tail(const std::string& text) {
    return text.size() > 40000 ? text.substr(text.size() - 40000) : text;
  }

  static Replica& a() { return *replicas[0]; }
  static Replica& b() { return *replicas[1]; }
  static Replica& c() { return *replicas[2]; }

  // curl with alice's token: status, headers and body.
  static Answer http(const std::string& args) { return curl_as_alice(root, counter, args); }
  // PUT `data` as the upload `name` of `container` through `base`.
  static Answer put(const std::string& base, const std::string& container, const std::string& name,
                    const std::string& data) {
    return put_as_alice(root, counter, base, container, name, data);
  }
  static Answer download(const std::string& base, const std::string& container, const std::string& path) {
    return http("'" + base + kFiles + "/" + file_id(path) + "/content?scope_id=" + container + "'");
  }
  static Answer bash_raw(const std::string& base, const std::string& container, const std::string& command) {
    const fs::path body = root / ("cmd-" + std::to_string(++counter) + ".json");
    std::ofstream(body) << bj::serialize(bj::object{{"command", command}});
    Answer answer = http("-X POST '" + base + "/api/gpt/v1/containers/" + container +
                         "/tools/bash_code_execution' --data-binary @" + body.string());
    fs::remove(body);
    return answer;
  }
  static bj::object bash(const std::string& base, const std::string& container, const std::string& command) {
    Answer answer = bash_raw(base, container, command);
    EXPECT_EQ(answer.status, 200) << answer.describe();
    if (answer.status != 200) return {};
    return json(answer.body).as_object();
  }
  static std::string stdout_of(const bj::object& result) {
    auto* out = result.if_contains("stdout");
    return out && out->is_string() ? std::string(out->as_string()) : std::string("<no stdout>");
  }
  // The container's files through `base`: filename -> file object.
  // Every file of the container, page by page (a listing answers at most 100 at once).
  static std::map<std::string, bj::object> listing_of(const std::string& base, const std::string& container) {
    std::map<std::string, bj::object> out;
    std::string after;
    for (int page = 0; page < 1000; ++page) {
      Answer answer = http("'" + base + kFiles + "?scope_id=" + container + "&limit=100" +
                           (after.empty() ? "" : "&after_id=" + after) + "'");
      EXPECT_EQ(answer.status, 200) << answer.describe();
      if (answer.status != 200) return out;
      const auto listing = json(answer.body);  // alive through the loop
      for (const auto& file : listing.at("data").as_array())
        out[std::string(file.at("filename").as_string())] = file.as_object();
      if (!listing.at("has_more").as_bool() || listing.at("last_id").is_null()) return out;
      after = std::string(listing.at("last_id").as_string());
    }
    ADD_FAILURE() << "the listing of " << container << " never ended";
    return out;
  }
  // The MD5 of every object under the prefix, each read back from the bucket.
  static std::multiset<std::string> bucket_md5s() { return object_md5s(*bucket, "sbx/objects/"); }
  static bool bucket_has(const std::vector<std::string>& md5s) {
    auto present = bucket_md5s();
    for (const auto& md5 : md5s)
      if (!present.count(md5)) return false;
    return true;
  }
  static std::optional<sandboxd::store::Lease> lease_of(const std::string& container) {
    return metadata->lease_of("alice", container);
  }
  static double metric(const Replica& replica, const std::string& sample) {
    return metric_sample(replica.url("/metrics"), sample);
  }
  static Replica* by_id(const std::string& id) {
    for (auto* replica : replicas)
      if (replica->id() == id) return replica;
    return nullptr;
  }

  static inline fs::path root;
  static inline SharedMetadata* metadata = nullptr;
  static inline S3Server* s3 = nullptr;
  static inline ScriptedUpstream* upstream = nullptr;
  static inline std::vector<Replica*> replicas;
  static inline Nginx* nginx = nullptr;
  static inline sandboxd::store::S3Client* bucket = nullptr;
  static inline std::atomic<int> counter{0};
  fs::path work;
};

TEST_F(ClusterDurability, UploadThroughARunThroughBDownloadThroughCAndTheBucketHoldsIt) {
  const std::string container = "dur-bytes";
  const std::string original = random_bytes((2 << 20) + 123);
  Answer uploaded = put(a().url(), container, "data.bin", original);
  ASSERT_EQ(uploaded.status, 200) << uploaded.describe();
  EXPECT_EQ(json(uploaded.body).at("etag").as_string(), md5_hex(original));
  ASSERT_EQ(lease_of(container)->holder, "replica-a");
  // Through B (relayed to A): the code reads the upload and writes an output from it.
  auto ran = bash(b().url(), container,
                  "md5sum < /mnt/user-data/uploads/data.bin | cut -d' ' -f1; "
                  "cp /mnt/user-data/uploads/data.bin /mnt/user-data/outputs/copy.bin && "
                  "printf derived > /mnt/user-data/outputs/note.txt");
  EXPECT_EQ(stdout_of(ran), md5_hex(original) + "\n");
  // Through C: the same bytes, listed with the same etag.
  auto listed = listing_of(c().url(), container);
  ASSERT_TRUE(listed.count("copy.bin")) << "listed through C";
  EXPECT_EQ(listed["copy.bin"].at("etag").as_string(), md5_hex(original));
  Answer copy = download(c().url(), container, "/mnt/user-data/outputs/copy.bin");
  ASSERT_EQ(copy.status, 200);
  EXPECT_EQ(md5_hex(copy.body), md5_hex(original));
  EXPECT_EQ(stdout_of(bash(c().url(), container, "md5sum < /mnt/user-data/uploads/data.bin | cut -d' ' -f1")),
            md5_hex(original) + "\n");
  // The bucket: the upload at once, the outputs after the flush interval.
  EXPECT_TRUE(bucket_has({md5_hex(original)})) << "the upload was in the bucket before its 200";
  EXPECT_TRUE(eventually([&] {
    return bucket_md5s().count(md5_hex(original)) == 2 && bucket_has({md5_hex("derived")});
  })) << "the outputs flushed within the interval";
  auto manifest = metadata->manifest_of("alice", container);
  for (const char* path : {"/mnt/user-data/uploads/data.bin", "/mnt/user-data/outputs/copy.bin"}) {
    ASSERT_TRUE(manifest.count(path)) << path;
    EXPECT_EQ(manifest[path].md5, md5_hex(original)) << path;
  }
}

TEST_F(ClusterDurability, KilledHolderIsReplacedAndEveryAcknowledgedByteIsRestoredFromTheBucket) {
  const std::string container = "dur-kill";
  const std::string first = random_bytes(300 << 10), multipart = random_bytes((6 << 20) + 5);
  ASSERT_EQ(put(a().url(), container, "first.bin", first).status, 200);
  ASSERT_EQ(lease_of(container)->holder, "replica-a");
  auto ran = bash(
      a().url(), container,
      "printf 'out one' > /mnt/user-data/outputs/out.txt && mkdir -p src && printf 'work one' > src/w.txt"
      " && chmod 700 src/w.txt && echo ok");
  ASSERT_EQ(stdout_of(ran), "ok\n");
  // Older than the flush interval: in the bucket (waited for, not assumed).
  ASSERT_TRUE(eventually([&] { return bucket_has({md5_hex("out one"), md5_hex("work one")}); }));
  // The last upload (multipart in the bucket) acknowledged just before the kill.
  Answer last = put(b().url(), container, "outputs/last.bin", multipart);  // relayed to A
  ASSERT_EQ(last.status, 200) << last.describe();
  ASSERT_EQ(lease_of(container)->holder, "replica-a");
  a().stop(SIGKILL);

  // Through the load balancer: 503s with Retry-After until the lease runs out, then
  // another replica takes the container, restores it from the bucket and serves.
  const std::string check =
      "md5sum < /mnt/user-data/uploads/first.bin | cut -d' ' -f1; "
      "md5sum < /mnt/user-data/outputs/last.bin | cut -d' ' -f1; "
      "cat /mnt/user-data/outputs/out.txt; echo; cat src/w.txt; echo; stat -c %a src/w.txt";
  Answer served;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kLeaseSeconds + 10);
  while (std::chrono::steady_clock::now() < deadline) {
    served = bash_raw(nginx->url(), container, check);
    if (served.status == 200) break;
    EXPECT_EQ(served.status, 503) << served.describe();
    EXPECT_TRUE(served.retry_after()) << served.describe();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  ASSERT_EQ(served.status, 200) << "served within leaseSeconds + 10 s: " << served.describe();
  EXPECT_EQ(stdout_of(json(served.body).as_object()),
            md5_hex(first) + "\n" + md5_hex(multipart) + "\nout one\nwork one\n700\n");
  auto lease = lease_of(container);
  ASSERT_TRUE(lease);
  ASSERT_TRUE(lease->holder == "replica-b" || lease->holder == "replica-c") << lease->holder;
  EXPECT_EQ(lease->epoch, 2);
  Replica* holder = by_id(lease->holder);
  EXPECT_NE(holder->log().find("bucket: restoring container " + container), std::string::npos)
      << "the new holder never had a local copy: it restored one";
  // What the chart's SandboxdLeaseTakeovers alert watches: the move counted where it happened.
  EXPECT_GE(metric(*holder, "sandboxd_lease_takeovers_total{by=\"request\"}") +
                metric(*holder, "sandboxd_lease_takeovers_total{by=\"background\"}"),
            1);
  // Every acknowledged upload, through each live replica: same etag, same bytes.
  for (auto* through : {&b(), &c()}) {
    auto listed = listing_of(through->url(), container);
    EXPECT_EQ(listed["first.bin"].at("etag").as_string(), md5_hex(first)) << through->id();
    EXPECT_EQ(listed["last.bin"].at("etag").as_string(), md5_hex(multipart)) << through->id();
    EXPECT_EQ(md5_hex(download(through->url(), container, "/mnt/user-data/outputs/last.bin").body),
              md5_hex(multipart))
        << through->id();
    EXPECT_EQ(stdout_of(bash(through->url(), container, "cat src/w.txt")), "work one") << through->id();
  }
  a().start();  // a start cleans up what the kill left
}

TEST_F(ClusterDurability, PausedHolderIsFencedOnItsUploadAndItsFlushAndTheNewHoldersWritesStay) {
  const std::string container = "dur-pause";
  ASSERT_EQ(put(a().url(), container, "first.txt", "first").status, 200);
  ASSERT_EQ(lease_of(container)->holder, "replica-a");
  // A command on A that changes outputs after A is paused: A's flusher finds the change
  // when A comes back (the command still runs, so the flusher looks).
  const fs::path body = work / "long.json";
  std::ofstream(body) << bj::serialize(
      bj::object{{"command", "sleep 2; printf stale > /mnt/user-data/outputs/from-a.txt; sleep 30"}});
  const std::string long_command =
      "curl -s -o /dev/null -H 'Authorization: Bearer " + std::string(Replica::kToken) + "' -X POST '" +
      a().url("/api/gpt/v1/containers/" + container + "/tools/bash_code_execution") + "' --data-binary @" +
      body.string() + " > /dev/null 2>&1 &";  // not holding sh()'s pipe
  sh(long_command);
  ASSERT_TRUE(eventually(
      [&] { return metadata->manifest_of("alice", container).count("/mnt/user-data/uploads/first.txt"); }));
  // An upload to A, half sent when A is paused.
  SlowUpload late(a().port(), kFiles + "/late.bin?scope_id=" + container, random_bytes(256 << 10));
  ASSERT_TRUE(late.continued()) << "A opened the container for the upload";
  ASSERT_TRUE(
      eventually([&] { return metric(a(), "sandboxd_executions_active") == 1; }));  // the command is running
  a().signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(kLeaseSeconds + 1));
  // B takes the container over (A's lease ran out), restores it and writes: an upload
  // and an output of a command.
  const std::string newer = random_bytes(64 << 10);
  Answer put_newer = put(b().url(), container, "newer.bin", newer);
  ASSERT_EQ(put_newer.status, 200) << put_newer.describe();
  auto lease = lease_of(container);
  ASSERT_EQ(lease->holder, "replica-b");
  ASSERT_EQ(lease->epoch, 2);
  EXPECT_EQ(stdout_of(bash(
                b().url(), container,
                "printf 'from b' > /mnt/user-data/outputs/from-b.txt; cat /mnt/user-data/uploads/first.txt")),
            "first");
  ASSERT_TRUE(eventually([&] { return bucket_has({md5_hex("from b"), md5_hex(newer)}); }));

  // A comes back: its upload is refused (503, Retry-After), and so is its flush of
  // from-a.txt (written into A's stale copy while A was paused).
  a().signal(SIGCONT);
  const std::string answer = late.finish();
  EXPECT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << answer;
  EXPECT_NE(answer.find("Retry-After: "), std::string::npos) << answer;
  EXPECT_NE(answer.find("overloaded_error"), std::string::npos) << answer;
  EXPECT_TRUE(
      eventually([&] { return a().log().find("served by another replica now") != std::string::npos; }));
  EXPECT_NE(a().log().find("is held at epoch 2; a write at epoch"), std::string::npos)
      << "A's writes met the fence";
  std::this_thread::sleep_for(std::chrono::seconds(2 * kFlushIntervalSec + 1));  // A's flusher had its turns

  // Nothing of B's is lost and nothing of A's late writes is there, through every replica.
  for (auto* through : {&a(), &b(), &c()}) {
    auto listed = listing_of(through->url(), container);
    ASSERT_TRUE(listed.count("newer.bin")) << through->id();
    EXPECT_EQ(listed["newer.bin"].at("etag").as_string(), md5_hex(newer)) << through->id();
    EXPECT_FALSE(listed.count("late.bin")) << through->id();
    EXPECT_FALSE(listed.count("from-a.txt")) << through->id();
    EXPECT_EQ(download(through->url(), container, "/mnt/user-data/outputs/from-b.txt").body, "from b")
        << through->id();
    EXPECT_EQ(stdout_of(bash(through->url(), container,
                             "md5sum < /mnt/user-data/uploads/newer.bin | cut -d' ' -f1")),
              md5_hex(newer) + "\n")
        << through->id();
  }
  auto manifest = metadata->manifest_of("alice", container);
  EXPECT_TRUE(manifest.count("/mnt/user-data/outputs/from-b.txt"));
  EXPECT_TRUE(manifest.count("/mnt/user-data/uploads/newer.bin"));
  EXPECT_FALSE(manifest.count("/mnt/user-data/outputs/from-a.txt")) << "A's flush passed the fence";
  EXPECT_FALSE(manifest.count("/mnt/user-data/uploads/late.bin")) << "A's upload passed the fence";
  EXPECT_EQ(lease_of(container)->holder, "replica-b");
  EXPECT_EQ(lease_of(container)->epoch, 2);
  // The new holder's sandbox never saw A's file.
  EXPECT_EQ(stdout_of(bash(c().url(), container, "ls /mnt/user-data/outputs")), "from-b.txt\n");
  // B lets the container go; A takes it back (a new epoch) and serves the bucket's
  // state, not its stale copy (nor a late flush of it).
  EXPECT_EQ(http("-X POST '" + b().url("/api/gpt/v1/containers/" + container + "/stop") + "'").status, 200);
  EXPECT_EQ(lease_of(container)->holder, "");
  EXPECT_EQ(
      stdout_of(bash(
          a().url(), container,
          "ls /mnt/user-data/outputs /mnt/user-data/uploads; md5sum < /mnt/user-data/uploads/newer.bin")),
      "/mnt/user-data/outputs:\nfrom-b.txt\n\n/mnt/user-data/uploads:\nfirst.txt\nnewer.bin\n" +
          md5_hex(newer) + "  -\n");
  EXPECT_EQ(lease_of(container)->holder, "replica-a");
  EXPECT_EQ(lease_of(container)->epoch, 3);
  std::this_thread::sleep_for(
      std::chrono::seconds(2 * kFlushIntervalSec + 1));  // A's flusher had its turns again
  manifest = metadata->manifest_of("alice", container);
  EXPECT_TRUE(manifest.count("/mnt/user-data/outputs/from-b.txt"));
  EXPECT_FALSE(manifest.count("/mnt/user-data/outputs/from-a.txt"));
}

TEST_F(ClusterDurability, WithTheS3ServerStoppedUploadsAre503AndTheFlushCompletesWhenItIsBack) {
  const std::string container = "dur-away";
  ASSERT_EQ(stdout_of(bash(c().url(), container, "printf one > /mnt/user-data/outputs/one.txt && echo ok")),
            "ok\n");
  ASSERT_EQ(lease_of(container)->holder, "replica-c");
  ASSERT_TRUE(eventually([&] { return bucket_has({md5_hex("one")}); }));
  const double flushes_before = metric(c(), "sandboxd_storage_flushes_total{outcome=\"ok\"}");
  s3->stop();
  // Nothing is acknowledged, through the holder or relayed.
  for (auto* through : {&c(), &a()}) {
    Answer refused = put(through->url(), container, "new-" + through->id() + ".bin", random_bytes(10000));
    EXPECT_EQ(refused.status, 503) << refused.describe();
    EXPECT_TRUE(refused.retry_after()) << refused.describe();
    EXPECT_NE(refused.body.find("overloaded_error"), std::string::npos) << refused.body;
  }
  // A change and a stop: the flush fails, the local copy stays and serves.
  ASSERT_EQ(stdout_of(bash(b().url(), container, "printf two > /mnt/user-data/outputs/two.txt && echo ok")),
            "ok\n");
  Answer stopped = http("-X POST '" + b().url("/api/gpt/v1/containers/" + container + "/stop") + "'");
  EXPECT_EQ(stopped.status, 200) << stopped.describe();
  EXPECT_TRUE(eventually([&] { return metric(c(), "sandboxd_storage_pending_flush_bytes") > 0; }));
  EXPECT_GE(metric(c(), "sandboxd_storage_flush_failures_total"), 1);
  EXPECT_EQ(download(a().url(), container, "/mnt/user-data/outputs/two.txt").body, "two");
  EXPECT_EQ(lease_of(container)->holder, "replica-c")
      << "a container with unflushed changes is never released";
  auto listed = listing_of(a().url(), container);
  EXPECT_FALSE(listed.count("new-replica-c.bin"));
  EXPECT_FALSE(listed.count("new-replica-a.bin"));

  s3->start();
  EXPECT_TRUE(eventually([&] { return metric(c(), "sandboxd_storage_pending_flush_bytes") == 0; },
                         std::chrono::seconds(40)));
  EXPECT_GT(metric(c(), "sandboxd_storage_flushes_total{outcome=\"ok\"}"), flushes_before);
  EXPECT_TRUE(eventually([&] { return bucket_has({md5_hex("one"), md5_hex("two")}); }));
  EXPECT_TRUE(metadata->manifest_of("alice", container).count("/mnt/user-data/outputs/two.txt"));
  // Uploads are acknowledged again.
  EXPECT_EQ(put(nginx->url(), container, "after.bin", "after").status, 200);
}

TEST_F(ClusterDurability, RollingRestartUnderLoadLosesNothingAcknowledged) {
  const std::string container = "dur-roll";
  ASSERT_EQ(put(nginx->url(), container, "seed.txt", "seed").status, 200);
  struct Acknowledged {
    std::string name, md5;
  };
  std::mutex mutex;
  std::vector<Acknowledged> acknowledged;
  std::vector<std::string> unexpected;
  int answered = 0, refused = 0;
  std::atomic<bool> done{false};
  // The load: uploads, downloads of acknowledged uploads and a command, through nginx.
  std::thread client([&] {
    for (int i = 0; !done; ++i) {
      const std::string name = "load-" + std::to_string(i) + ".bin", data = random_bytes(20000 + i);
      std::vector<Answer> answers;
      Answer uploaded = put(nginx->url(), container, "outputs/" + name, data);  // downloadable there
      if (uploaded.status == 200) {
        std::lock_guard lock(mutex);
        EXPECT_EQ(json(uploaded.body).at("etag").as_string(), md5_hex(data));
        acknowledged.push_back({name, md5_hex(data)});
      }
      answers.push_back(uploaded);
      Acknowledged earlier;
      {
        std::lock_guard lock(mutex);
        if (!acknowledged.empty()) earlier = acknowledged[static_cast<size_t>(i) % acknowledged.size()];
      }
      if (!earlier.name.empty()) {
        Answer got = download(nginx->url(), container, "/mnt/user-data/outputs/" + earlier.name);
        if (got.status == 200 && md5_hex(got.body) != earlier.md5) {
          std::lock_guard lock(mutex);
          unexpected.push_back("wrong bytes for " + earlier.name);
        }
        answers.push_back(got);
      }
      answers.push_back(bash_raw(nginx->url(), container, "ls /mnt/user-data/outputs | wc -l"));
      std::lock_guard lock(mutex);
      for (const auto& answer : answers) {
        ++answered;
        if (answer.status == 200) continue;
        if (answer.status == 503 && answer.retry_after()) {
          ++refused;
          continue;
        }
        unexpected.push_back(answer.describe());
      }
    }
  });
  auto answers_so_far = [&] {
    std::lock_guard lock(mutex);
    return answered;
  };
  // Each replica is restarted while the load runs, and the load gets answers again
  // (three rounds of it) before the next one goes.
  EXPECT_TRUE(eventually([&] { return answers_so_far() >= 9; }, std::chrono::seconds(60)));
  for (auto* replica : replicas) {
    EXPECT_EQ(replica->stop(SIGTERM), 0) << replica->id();
    replica->start();
    const int before = answers_so_far();
    EXPECT_TRUE(eventually([&] { return answers_so_far() >= before + 9; }, std::chrono::seconds(60)))
        << replica->id();
  }
  done = true;
  client.join();

  std::lock_guard lock(mutex);
  EXPECT_TRUE(unexpected.empty()) << unexpected.size()
                                  << " answers neither a success nor a 503 with Retry-After; first: "
                                  << (unexpected.empty() ? "" : unexpected.front());
  EXPECT_GT(acknowledged.size(), 3u) << answered << " answers, " << refused << " refused";
  // Every acknowledged upload is there with its etag and its bytes, from any replica.
  auto listed = listing_of(nginx->url(), container);
  for (const auto& upload : acknowledged) {
    ASSERT_TRUE(listed.count(upload.name)) << upload.name;
    EXPECT_EQ(listed[upload.name].at("etag").as_string(), upload.md5) << upload.name;
  }
  for (auto* through : replicas)
    for (size_t i = 0; i < acknowledged.size(); i += 3) {
      Answer got = download(through->url(), container, "/mnt/user-data/outputs/" + acknowledged[i].name);
      EXPECT_EQ(got.status, 200) << through->id() << " " << acknowledged[i].name;
      EXPECT_EQ(md5_hex(got.body), acknowledged[i].md5) << through->id() << " " << acknowledged[i].name;
    }
  std::cerr << answered << " answers during the roll, " << refused << " of them 503 with Retry-After, "
            << acknowledged.size() << " uploads acknowledged\n";
}

// Custom skills are the cluster's: created through A (its version in the bucket), used
// through B and C (each makes its read-only copy from the bucket on first use, and a
// command reads the skill's file), deleted through C: gone from every replica's disk
// and from the bucket.
TEST_F(ClusterDurability, ASkillCreatedThroughAIsUsedThroughBAndCAndDeletedEverywhere) {
  using U = ScriptedUpstream;
  const std::string data = "skill data " + md5_hex(random_bytes(16));
  const fs::path folder = work / "shared-skill";
  fs::create_directories(folder / "data");
  std::ofstream(folder / "SKILL.md")
      << "---\nname: shared-skill\ndescription: A skill every replica serves.\n---\n"
         "Read data/value.txt.\n";
  std::ofstream(folder / "data" / "value.txt") << data;
  Answer created = http("-X POST '" + a().url("/api/gpt/v1/skills") + "' -F 'files[]=@" +
                        (folder / "SKILL.md").string() + ";filename=shared-skill/SKILL.md' -F 'files[]=@" +
                        (folder / "data" / "value.txt").string() + ";filename=shared-skill/data/value.txt'");
  ASSERT_EQ(created.status, 200) << created.describe();
  const std::string id(json(created.body).at("id").as_string());
  const std::string version(json(created.body).at("latest_version_id").as_string());
  const std::string local = "data/skills/" + id + "/" + version;
  EXPECT_TRUE(fs::exists(a().dir() / local / "data" / "value.txt"));
  auto skill_objects = [&] {
    auto listed = bucket->list_objects("sbx/skills/" + id + "/");
    return listed ? listed->size() : size_t{999};
  };
  EXPECT_EQ(skill_objects(), 3u) << "two files and the manifest";

  for (auto* through : {&b(), &c()}) {
    EXPECT_FALSE(fs::exists(through->dir() / local)) << through->id() << " has a copy before its first use";
    upstream->push_message(U::message(
        {U::tool_use(
            "toolu_skill_" + through->id(), "bash_code_execution",
            {{"command",
              "cat /mnt/skills/shared-skill/data/value.txt; touch /mnt/skills/shared-skill/x 2>/dev/null "
              "|| echo ' read-only'"}})},
        "tool_use"));
    upstream->push_message(U::message({U::text_block("Read it.")}, "end_turn"));
    const fs::path body = work / ("messages-" + through->id() + ".json");
    std::ofstream(body) << bj::serialize(bj::object{
        {"model", "default"},
        {"max_tokens", 1024},
        {"container",
         {{"id", "skills-" + through->id()}, {"skills", bj::array{{{"type", "custom"}, {"skill_id", id}}}}}},
        {"tools", bj::array{{{"name", "code_execution"}, {"type", "code_execution_20250825"}}}},
        {"messages", bj::array{{{"role", "user"}, {"content", "read the skill"}}}}});
    Answer reply = http("-X POST '" + through->url("/api/gpt/v1/messages") +
                        "' -H 'content-type: application/json' --data-binary @" + body.string());
    ASSERT_EQ(reply.status, 200) << through->id() << ": " << reply.describe();
    const auto message = json(reply.body);
    const auto& content = message.at("content").as_array();
    ASSERT_GE(content.size(), 2u) << reply.body;
    EXPECT_EQ(content[1].at("content").at("stdout"), bj::value(data + " read-only\n"))
        << through->id() << ": " << reply.body;
    EXPECT_TRUE(fs::exists(through->dir() / local / "data" / "value.txt")) << through->id();
  }

  Answer deleted = http("-X DELETE '" + c().url("/api/gpt/v1/skills/" + id) + "'");
  ASSERT_EQ(deleted.status, 200) << deleted.describe();
  EXPECT_EQ(http("'" + a().url("/api/gpt/v1/skills/" + id) + "'").status, 404);
  for (auto* replica : replicas)
    EXPECT_TRUE(eventually([&] { return !fs::exists(replica->dir() / "data" / "skills" / id); }))
        << replica->id() << " keeps its copy of the deleted skill";
  EXPECT_EQ(skill_objects(), 0u) << "the deleted skill's objects stay in the bucket";
}

}  // namespace
