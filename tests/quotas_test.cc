// Per-owner quotas on what an owner keeps (stored bytes across all its containers,
// chat threads, skills and their versions) and the per-address connection caps, each
// attacked from the attacker's side (a client with an owner's token, or many idle
// connections from one address), each showing that the attack is contained, answered
// in the documented shape, reported in /metrics, and that another owner (or another
// address) goes on meanwhile.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <set>
#include <thread>

#include "eventually.h"
#include "server_harness.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The final response's status line (curl sends large bodies with Expect: 100-continue).
std::string status_line(const std::string& raw) {
  size_t at = 0;
  while (raw.compare(at, 13, "HTTP/1.1 100 ") == 0 && raw.find("\r\n\r\n", at) != std::string::npos)
    at = raw.find("\r\n\r\n", at) + 4;
  return raw.substr(at, raw.find("\r\n", at) - at);
}

// A loopback connection from `source` (127.0.0.1, 127.0.0.2, ...) to the server; -1 if not.
int connect_from(const char* source, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, source, &local.sin_addr);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// What the server sends first on `fd` (one read, up to 10 s); "" when it sends nothing.
std::string first_reply(int fd, int timeout_ms = 10000) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return "";
  char buf[8192];
  ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// The sandboxd_http_connections gauge of `state`, scraped from another address; -1 if absent.
int connections(const ServerProcess& server, const std::string& state) {
  const std::string text = sh("curl -sS --interface 127.0.0.2 " + server.url("/metrics"));
  const std::string name = "sandboxd_http_connections{state=\"" + state + "\"} ";
  auto at = text.find(name);
  return at == std::string::npos ? -1 : std::stoi(text.substr(at + name.size()));
}

class QuotasTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server = new ServerProcess(
        "quotas:\n  storedBytesPerOwner: 3Mi\n  threadsPerOwner: 3\n  skillsPerOwner: 2\n  "
        "skillVersionsPerOwner: 3\n"
        "runtime:\n  prestartedSandboxes: 0\n");
    work = new fs::path(server->dir() / "client");
    fs::create_directories(*work);
  }
  static void TearDownTestSuite() {
    delete server;
    delete work;
  }
  // A file of `bytes` bytes of `fill` in the client's folder.
  fs::path blob(const std::string& name, size_t bytes, char fill = 'x') {
    fs::path path = *work / name;
    std::ofstream(path, std::ios::binary) << std::string(bytes, fill);
    return path;
  }
  std::string put(const std::string& container, const std::string& key, const fs::path& body,
                  const std::string& token = "secret-alice") {
    return server->curl("-i -X PUT " + quoted(server->base() + "/files/" + key + "?scope_id=" + container) +
                            " --data-binary @" + body.string(),
                        token);
  }
  std::string post_multipart(const std::string& container, const fs::path& body,
                             const std::string& token = "secret-alice") {
    return server->curl("-i -X POST " + quoted(server->base() + "/files?scope_id=" + container) +
                            " -F file=@" + body.string(),
                        token);
  }
  static std::string metrics() { return sh("curl -sS " + server->url("/metrics")); }

  static ServerProcess* server;
  static fs::path* work;
};
ServerProcess* QuotasTest::server = nullptr;
fs::path* QuotasTest::work = nullptr;

