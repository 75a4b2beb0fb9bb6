// Replicas with fenced leases (docs/storage.md), end to end: three `sandboxd serve`
// processes with their own data directories and one shared metadata file (SQLite in
// WAL mode, each replica's <dataDir>/sandboxd.db a link to it), distinct replica ids
// and advertised URLs, and nginx (Debian's, run by the test in the foreground with a
// configuration of its own) in front of them as a round-robin load balancer. The
// upstream model is the scripted one. The test reads the lease rows from the shared
// file itself (tests/cluster_harness.h: the replicas, nginx and the shared metadata).
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "cluster_harness.h"
#include "scripted_upstream.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

constexpr int kLeaseSeconds = 3;
const char* kToken = Replica::kToken;

std::string random_bytes(size_t n) {
  std::mt19937_64 rng{std::random_device{}()};
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

std::string sha256_of(const fs::path& file) {
  return sh("sha256sum '" + file.string() + "' | cut -d' ' -f1");
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // nginx comes from scripts/setup.sh: its absence is a failure, not a skip.
    ASSERT_TRUE(fs::exists("/usr/sbin/nginx")) << "nginx is not installed (scripts/setup.sh installs it)";
    std::string pattern = (fs::temp_directory_path() / "sandboxd-cluster-XXXXXX").string();
    root = mkdtemp(pattern.data());
    metadata = new SharedMetadata(sandboxd::store::db::Backend::kSqlite);
    upstream = new ScriptedUpstream();
    for (const char* id : {"replica-a", "replica-b", "replica-c"})
      replicas.push_back(new Replica(id, root, *metadata, upstream->base_url(), kLeaseSeconds, ""));
    for (auto* replica : replicas) replica->start();
    nginx = new Nginx(root / "nginx", {replicas[0]->port(), replicas[1]->port(), replicas[2]->port()});
  }
  static void TearDownTestSuite() {
    delete nginx;
    for (auto* replica : replicas) delete replica;
    replicas.clear();
    delete upstream;
    delete metadata;
    metadata = nullptr;
    std::error_code ec;
    if (!root.empty()) fs::remove_all(root, ec);
  }
  void SetUp() override {
    ASSERT_NE(nginx, nullptr) << "the cluster did not start (see the suite set-up)";
    work = root / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(work);
  }

  static Replica& a() { return *replicas[0]; }
  static Replica& b() { return *replicas[1]; }
  static Replica& c() { return *replicas[2]; }

  // curl with alice's token against `base` (a replica's or nginx's URL).
  static std::string curl(const std::string& args) {
    return sh(std::string("curl -sS -H 'Authorization: Bearer ") + kToken + "' " + args);
  }
  // GET `url` into `file`; the status.
  static int download(const std::string& url, const fs::path& file) {
    return std::stoi(sh(std::string("curl -s -o '") + file.string() +
                        "' -w '%{http_code}' -H 'Authorization: Bearer " + kToken + "' '" + url + "'"));
  }
  static int status_of(const std::string& args) {
    return std::stoi(sh(std::string("curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer ") +
                        kToken + "' " + args));
  }
  // A bash command through a replica's (or nginx's) containers API: its JSON answer.
  static std::string bash_raw(const std::string& base, const std::string& container,
                              const std::string& command, int* status = nullptr) {
    const fs::path body = root / ("cmd-" + std::to_string(++counter) + ".json");
    std::ofstream(body) << bj::serialize(bj::object{{"command", command}});
    const std::string out = curl("-w '\\n%{http_code}' -X POST '" + base + "/api/gpt/v1/containers/" +
                                 container + "/tools/bash_code_execution' --data-binary @" + body.string());
    const size_t split = out.rfind('\n');
    if (status) *status = std::stoi(out.substr(split + 1));
    return out.substr(0, split);
  }
  static bj::object bash(const std::string& base, const std::string& container, const std::string& command) {
    int status = 0;
    std::string text = bash_raw(base, container, command, &status);
    EXPECT_EQ(status, 200) << text;
    return json(text).as_object();
  }
  // The container's lease as the shared database has it.
  static std::optional<sandboxd::store::Lease> lease_of(const std::string& container) {
    return metadata->lease_of("alice", container);
  }
  // Files of a container through `base`: file name -> file id.
  static std::map<std::string, std::string> files_of(const std::string& base, const std::string& container) {
    std::map<std::string, std::string> out;
    for (const auto& [name, file] : listing_of(base, container))
      out[name] = std::string(file.at("id").as_string());
    return out;
  }
  // The same, each file's whole object (etag, size_bytes).
  static std::map<std::string, bj::object> listing_of(const std::string& base, const std::string& container) {
    auto listing =
        json(curl("'" + base + "/api/gpt/v1/files?scope_id=" + container + "&limit=100'")).as_object();
    std::map<std::string, bj::object> out;
    for (const auto& file : listing.at("data").as_array())
      out[std::string(file.at("filename").as_string())] = file.as_object();
    return out;
  }

  static inline fs::path root;
  static inline SharedMetadata* metadata = nullptr;
  static inline ScriptedUpstream* upstream = nullptr;
  static inline std::vector<Replica*> replicas;
  static inline Nginx* nginx = nullptr;
  static inline int counter = 0;
  fs::path work;
};