// --- stored bytes ------------------------------------------------------------------
TEST_F(QuotasTest, StoredBytesCountEveryContainerOfTheOwnerAndUploadsPastThemAreRefused) {
  const fs::path mib = blob("one.bin", 1 << 20);
  // Alice stores 2 MiB in two containers: the quota is the owner's, not a container's.
  EXPECT_NE(status_line(put("alice-s1", "a.bin", mib)).find(" 200"), std::string::npos);
  EXPECT_NE(status_line(post_multipart("alice-s2", mib)).find(" 200"), std::string::npos);
  // 2 MiB more, announced by Content-Length: refused before the body is read.
  const fs::path two = blob("two.bin", 2 << 20, 'y');
  std::string refused = put("alice-s3", "big.bin", two);
  EXPECT_NE(status_line(refused).find(" 403"), std::string::npos) << refused.substr(0, 600);
  EXPECT_NE(refused.find("\"permission_error\""), std::string::npos) << refused.substr(0, 600);
  EXPECT_NE(refused.find("quotas.storedBytesPerOwner"), std::string::npos) << refused.substr(0, 600);
  // The same as multipart (no size known in advance): refused while streaming.
  refused = post_multipart("alice-s3", two);
  EXPECT_NE(status_line(refused).find(" 403"), std::string::npos) << refused.substr(0, 600);
  EXPECT_NE(refused.find("quotas.storedBytesPerOwner"), std::string::npos) << refused.substr(0, 600);
  // Nothing of either was kept: no record, no file, no partial body.
  auto listing = server->curl_json(quoted(server->base() + "/files?scope_id=alice-s3")).as_object();
  EXPECT_TRUE(listing.at("data").as_array().empty()) << bj::serialize(listing);
  std::set<std::string> kept;  // every file in every container's uploads/, temporary ones included
  for (const auto& container : fs::directory_iterator(server->data_dir() / "containers"))
    if (fs::exists(container.path() / "uploads"))
      for (const auto& entry : fs::recursive_directory_iterator(container.path() / "uploads"))
        if (!entry.is_directory()) kept.insert(entry.path().filename().string());
  EXPECT_EQ(kept, (std::set<std::string>{"a.bin", "one.bin"})) << "a refused body left a file behind";
  // Overwriting a key counts the new version instead of the old one: a 2 MiB a.bin
  // (3 MiB in all) fits, a 2 MiB + 1 byte one does not, and the stored one stays whole.
  const fs::path two_and_one = blob("two-and-one.bin", (2 << 20) + 1, 'z');
  refused = put("alice-s1", "a.bin", two_and_one);
  EXPECT_NE(status_line(refused).find(" 403"), std::string::npos) << refused.substr(0, 600);
  auto meta = server
                  ->curl_json(quoted(server->base() + "/files/" + file_id("/mnt/user-data/uploads/a.bin") +
                                     "?scope_id=alice-s1"))
                  .as_object();
  EXPECT_EQ(meta.at("size_bytes").to_number<int64_t>(), 1 << 20) << bj::serialize(meta);
  EXPECT_NE(status_line(put("alice-s1", "a.bin", two)).find(" 200"), std::string::npos);
  // Bob, meanwhile, stores as much as his own quota allows.
  EXPECT_NE(status_line(put("bob-s", "b.bin", two, "secret-bob-x")).find(" 200"), std::string::npos);
  // Deleting makes room again.
  EXPECT_EQ(
      server->status("-X DELETE " + quoted(server->base() + "/files/" +
                                           file_id("/mnt/user-data/uploads/a.bin") + "?scope_id=alice-s1")),
      200);
  EXPECT_NE(status_line(put("alice-s3", "big.bin", two)).find(" 200"), std::string::npos);
  // /metrics: the quota in force and the refusals.
  const std::string text = metrics();
  EXPECT_NE(text.find("sandboxd_quota_stored_bytes_per_owner 3145728\n"), std::string::npos) << text;
  EXPECT_NE(text.find("reason=\"stored_bytes_quota\"} 3\n"), std::string::npos) << text;
  for (const char* c : {"alice-s1", "alice-s2", "alice-s3"})
    server->curl("-X DELETE " + server->base() + "/containers/" + c);
  server->curl("-X DELETE " + server->base() + "/containers/bob-s", "secret-bob-x");
}

TEST_F(QuotasTest, AnUploadPastTheQuotaIsCutOffWhileStreamingNotReadToTheEnd) {
  // A chunked upload that would be 64 MiB: the server answers 403 once the quota is
  // passed and stops reading; the client never gets to send the rest.
  int fd = connect_from("127.0.0.1", server->port());
  ASSERT_GE(fd, 0);
  const std::string head =
      "PUT /api/gpt/v1/files/stream.bin?scope_id=alice-stream HTTP/1.1\r\nHost: x\r\n"
      "Authorization: Bearer secret-alice\r\nTransfer-Encoding: chunked\r\n\r\n";
  ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  const std::string piece(64 * 1024, 'q');
  char size_line[32];
  std::snprintf(size_line, sizeof size_line, "%zx\r\n", piece.size());
  const std::string chunk = size_line + piece + "\r\n";
  size_t sent = 0;
  std::string reply;
  while (sent < (64u << 20)) {
    pollfd p{fd, POLLIN | POLLOUT, 0};
    if (::poll(&p, 1, 20000) != 1) break;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      reply = first_reply(fd);
      break;
    }
    ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN) break;
    if (n > 0) sent += static_cast<size_t>(n);
  }
  ::close(fd);
  EXPECT_EQ(reply.rfind("HTTP/1.1 403 ", 0), 0u) << reply;
  EXPECT_NE(reply.find("quotas.storedBytesPerOwner"), std::string::npos) << reply;
  EXPECT_LT(sent, 32u << 20) << "the server kept reading past the quota";
  EXPECT_EQ(server->status(quoted(server->base() + "/files/" + file_id("/mnt/user-data/uploads/stream.bin") +
                                  "?scope_id=alice-stream")),
            404);
  // Concurrent uploads of one owner cannot pass the quota together: of four 1 MiB
  // bodies at once beside 2 MiB stored, exactly one lands.
  const fs::path mib = blob("mib.bin", 1 << 20);
  const fs::path two = blob("two2.bin", 2 << 20);
  EXPECT_NE(status_line(put("alice-stream", "base.bin", two)).find(" 200"), std::string::npos);
  std::vector<std::thread> uploads;
  std::atomic<int> stored{0}, refused{0};
  for (int i = 0; i < 4; ++i)
    uploads.emplace_back([&, i] {
      std::string r = put("alice-stream", "c" + std::to_string(i) + ".bin", mib);
      if (status_line(r).find(" 200") != std::string::npos) ++stored;
      if (status_line(r).find(" 403") != std::string::npos) ++refused;
    });
  for (auto& t : uploads) t.join();
  EXPECT_EQ(stored.load(), 1);
  EXPECT_EQ(refused.load(), 3);
  server->curl("-X DELETE " + server->base() + "/containers/alice-stream");
}

// --- threads -----------------------------------------------------------------------
TEST_F(QuotasTest, ThreadsPastTheQuotaAreRefusedEvenAllAtOnceAndOthersGoOn) {
  const std::string threads = server->url("/api/v1/app/thread");
  // Alice asks for ten threads at once: exactly three are made.
  std::vector<std::thread> clients;
  std::vector<std::string> replies(10);
  for (int i = 0; i < 10; ++i)
    clients.emplace_back([&, i] { replies[i] = server->curl("-i -X POST " + threads + " -d '{}'"); });
  for (auto& t : clients) t.join();
  int made = 0, refused = 0;
  for (const auto& r : replies) {
    if (status_line(r).find(" 201") != std::string::npos) ++made;
    if (status_line(r).find(" 403") != std::string::npos &&
        r.find("\"permission_error\"") != std::string::npos &&
        r.find("quotas.threadsPerOwner") != std::string::npos)
      ++refused;
  }
  EXPECT_EQ(made, 3);
  EXPECT_EQ(refused, 7);
  auto listed = server->curl_json(threads).as_object();
  ASSERT_EQ(listed.at("data").as_array().size(), 3u) << bj::serialize(listed);
  // Bob is not affected.
  EXPECT_NE(status_line(server->curl("-i -X POST " + threads + " -d '{}'", "secret-bob-x")).find(" 201"),
            std::string::npos);
  // Deleting one makes room for one.
  const std::string first(listed.at("data").as_array()[0].at("id").as_string());
  EXPECT_EQ(server->status("-X DELETE " + threads + "/" + first), 200);
  EXPECT_NE(status_line(server->curl("-i -X POST " + threads + " -d '{}'")).find(" 201"), std::string::npos);
  EXPECT_NE(status_line(server->curl("-i -X POST " + threads + " -d '{}'")).find(" 403"), std::string::npos);
  const std::string text = metrics();
  EXPECT_NE(text.find("sandboxd_quota_threads_per_owner 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("reason=\"threads_quota\"} 8\n"), std::string::npos) << text;
}