TEST_F(ClusterTest, UploadThroughOneRunThroughAnotherDownloadThroughTheThird) {
  const std::string container = "shared-bytes";
  const fs::path original = work / "data.bin";
  std::ofstream(original, std::ios::binary) << random_bytes(3 << 20);
  // Uploaded through A: A takes the container.
  auto uploaded = json(curl("-X POST '" + a().url("/api/gpt/v1/files?scope_id=" + container) +
                            "' -F 'file=@" + original.string() + "'"));
  ASSERT_TRUE(uploaded.as_object().contains("id")) << bj::serialize(uploaded);
  auto lease = lease_of(container);
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->holder, "replica-a");
  EXPECT_EQ(lease->epoch, 1);
  // Run through B (relayed to A): reads the upload, writes an output.
  auto ran = bash(b().url(), container,
                  "sha256sum /mnt/user-data/uploads/data.bin | cut -d' ' -f1; "
                  "cp /mnt/user-data/uploads/data.bin /mnt/user-data/outputs/copy.bin");
  EXPECT_EQ(ran.at("return_code"), 0) << bj::serialize(ran);
  EXPECT_EQ(std::string(ran.at("stdout").as_string()), sha256_of(original));
  // Downloaded through C: the same bytes.
  auto files = files_of(c().url(), container);
  ASSERT_TRUE(files.count("copy.bin")) << "listed through C";
  const fs::path downloaded = work / "downloaded.bin";
  EXPECT_EQ(download(c().url("/api/gpt/v1/files/" + files["copy.bin"] + "/content?scope_id=" + container),
                     downloaded),
            200);
  EXPECT_EQ(sha256_of(downloaded), sha256_of(original));
  // Through the load balancer, each replica in turn: every answer the same bytes,
  // HEAD with its length.
  for (int i = 0; i < 6; ++i) {
    const fs::path again = work / ("again-" + std::to_string(i) + ".bin");
    EXPECT_EQ(
        download(nginx->url("/api/gpt/v1/files/" + files["copy.bin"] + "/content?scope_id=" + container),
                 again),
        200);
    EXPECT_EQ(sha256_of(again), sha256_of(original)) << "download " << i;
  }
  // Uploads through a non-holder stream on to A, sized and chunked alike.
  const fs::path second = work / "second.bin";
  std::ofstream(second, std::ios::binary) << random_bytes(5 << 20);
  const std::string second_md5 = sh("md5sum '" + second.string() + "' | cut -d' ' -f1 | tr -d '\\n'");
  EXPECT_EQ(status_of("-X PUT --data-binary @" + second.string() + " '" +
                      c().url("/api/gpt/v1/files/sized.bin?scope_id=" + container) + "'"),
            200);
  EXPECT_EQ(status_of("-X PUT -H 'Transfer-Encoding: chunked' --data-binary @" + second.string() + " '" +
                      b().url("/api/gpt/v1/files/chunked.bin?scope_id=" + container) + "'"),
            200);
  auto listed = listing_of(a().url(), container);
  for (const char* name : {"sized.bin", "chunked.bin"}) {
    ASSERT_TRUE(listed.count(name)) << name;
    EXPECT_EQ(std::string(listed[name].at("etag").as_string()), second_md5) << name;
  }
  const std::string head =
      curl("-I '" + b().url("/api/gpt/v1/files/" + files["data.bin"] + "?scope_id=" + container) + "'");
  EXPECT_NE(head.find("X-File-Size-Bytes: " + std::to_string(3 << 20)), std::string::npos) << head;
  // A request relayed once already is never relayed again: B, not the holder, refuses it.
  EXPECT_EQ(status_of("-H 'Sandboxd-Relayed-By: replica-x' '" +
                      b().url("/api/gpt/v1/files?scope_id=" + container) + "'"),
            503);
  // Nobody took the container from A.
  lease = lease_of(container);
  EXPECT_EQ(lease->holder, "replica-a");
  EXPECT_EQ(lease->epoch, 1);
  // B's disk never held it: B relayed every request.
  EXPECT_EQ(b().log().find("took container storage " + metadata->storage_of("alice", container)),
            std::string::npos);
}