// --- skills ------------------------------------------------------------------------
TEST_F(QuotasTest, SkillsAndVersionsPastTheirQuotasAreRefusedAndOthersGoOn) {
  auto skill_md = [&](const std::string& name) {
    fs::path dir = *work / ("skill-" + name);
    fs::create_directories(dir);
    std::ofstream(dir / "SKILL.md") << "---\nname: " << name << "\ndescription: A skill.\n---\nbody\n";
    return dir / "SKILL.md";
  };
  auto create = [&](const std::string& url, const std::string& name,
                    const std::string& token = "secret-alice") {
    return server->curl("-i -X POST " + quoted(url) + " -F " +
                            quoted("files[]=@" + skill_md(name).string() + ";filename=" + name + "/SKILL.md"),
                        token);
  };
  const std::string skills = server->base() + "/skills";
  std::string first = create(skills, "one");
  ASSERT_NE(status_line(first).find(" 200"), std::string::npos) << first;
  const std::string body = first.substr(first.find("\r\n\r\n") + 4);
  const std::string id(json(body).at("id").as_string());
  EXPECT_NE(status_line(create(skills, "two")).find(" 200"), std::string::npos);
  // A third skill: past quotas.skillsPerOwner (2).
  std::string refused = create(skills, "three");
  EXPECT_NE(status_line(refused).find(" 403"), std::string::npos) << refused;
  EXPECT_NE(refused.find("quotas.skillsPerOwner"), std::string::npos) << refused;
  // Versions: the two skills hold two; one more fits, the next is past
  // quotas.skillVersionsPerOwner (3).
  EXPECT_NE(status_line(create(skills + "/" + id + "/versions", "one")).find(" 200"), std::string::npos);
  refused = create(skills + "/" + id + "/versions", "one");
  EXPECT_NE(status_line(refused).find(" 403"), std::string::npos) << refused;
  EXPECT_NE(refused.find("\"permission_error\""), std::string::npos) << refused;
  EXPECT_NE(refused.find("quotas.skillVersionsPerOwner"), std::string::npos) << refused;
  auto versions = server->curl_json(quoted(skills + "/" + id + "/versions")).as_object();
  EXPECT_EQ(versions.at("data").as_array().size(), 2u) << bj::serialize(versions);
  // Bob makes his own.
  EXPECT_NE(status_line(create(skills, "bobs", "secret-bob-x")).find(" 200"), std::string::npos);
  // Deleting a skill (with its versions) makes room.
  EXPECT_EQ(server->status("-X DELETE " + quoted(skills + "/" + id)), 200);
  EXPECT_NE(status_line(create(skills, "three")).find(" 200"), std::string::npos);
  const std::string text = metrics();
  EXPECT_NE(text.find("sandboxd_quota_skills_per_owner 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sandboxd_quota_skill_versions_per_owner 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("reason=\"skills_quota\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("reason=\"skill_versions_quota\"} 1\n"), std::string::npos) << text;
}

// --- connections per address -------------------------------------------------------
TEST(QuotasConnections, IdleConnectionsFromOneAddressCannotStarveHealthOrAnotherClient) {
  ServerProcess server("server:\n  maxUnauthenticatedConnectionsPerIp: 20\n  maxConnectionsPerIp: 30\n");
  // The attacker, from 127.0.0.1, opens 40 connections and sends nothing.
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) {
    int fd = connect_from("127.0.0.1", server.port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  // Past 20, each is answered at once with a 429 and closed; the first 20 are held.
  auto answered_now = [&] {
    int n = 0;
    for (int fd : idle) {
      pollfd p{fd, POLLIN, 0};
      n += ::poll(&p, 1, 0) == 1;
    }
    return n;
  };
  ASSERT_TRUE(eventually([&] { return answered_now() >= 20; })) << server.log();
  int refused = 0, held = 0;
  for (int fd : idle) {
    std::string reply = first_reply(fd, 0);
    if (reply.rfind("HTTP/1.1 429 ", 0) == 0 && reply.find("have not authenticated") != std::string::npos &&
        reply.find("Retry-After: 1") != std::string::npos &&
        reply.find("\"rate_limit_error\"") != std::string::npos)
      ++refused;
    else if (reply.empty())
      ++held;
  }
  EXPECT_EQ(refused, 20);
  EXPECT_EQ(held, 20);
  // Another address is served: /health, and an owner's request.
  const std::string other = "curl -sS --interface 127.0.0.2 -o /dev/null -w '%{http_code}' ";
  EXPECT_EQ(sh(other + server.url("/health")), "200");
  EXPECT_EQ(sh(other + "-H 'Authorization: Bearer secret-bob-x' " + server.base() + "/containers"), "200");
  EXPECT_GE(connections(server, "unauthenticated"), 20);
  const std::string text = sh("curl -sS --interface 127.0.0.2 " + server.url("/metrics"));
  EXPECT_NE(text.find("sandboxd_http_connections_refused_total{cap=\"address_unauthenticated\"} 20\n"),
            std::string::npos)
      << text;
  // Authenticated, the attacker's connections count against the address's total (30).
  for (int fd : idle) ::close(fd);
  for (int i = 0; i < 100 && connections(server, "unauthenticated") > 1; ++i)  // (1: the scrape's own)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::vector<int> kept;
  int answered = 0, over = 0;
  for (int i = 0; i < 35; ++i) {
    int fd = -1;
    for (int tries = 0; tries < 50 && fd < 0; ++tries) {  // the closed ones leave the count
      fd = connect_from("127.0.0.1", server.port());
      if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_GE(fd, 0);
    const std::string request =
        "GET /api/gpt/v1/containers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret-alice\r\n\r\n";
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string reply = first_reply(fd);
    if (reply.rfind("HTTP/1.1 200 ", 0) == 0) ++answered;
    if (reply.rfind("HTTP/1.1 429 ", 0) == 0 && reply.find("from this address") != std::string::npos) ++over;
    kept.push_back(fd);
  }
  EXPECT_EQ(answered, 30);
  EXPECT_EQ(over, 5);
  EXPECT_EQ(sh(other + server.url("/health")), "200");
  EXPECT_GE(connections(server, "authenticated"), 30);
  EXPECT_NE(sh("curl -sS --interface 127.0.0.2 " + server.url("/metrics"))
                .find("sandboxd_http_connections_refused_total{cap=\"address\"} 5\n"),
            std::string::npos);
  for (int fd : kept) ::close(fd);
}

TEST(QuotasConfig, TheNewKeysAreCheckedWithTheirPath) {
  for (const auto& [yaml, key] : std::vector<std::pair<std::string, std::string>>{
           {"quotas:\n  storedBytesPerOwner: lots\n", "quotas.storedBytesPerOwner"},
           {"quotas:\n  threadsPerOwner: -1\n", "quotas.threadsPerOwner"},
           {"quotas:\n  skillsPerOwner: x\n", "quotas.skillsPerOwner"},
           {"quotas:\n  skillVersionsPerOwner: -2\n", "quotas.skillVersionsPerOwner"},
           {"server:\n  maxConnectionsPerIp: -1\n", "server.maxConnectionsPerIp"},
           {"server:\n  maxUnauthenticatedConnectionsPerIp: many\n",
            "server.maxUnauthenticatedConnectionsPerIp"}}) {
    fs::path file =
        fs::temp_directory_path() / ("sandboxd-quotas-config-" + std::to_string(getpid()) + ".yaml");
    std::ofstream(file) << yaml;
    int status = 0;
    std::string out = sh(std::string(SANDBOXD_PATH) + " config check " + file.string() + " 2>&1", &status);
    fs::remove(file);
    EXPECT_NE(status, 0) << yaml;
    EXPECT_NE(out.find(key), std::string::npos) << out;
  }
}

}  // namespace

namespace {

// A host whose disk is full while a container's storage is made: 503 overloaded_error
// with Retry-After (never a 500), nothing of the container kept, the server serving on.
TEST(QuotasHostDisk, AFullDiskWhileMakingAContainerIs503WithRetryAfter) {
  setenv("SANDBOXD_FAILPOINT_NO_SPACE", "1", 1);
  ServerProcess server;
  unsetenv("SANDBOXD_FAILPOINT_NO_SPACE");
  std::string created = server.curl("-i -X POST " + server.base() + "/containers -d '{\"id\":\"full\"}'");
  EXPECT_NE(status_line(created).find(" 503"), std::string::npos) << created;
  EXPECT_NE(created.find("Retry-After: 2"), std::string::npos) << created;
  EXPECT_NE(created.find("\"overloaded_error\""), std::string::npos) << created;
  EXPECT_NE(created.find("out of disk space"), std::string::npos) << created;
  // An upload into a new container, and a thread's first file, alike.
  std::string uploaded = server.curl("-i -X PUT '" + server.base() + "/files/a.txt?scope_id=full2' -d hi");
  EXPECT_NE(status_line(uploaded).find(" 503"), std::string::npos) << uploaded;
  std::string thread =
      server.curl("-i -X PUT " + server.url("/api/v1/app/thread/t1/put-file/a.txt") + " -d hi");
  EXPECT_NE(status_line(thread).find(" 503"), std::string::npos) << thread;
  auto listed = server.curl_json(server.base() + "/containers").as_object();
  EXPECT_TRUE(listed.at("data").as_array().empty()) << bj::serialize(listed);
  size_t folders = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(server.data_dir() / "containers"))
    ++folders;
  EXPECT_EQ(folders, 0u);
  EXPECT_EQ(server.status(server.url("/health")), 200);
}

}  // namespace