TEST_F(ClusterTest, MessagesStreamThroughANonHolderArrivesIntact) {
  const std::string container = "shared-stream";
  bash(a().url(), container, "echo ready > /mnt/user-data/outputs/ready.txt");  // A holds it
  using U = ScriptedUpstream;
  upstream->push_message(
      U::message({U::text_block("Running it."),
                  U::tool_use("toolu_c1", "bash_code_execution",
                              {{"command", "cat /mnt/user-data/outputs/ready.txt; echo streamed"}})},
                 "tool_use"));
  upstream->push_message(U::message({U::text_block("It printed twice.")}, "end_turn"));
  bj::object body{
      {"model", "default"},
      {"max_tokens", 1024},
      {"stream", true},
      {"container", container},
      {"messages", bj::array{bj::object{{"role", "user"}, {"content", "run it"}}}},
      {"tools", bj::array{bj::object{{"name", "code_execution"}, {"type", "code_execution_v1"}}}}};
  const fs::path file = work / "body.json";
  std::ofstream(file) << bj::serialize(body);
  const fs::path headers = work / "headers";
  const std::string text =
      curl("-N -D '" + headers.string() + "' -X POST '" + c().url("/api/gpt/v1/messages") +
           "' -H 'content-type: application/json' --data-binary @" + file.string());
  EXPECT_NE(read_file(headers).find("text/event-stream"), std::string::npos) << read_file(headers);
  auto events = parse_sse(text);
  ASSERT_GE(events.size(), 10u) << text;
  EXPECT_EQ(events.front().name, "message_start");
  EXPECT_EQ(events.back().name, "message_stop");
  for (const auto& e : events) EXPECT_EQ(e.data.at("type").as_string(), e.name);
  std::string stdout_seen, text_seen;
  for (const auto& e : events) {
    if (e.name == "content_block_start")  // the tool result arrives whole, in its start event
      if (const auto* content = e.data.at("content_block").as_object().if_contains("content");
          content && content->is_object() && content->as_object().contains("stdout"))
        stdout_seen = content->at("stdout").as_string();
    if (e.name == "content_block_delta" && e.data.at("delta").at("type") == "text_delta")
      text_seen += e.data.at("delta").at("text").as_string();
  }
  EXPECT_EQ(stdout_seen, "ready\nstreamed\n") << "the command ran in A's sandbox: " << text;
  EXPECT_EQ(text_seen, "Running it.It printed twice.");
  EXPECT_EQ(upstream->pending_steps(), 0u);
  EXPECT_EQ(lease_of(container)->holder, "replica-a");
}