namespace {

// A host disk that fills while an upload lands in uploads/ (which is on the host's disk,
// not the container's volume): 503 overloaded_error with Retry-After, not 413 "the
// container is full"; the partial file goes, the previous version stays, and the server
// serves on once there is room. The data dir is a small tmpfs of the test's own.
TEST(QuotasHostDisk, AHostDiskFillingUnderAnUploadIs503AndKeepsThePreviousVersion) {
  std::string pattern = (fs::temp_directory_path() / "sandboxd-fulldisk-XXXXXX").string();
  const fs::path mount_point = mkdtemp(pattern.data());
  ASSERT_EQ(sh("mount -t tmpfs -o size=96m sandboxd-quotas-test " + mount_point.string() + " && echo ok"),
            "ok\n");
  const fs::path big = fs::temp_directory_path() / ("sandboxd-fulldisk-" + std::to_string(getpid()) + ".bin");
  sh("head -c " + std::to_string(128 << 20) + " /dev/urandom > " + big.string());
  {
    ServerProcess server("", mount_point / "data");
    const std::string a_bin = server.base() + "/files/a.bin?scope_id=full-up";
    ASSERT_NE(status_line(server.curl("-i -X PUT " + quoted(a_bin) + " -d old")).find(" 200"),
              std::string::npos);
    std::string refused = server.curl("-i -X PUT " + quoted(a_bin) + " --data-binary @" + big.string());
    EXPECT_NE(status_line(refused).find(" 503"), std::string::npos) << refused.substr(0, 600);
    EXPECT_NE(refused.find("Retry-After: 2"), std::string::npos) << refused.substr(0, 600);
    EXPECT_NE(refused.find("\"overloaded_error\""), std::string::npos) << refused.substr(0, 600);
    EXPECT_NE(refused.find("out of disk space for uploads"), std::string::npos) << refused.substr(0, 600);
    // The multipart form alike.
    std::string form = server.curl("-i -X POST " + quoted(server.base() + "/files?scope_id=full-up") +
                                   " -F file=@" + big.string() + ";filename=b.bin");
    EXPECT_NE(status_line(form).find(" 503"), std::string::npos) << form.substr(0, 600);
    // The previous version stays, and nothing of the refused bodies is left on the disk.
    auto listed = server.curl_json(server.base() + "/files?scope_id=full-up").as_object();
    ASSERT_EQ(listed.at("data").as_array().size(), 1u) << bj::serialize(listed);
    const auto& kept = listed.at("data").as_array().at(0).as_object();
    EXPECT_EQ(kept.at("filename").as_string(), "a.bin");
    EXPECT_EQ(kept.at("size_bytes").to_number<int64_t>(), 3);
    EXPECT_EQ(kept.at("etag").as_string(), "149603e6c03516362a8da23f624db945");  // MD5 of "old"
    EXPECT_EQ(sh("cat " + quoted((mount_point / "data").string()) + "/containers/*/uploads/a.bin"), "old");
    const std::string used_kib =
        sh("df --output=used -k " + mount_point.string() + " | tail -1 | tr -d ' \\n'");
    EXPECT_LT(std::stoll(used_kib), 64 * 1024) << "the partial uploads were removed";
    // Room again: uploads land, other owners are served, the server is healthy.
    EXPECT_NE(status_line(server.curl("-i -X PUT " + quoted(server.base() + "/files/c.bin?scope_id=bob-box") +
                                          " -d new",
                                      "secret-bob-x"))
                  .find(" 200"),
              std::string::npos);
    EXPECT_EQ(server.status(server.url("/health")), 200);
  }
  fs::remove(big);
  sh("umount -l " + mount_point.string());
  fs::remove_all(mount_point);
}

// quotas.containersPerOwner and quotas.threadsPerOwner agree: a thread's turns run in a
// container of the thread's id, so a thread is refused when it is made if it could not
// get one (naming the key), and a thread that was made keeps its claim on one.
TEST(QuotasAgree, AThreadThatCouldNotGetAContainerIsRefusedWhenItIsMade) {
  ServerProcess server("quotas:\n  containersPerOwner: 3\n  threadsPerOwner: 100\n");
  const fs::path q = server.dir() / "q.txt";
  std::ofstream(q) << "q";
  auto upload = [&](const std::string& container, const std::string& token = "secret-alice") {
    return server.curl(
        "-i -X POST " + quoted(server.base() + "/files?scope_id=" + container) + " -F file=@" + q.string(),
        token);
  };
  const std::string threads = server.url("/api/v1/app/thread");
  ASSERT_NE(status_line(upload("alice-c0")).find(" 20"), std::string::npos);
  ASSERT_NE(status_line(upload("alice-c1")).find(" 20"), std::string::npos);
  // The third claim: a thread (it has no container yet).
  std::string made = server.curl("-i -X POST " + threads + " -d '{}'");
  ASSERT_NE(status_line(made).find(" 201"), std::string::npos) << made;
  const std::string thread(json(made.substr(made.find("\r\n\r\n") + 4)).at("id").as_string());
  // A fourth thread could not get a container: refused now, naming the container quota
  // (well under quotas.threadsPerOwner).
  std::string refused = server.curl("-i -X POST " + threads + " -d '{}'");
  EXPECT_NE(status_line(refused).find(" 403"), std::string::npos) << refused;
  EXPECT_NE(refused.find("\"permission_error\""), std::string::npos) << refused;
  EXPECT_NE(refused.find("quotas.containersPerOwner"), std::string::npos) << refused;
  EXPECT_EQ(server.curl_json(threads).at("data").as_array().size(), 1u);
  // Nor can another container take the thread's claim...
  std::string other = upload("alice-c2");
  EXPECT_NE(status_line(other).find(" 403"), std::string::npos) << other;
  EXPECT_NE(other.find("quotas.containersPerOwner"), std::string::npos) << other;
  // ...so the thread gets its container (here by an upload into it).
  std::string into_thread = server.curl("-i -X POST " + quoted(threads + "/" + thread + "/upload-file") +
                                        " -F file=@" + q.string());
  EXPECT_NE(status_line(into_thread).find(" 20"), std::string::npos) << into_thread;
  // Bob is not affected.
  EXPECT_NE(status_line(server.curl("-i -X POST " + threads + " -d '{}'", "secret-bob-x")).find(" 201"),
            std::string::npos);
  EXPECT_NE(status_line(upload("bob-c0", "secret-bob-x")).find(" 20"), std::string::npos);
  // Deleting the thread frees its container's claim.
  EXPECT_EQ(server.status("-X DELETE " + threads + "/" + thread), 200);
  EXPECT_NE(status_line(server.curl("-i -X POST " + threads + " -d '{}'")).find(" 201"), std::string::npos);
}

}  // namespace