TEST_F(ClusterTest, KilledHolderIsReplacedWithinItsLease) {
  const std::string container = "shared-kill";
  bash(a().url(), container, "echo before");
  ASSERT_EQ(lease_of(container)->holder, "replica-a");
  a().stop(SIGKILL);
  // At once (A's lease still runs): a replica relaying to it answers 503, Retry-After,
  // the documented error shape and nothing of why.
  const fs::path headers = work / "headers";
  const std::string refused =
      curl("-D '" + headers.string() + "' -X POST '" +
           b().url("/api/gpt/v1/containers/" + container + "/tools/bash_code_execution") +
           "' -d '{\"command\": \"true\"}'");
  EXPECT_EQ(read_file(headers).rfind("HTTP/1.1 503", 0), 0u) << read_file(headers);
  EXPECT_NE(read_file(headers).find("Retry-After: "), std::string::npos) << read_file(headers);
  EXPECT_EQ(refused.rfind("{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"", 0), 0u) << refused;
  EXPECT_EQ(refused.find("refused"), std::string::npos) << refused;
  // Through the load balancer: 503s with Retry-After (relays to a dead holder) until
  // the lease runs out, then another replica takes the container and serves it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kLeaseSeconds + 10);
  int status = 0;
  std::string answer;
  while (std::chrono::steady_clock::now() < deadline) {
    answer = bash_raw(nginx->url(), container, "echo after", &status);
    if (status == 200) break;
    EXPECT_EQ(status, 503) << answer;
    EXPECT_NE(answer.find("\"type\":\"error\""), std::string::npos) << answer;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  ASSERT_EQ(status, 200) << "served within leaseSeconds + 10 s: " << answer;
  EXPECT_EQ(json(answer).at("stdout"), "after\n");
  auto lease = lease_of(container);
  ASSERT_TRUE(lease);
  EXPECT_TRUE(lease->holder == "replica-b" || lease->holder == "replica-c") << lease->holder;
  EXPECT_EQ(lease->epoch, 2) << "a fresh epoch";
  // (Without the bucket backend the new holder's copy starts empty; with it, the files
  // come back from the bucket: tests/cluster_durability_test.cc.)
  a().start();
}

TEST_F(ClusterTest, PausedHolderIsFencedWhenItComesBackAndTheNewHoldersFilesStay) {
  const std::string container = "shared-pause";
  const std::string files_url = "/api/gpt/v1/files";
  ASSERT_EQ(status_of("-X PUT --data-binary 'first' '" +
                      a().url(files_url + "/first.txt?scope_id=" + container) + "'"),
            200);
  ASSERT_EQ(lease_of(container)->holder, "replica-a");
  bash(a().url(), container, "echo a sandbox on A");
  EXPECT_NE(
      sh("curl -sS -H 'Authorization: Bearer admin-secret-0123456789' '" + a().url("/admin/sandboxes") + "'")
          .find(container),
      std::string::npos);
  // An upload to A, half sent when A is paused.
  SlowUpload late(a().port(), files_url + "/late.txt?scope_id=" + container, random_bytes(256 << 10));
  ASSERT_TRUE(late.continued()) << "A opened the container for the upload";
  a().signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(kLeaseSeconds + 1));
  // B takes the container over (A's lease ran out) and writes.
  const fs::path newer = work / "newer.bin";
  std::ofstream(newer, std::ios::binary) << random_bytes(64 << 10);
  ASSERT_EQ(status_of("-X PUT --data-binary @" + newer.string() + " '" +
                      b().url(files_url + "/newer.bin?scope_id=" + container) + "'"),
            200);
  auto lease = lease_of(container);
  ASSERT_EQ(lease->holder, "replica-b");
  ASSERT_EQ(lease->epoch, 2);
  // A comes back and finishes its upload: refused (its epoch is gone), 503 with Retry-After.
  a().signal(SIGCONT);
  const std::string answer = late.finish();
  EXPECT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << answer;
  EXPECT_NE(answer.find("Retry-After: "), std::string::npos) << answer;
  EXPECT_NE(answer.find("{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\""), std::string::npos)
      << answer;
  EXPECT_NE(a().log().find("a write at epoch"), std::string::npos) << "A's write met the fence";
  // A gave the container up: its sandbox there stops (B runs the container's commands).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string sandboxes_on_a;
  while (std::chrono::steady_clock::now() < deadline) {
    sandboxes_on_a = sh("curl -sS -H 'Authorization: Bearer admin-secret-0123456789' '" +
                        a().url("/admin/sandboxes") + "'");
    if (sandboxes_on_a.find(container) == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(sandboxes_on_a.find(container), std::string::npos) << sandboxes_on_a;
  EXPECT_NE(sandboxes_on_a.find("\"data\""), std::string::npos) << sandboxes_on_a;
  // Nothing of B's is lost and A's late file is not there, whichever replica is asked.
  const std::string newer_md5 = sh("md5sum '" + newer.string() + "' | cut -d' ' -f1 | tr -d '\\n'");
  for (auto* through : {&a(), &b(), &c()}) {
    auto files = listing_of(through->url(), container);
    ASSERT_TRUE(files.count("newer.bin")) << through->id();
    EXPECT_EQ(std::string(files["newer.bin"].at("etag").as_string()), newer_md5) << through->id();
    EXPECT_EQ(files["newer.bin"].at("size_bytes"), 64 << 10) << through->id();
    EXPECT_FALSE(files.count("late.txt")) << through->id();
  }
  // And its bytes are the ones B received (copied to outputs/ to download them).
  EXPECT_EQ(bash(c().url(), container, "cp /mnt/user-data/uploads/newer.bin /mnt/user-data/outputs/")
                .at("return_code"),
            0);
  const fs::path copy = work / "newer-copy.bin";
  EXPECT_EQ(download(a().url(files_url + "/" + file_id("/mnt/user-data/outputs/newer.bin") +
                             "/content?scope_id=" + container),
                     copy),
            200);
  EXPECT_EQ(sha256_of(copy), sha256_of(newer));
  lease = lease_of(container);
  EXPECT_EQ(lease->holder, "replica-b");
  EXPECT_EQ(lease->epoch, 2);
}

TEST_F(ClusterTest, SigtermReleasesTheLeasesAtOnceAndDrainDoesWithoutExiting) {
  const std::string by_term = "shared-term", by_drain = "shared-drain";
  bash(c().url(), by_term, "echo held");
  bash(b().url(), by_drain, "echo held");
  ASSERT_EQ(lease_of(by_term)->holder, "replica-c");
  ASSERT_EQ(lease_of(by_drain)->holder, "replica-b");
  EXPECT_EQ(c().stop(SIGTERM), 0);
  // Released, not left to run out: the row has no holder (expiry leaves it in place).
  auto lease = lease_of(by_term);
  EXPECT_EQ(lease->holder, "");
  EXPECT_EQ(lease->epoch, 1);
  EXPECT_EQ(bash(a().url(), by_term, "echo moved").at("stdout"), "moved\n");
  EXPECT_EQ(lease_of(by_term)->holder, "replica-a");
  EXPECT_EQ(lease_of(by_term)->epoch, 2);
  // `sandboxd admin drain` against B: the same, and B keeps running.
  int status = -1;
  const std::string drained = sh(std::string(SANDBOXD_PATH) + " admin drain --url " + b().url() +
                                     " --admin-token admin-secret-0123456789 2>&1",
                                 &status);
  EXPECT_EQ(status, 0) << drained;
  EXPECT_NE(drained.find("released"), std::string::npos) << drained;
  EXPECT_EQ(lease_of(by_drain)->holder, "");
  EXPECT_EQ(status_of("'" + b().url("/health") + "'"), 200) << "B still runs";
  // B refuses to take containers now; one held elsewhere it still relays.
  int refused = 0;
  bash_raw(b().url(), "shared-new-after-drain", "true", &refused);
  EXPECT_EQ(refused, 503);
  EXPECT_EQ(bash(b().url(), by_term, "echo relayed").at("stdout"), "relayed\n");
  // The admin token is required.
  EXPECT_EQ(status_of("-X POST '" + b().url("/admin/drain") + "'"), 401);
  // B again as it was, C back.
  EXPECT_EQ(b().stop(SIGTERM), 0);
  b().start();
  c().start();
}

}  // namespace
