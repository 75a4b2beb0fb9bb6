// The S3 storage backend against a real S3 server process (s3rver, tests/s3_server.h):
// the client itself (signed requests, multipart, listing, errors), then sandboxd serve
// with storage.backend: s3 (uploads, flush, restore, the bucket going away).

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <openssl/evp.h>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "base/hex.h"
#include "eventually.h"
#include "ops/config.h"
#include "s3_server.h"
#include "store/database.h"
#include "store/s3_client.h"

namespace sandboxd::testing {
namespace {

std::string md5_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, EVP_md5(), nullptr);
  return hex_encode(digest, length);
}

std::string random_bytes(size_t size, unsigned seed) {
  std::mt19937 rng(seed);
  std::string out(size, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

store::S3Settings settings_for(const S3Server& s3) { return s3.client_settings(); }

// A temporary file holding `data`, open for reading and writing.
struct TempFile {
  int fd = -1;
  explicit TempFile(std::string_view data = {}) {
    char name[] = "/tmp/sandboxd-s3-body-XXXXXX";
    fd = mkstemp(name);
    unlink(name);
    EXPECT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  }
  ~TempFile() { close(fd); }
  std::string contents() const {
    std::string out;
    char buf[65536];
    ssize_t n;
    off_t at = 0;
    while ((n = pread(fd, buf, sizeof buf, at)) > 0) out.append(buf, n), at += n;
    return out;
  }
};

TEST(S3Client, PutGetHeadListDelete) {
  S3Server s3;
  store::S3Client client(settings_for(s3));
  const std::string body = random_bytes(100 * 1024, 1);
  auto put = client.put_object("p/objects/a", body);
  ASSERT_TRUE(put) << put.error().describe();
  EXPECT_EQ(*put, md5_hex(body));
  TempFile source(body);
  auto from_fd = client.put_object_from_fd("p/objects/b", source.fd, body.size());
  ASSERT_TRUE(from_fd) << from_fd.error().describe();
  EXPECT_EQ(*from_fd, md5_hex(body));

  TempFile sink;
  auto got = client.get_object("p/objects/b", sink.fd);
  ASSERT_TRUE(got) << got.error().describe();
  EXPECT_EQ(*got, body.size());
  EXPECT_EQ(sink.contents(), body);
  auto head = client.head_object("p/objects/a");
  ASSERT_TRUE(head) << head.error().describe();
  EXPECT_EQ(head->size, body.size());
  EXPECT_EQ(head->etag, md5_hex(body));

  // Listing in pages of one: the continuation tokens are followed.
  ASSERT_TRUE(client.put_object("p/objects/c", "c"));
  ASSERT_TRUE(client.put_object("other/x", "x"));
  auto listed = client.list_objects("p/", 1);
  ASSERT_TRUE(listed) << listed.error().describe();
  ASSERT_EQ(listed->size(), 3u);
  EXPECT_EQ((*listed)[0].key, "p/objects/a");
  EXPECT_EQ((*listed)[2].key, "p/objects/c");
  EXPECT_EQ((*listed)[2].etag, md5_hex("c"));

  ASSERT_TRUE(client.delete_object("p/objects/a"));
  ASSERT_TRUE(client.delete_object("p/objects/a"));  // a missing key: still fine
  auto missing = client.head_object("p/objects/a");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, store::S3Error::Kind::kClient);
  EXPECT_TRUE(missing.error().not_found());
  TempFile nothing;
  auto get_missing = client.get_object("p/objects/a", nothing.fd);
  ASSERT_FALSE(get_missing);
  EXPECT_EQ(get_missing.error().code, "NoSuchKey");
  EXPECT_EQ(nothing.contents(), "");  // an error body never lands in the file
}

TEST(S3Client, MultipartUpload) {
  S3Server s3;
  store::S3Client client(settings_for(s3));
  const std::string first = random_bytes(5 << 20, 2), last = random_bytes(12345, 3);
  auto id = client.create_multipart("p/objects/big");
  ASSERT_TRUE(id) << id.error().describe();
  EXPECT_EQ(s3.pending_multipart_uploads(), 1u);
  auto part1 = client.upload_part("p/objects/big", *id, 1, first);
  auto part2 = client.upload_part("p/objects/big", *id, 2, last);
  ASSERT_TRUE(part1 && part2);
  EXPECT_EQ(*part1, md5_hex(first));
  auto done = client.complete_multipart("p/objects/big", *id, {*part1, *part2});
  ASSERT_TRUE(done) << done.error().describe();
  EXPECT_EQ(s3.pending_multipart_uploads(), 0u);
  TempFile sink;
  ASSERT_TRUE(client.get_object("p/objects/big", sink.fd));
  EXPECT_EQ(sink.contents(), first + last);
}

TEST(S3Client, ErrorsTellUnreachableFromRefused) {
  S3Server s3;
  auto wrong_key = settings_for(s3);
  wrong_key.access_key_id = "NOT-A-KEY";
  auto refused = store::S3Client(wrong_key).put_object("p/x", "x");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, store::S3Error::Kind::kClient);
  EXPECT_EQ(refused.error().status, 403);
  EXPECT_EQ(refused.error().code, "InvalidAccessKeyId");

  auto no_bucket = settings_for(s3);
  no_bucket.bucket = "missing-bucket";
  auto missing = store::S3Client(no_bucket).check_bucket();
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, store::S3Error::Kind::kClient);

  s3.stop();
  store::S3Client client(settings_for(s3));
  auto down = client.put_object("p/x", "x");
  ASSERT_FALSE(down);
  EXPECT_EQ(down.error().kind, store::S3Error::Kind::kUnreachable);
  EXPECT_FALSE(client.check_bucket());
}

// Every request goes through the SigV4 verifier (tests/s3/sigv4_verifier.js), which
// rebuilds the canonical request from the decoded path and query as S3 does: keys and
// prefixes with characters that need encoding must be signed in their canonical form.
TEST(S3Client, KeysWithCharactersThatNeedEncodingAreSignedAsS3Expects) {
  S3Server s3;
  store::S3Client client(settings_for(s3));
  const std::vector<std::string> keys = {
      "p/with space and  two",
      "p/plus+equals=amp&question?hash#percent%25",
      "p/unicode-\xc3\xa9-\xe6\x97\xa5\xe6\x9c\xac-\xf0\x9f\x98\x80",
      "p/quote'paren(star*)bang!",
      "p/tilde~colon:at@comma,semi;dollar$",
      "p/base64url-AZaz09_-~.hex-0f",
  };
  for (const auto& key : keys) {
    const std::string body = "body of " + key;
    auto put = client.put_object(key, body);
    ASSERT_TRUE(put) << key << ": " << put.error().describe() << "\n" << s3.refusals();
    EXPECT_EQ(*put, md5_hex(body)) << key;
    auto head = client.head_object(key);
    ASSERT_TRUE(head) << key << ": " << head.error().describe();
    EXPECT_EQ(head->size, body.size()) << key;
    TempFile sink;
    auto got = client.get_object(key, sink.fd);
    ASSERT_TRUE(got) << key << ": " << got.error().describe();
    EXPECT_EQ(sink.contents(), body) << key;
    // The key itself as a listing prefix (a query value with the same characters).
    auto listed = client.list_objects(key);
    ASSERT_TRUE(listed) << key << ": " << listed.error().describe();
    ASSERT_EQ(listed->size(), 1u) << key;
    EXPECT_EQ((*listed)[0].key, key);
  }
  // Pages of one: each continuation token goes back as an encoded query value.
  auto all = client.list_objects("p/", 1);
  ASSERT_TRUE(all) << all.error().describe();
  EXPECT_EQ(all->size(), keys.size());
  // Multipart on such a key (one part, the last may be small), and an aborted one.
  const std::string key = keys[1] + " multipart";
  auto id = client.create_multipart(key);
  ASSERT_TRUE(id) << id.error().describe() << "\n" << s3.refusals();
  auto part = client.upload_part(key, *id, 1, "one small part");
  ASSERT_TRUE(part) << part.error().describe();
  auto done = client.complete_multipart(key, *id, {*part});
  ASSERT_TRUE(done) << done.error().describe();
  auto aborted_id = client.create_multipart(keys[2]);
  ASSERT_TRUE(aborted_id) << aborted_id.error().describe();
  ASSERT_TRUE(client.upload_part(keys[2], *aborted_id, 1, "dropped"));
  // s3rver has no AbortMultipartUpload (405, the caller's fallback is tested with the
  // upload API): what matters here is that the verifier passed the request on.
  auto aborted = client.abort_multipart(keys[2], *aborted_id);
  EXPECT_TRUE(aborted || aborted.error().status == 405) << aborted.error().describe() << "\n"
                                                        << s3.refusals();
  EXPECT_NE(s3.verifier_log().find(
                "verified DELETE /sessions/p/unicode-%C3%A9-%E6%97%A5%E6%9C%AC-%F0%9F%98%80?uploadId="),
            std::string::npos)
      << s3.verifier_log();
  for (const auto& each : keys) ASSERT_TRUE(client.delete_object(each)) << each;
  ASSERT_TRUE(client.delete_object(key));
  auto left = client.list_objects("p/");
  ASSERT_TRUE(left);
  EXPECT_TRUE(left->empty());

  EXPECT_EQ(s3.refused_requests(), 0u) << s3.refusals();
  EXPECT_GE(s3.verified_requests(), keys.size() * 4 + 10);  // every call above was checked
}

TEST(S3Client, AWrongSecretKeyIsRefusedAsSignatureDoesNotMatchAndStoresNothing) {
  S3Server s3;
  auto wrong = settings_for(s3);
  wrong.secret_access_key = "not-the-secret";
  store::S3Client client(wrong);
  auto refused = client.put_object("p/x", "x");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, store::S3Error::Kind::kClient);
  EXPECT_EQ(refused.error().status, 403);
  EXPECT_EQ(refused.error().code, "SignatureDoesNotMatch");
  EXPECT_NE(refused.error().describe().find("bucket refused (HTTP 403) SignatureDoesNotMatch"),
            std::string::npos)
      << refused.error().describe();
  TempFile source(random_bytes(70000, 8));
  auto from_fd = client.put_object_from_fd("p/y", source.fd, 70000);
  ASSERT_FALSE(from_fd);
  EXPECT_EQ(from_fd.error().code, "SignatureDoesNotMatch");
  auto created = client.create_multipart("p/z");
  ASSERT_FALSE(created);
  EXPECT_EQ(created.error().code, "SignatureDoesNotMatch");
  auto listed = client.list_objects("p/");
  ASSERT_FALSE(listed);
  EXPECT_EQ(listed.error().code, "SignatureDoesNotMatch");
  EXPECT_FALSE(client.check_bucket());
  auto head = client.head_object("p/x");  // no body in a HEAD answer: the status tells
  ASSERT_FALSE(head);
  EXPECT_EQ(head.error().status, 403);
  EXPECT_EQ(head.error().kind, store::S3Error::Kind::kClient);

  // Nothing reached the bucket.
  store::S3Client right(settings_for(s3));
  auto stored = right.list_objects("p/");
  ASSERT_TRUE(stored) << stored.error().describe();
  EXPECT_TRUE(stored->empty());
  EXPECT_EQ(s3.pending_multipart_uploads(), 0u);
  EXPECT_EQ(s3.refused_requests(), 6u) << s3.refusals();
}

// The verifier is not a pass-through: requests signed by curl's own --aws-sigv4 (not our
// client) that S3 refuses are refused, as S3 answers them.
TEST(S3Client, TheVerifierRefusesWhatS3Refuses) {
  S3Server s3;
  const std::string url = "'" + s3.endpoint() + "/" + S3Server::kBucket + "/p/checked'";
  const std::string signed_curl = std::string("curl -sS --aws-sigv4 aws:amz:us-east-1:s3 -u ") +
                                  S3Server::kAccessKey + ":" + S3Server::kSecretKey + " ";
  const std::string hello_sha256 = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
  // A body hash that is signed and right: stored.
  EXPECT_EQ(
      sh(signed_curl + "-X PUT --data-binary hello -H 'x-amz-content-sha256: " + hello_sha256 + "' " + url),
      "");
  // A body that is not the one its signed hash names.
  EXPECT_NE(
      sh(signed_curl + "-X PUT --data-binary hellO -H 'x-amz-content-sha256: " + hello_sha256 + "' " + url)
          .find("<Code>XAmzContentSHA256Mismatch</Code>"),
      std::string::npos);
  // No x-amz-content-sha256 at all.
  EXPECT_NE(sh(signed_curl + "-X PUT --data-binary hello " + url).find("<Code>InvalidRequest</Code>"),
            std::string::npos);
  // The region of the credential scope is not the bucket's.
  EXPECT_NE(sh(std::string("curl -sS --aws-sigv4 aws:amz:eu-west-3:s3 -u ") + S3Server::kAccessKey + ":" +
               S3Server::kSecretKey + " -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' " + url)
                .find("<Code>AuthorizationHeaderMalformed</Code>"),
            std::string::npos);
  // Not signed.
  EXPECT_NE(sh("curl -sS " + url).find("<Code>AccessDenied</Code>"), std::string::npos);
  // A key signed as sent rather than in SigV4's canonical encoding ('(' is %28 there;
  // curl 7.88, Debian 12's, signs the path as it sends it).
  EXPECT_NE(sh(signed_curl + "-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' '" + s3.endpoint() + "/" +
               S3Server::kBucket + "/p/paren(1)'")
                .find("<Code>SignatureDoesNotMatch</Code>"),
            std::string::npos);
  // The stored object is the right one.
  EXPECT_EQ(s3.run_curl(url), "hello");
  EXPECT_EQ(s3.refused_requests(), 5u) << s3.refusals();
  EXPECT_NE(s3.refusals().find("refused SignatureDoesNotMatch GET"), std::string::npos) << s3.refusals();
}

}  // namespace
}  // namespace sandboxd::testing

// --- sandboxd serve with storage.backend: s3 ----------------------------------------

#include "server_harness.h"

namespace sandboxd::testing {
namespace {

class S3Serve : public ::testing::Test {
 protected:
  void SetUp() override {
    s3 = std::make_unique<S3Server>();
    server =
        std::make_unique<ServerProcess>(storage_yaml() + extra_s3_yaml() + "capacity:\n  retryAfterSec: 3\n");
    client = std::make_unique<store::S3Client>(settings_for(*s3));
    work = fs::path(server->dir()) / "work";
    fs::create_directories(work);
  }
  // Every request sandboxd made was signed as S3 expects (the verifier refused none).
  void TearDown() override {
    if (expect_signed_right()) {
      EXPECT_EQ(s3->refused_requests(), 0u) << s3->refusals();
    }
  }
  virtual int flush_interval() const { return 30; }
  virtual std::string storage_yaml() const { return s3->storage_yaml("sbx/", flush_interval()); }
  virtual std::string extra_s3_yaml() const { return ""; }  // more of storage.s3
  virtual bool expect_signed_right() const { return true; }

  // The objects of the sessions bucket under sandboxd's prefix (a ListObjectsV2 call).
  std::vector<store::S3Object> objects() {
    auto listed = client->list_objects("sbx/objects/");
    EXPECT_TRUE(listed) << listed.error().describe();
    return listed ? *listed : std::vector<store::S3Object>{};
  }
  // The bytes of an object, read back from the bucket.
  std::string object_bytes(const std::string& key) {
    TempFile sink;
    auto got = client->get_object(key, sink.fd);
    EXPECT_TRUE(got) << got.error().describe();
    return sink.contents();
  }
  // The MD5s of every object's bytes (each read back, not the listing's ETag).
  std::multiset<std::string> object_md5s() {
    std::multiset<std::string> out;
    for (const auto& object : objects()) out.insert(md5_hex(object_bytes(object.key)));
    return out;
  }
  fs::path write_local(const std::string& name, const std::string& data) {
    fs::path path = work / name;
    std::ofstream(path, std::ios::binary) << data;
    return path;
  }
  boost::json::value bash(const std::string& container, const std::string& command) {
    fs::path body = work / "command.json";
    std::ofstream(body) << boost::json::serialize(boost::json::object{{"command", command}});
    return server->curl_json("-X POST '" + server->base() + "/containers/" + container +
                             "/tools/bash_code_execution' -d @" + body.string());
  }
  std::string files_url(const std::string& container, const std::string& tail = "") {
    return "'" + server->base() + "/files" + tail + (tail.find('?') == std::string::npos ? "?" : "&") +
           "scope_id=" + container + "'";
  }
  double metric(const std::string& sample) { return server->metric(sample); }

  std::unique_ptr<S3Server> s3;
  std::unique_ptr<ServerProcess> server;
  std::unique_ptr<store::S3Client> client;
  fs::path work;
};

TEST_F(S3Serve, UploadsAreInTheBucketWithTheirMd5BeforeTheAnswer) {
  const std::string small = random_bytes(1000, 4), large = random_bytes((11 << 20) + 7, 5);
  auto posted =
      server->curl_json("-F file=@" + write_local("small.bin", small).string() + " " + files_url("up"));
  ASSERT_EQ(posted.at("etag").as_string(), md5_hex(small)) << posted;
  // 11 MiB in 5 MiB parts: a multipart upload while the body streams.
  auto put = server->curl_json("-X PUT --data-binary @" + write_local("large.bin", large).string() + " " +
                               files_url("up", "/outputs/large.bin"));
  ASSERT_EQ(put.at("etag").as_string(), md5_hex(large)) << put;
  EXPECT_EQ(object_md5s(), (std::multiset<std::string>{md5_hex(small), md5_hex(large)}));
  EXPECT_EQ(s3->pending_multipart_uploads(), 0u);
  // The thread endpoints go the same way; an overwrite replaces the object.
  const std::string again = "second version";
  auto thread_put = server->curl_json("-X PUT --data-binary @" + write_local("again.txt", again).string() +
                                      " '" + server->url("/api/v1/app/thread/up/put-file/small.bin") + "'");
  ASSERT_EQ(thread_put.at("etag").as_string(), md5_hex(again)) << thread_put;
  EXPECT_TRUE(eventually([&] {
    return object_md5s() == std::multiset<std::string>{md5_hex(again), md5_hex(large)};
  }));
  // The local copy is the same file (downloads are served from it).
  EXPECT_EQ(server->curl(files_url("up", "/" + file_id("/mnt/user-data/outputs/large.bin") + "/content")),
            large);
  // A deleted container takes its objects along.
  ASSERT_EQ(server->status("-X DELETE " + server->base() + "/containers/up"), 200);
  EXPECT_TRUE(eventually([&] { return objects().empty(); }));
}

TEST(S3Config, BadValuesAreRefusedWithTheirKeyPathAndSecretsComeFromTheEnvironment) {
  auto refused = [](const std::string& yaml) {
    try {
      ops::parse_config(yaml);
    } catch (const ops::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string s3 =
      "storage:\n  backend: s3\n  s3:\n    endpoint: http://127.0.0.1:9000\n    bucket: sessions\n";
  EXPECT_EQ(refused("storage: {backend: nfs}").rfind("storage.backend:", 0), 0u);
  EXPECT_EQ(refused("storage: {flushIntervalSec: 0}").rfind("storage.flushIntervalSec:", 0), 0u);
  EXPECT_EQ(refused("storage: {s3: {endpoint: ftp://x}}").rfind("storage.s3.endpoint:", 0), 0u);
  EXPECT_EQ(refused("storage: {s3: {bucket: A_B}}").rfind("storage.s3.bucket:", 0), 0u);
  EXPECT_EQ(refused("storage: {s3: {prefix: /abs}}").rfind("storage.s3.prefix:", 0), 0u);
  EXPECT_EQ(refused("storage: {s3: {partSize: 1Mi}}").rfind("storage.s3.partSize:", 0), 0u);
  EXPECT_EQ(refused("storage: {s3: {colour: red}}").rfind("storage.s3.colour: unknown key", 0), 0u);
  EXPECT_EQ(refused("storage: {backend: s3}").rfind("storage.s3.endpoint: required", 0), 0u);
  unsetenv("SANDBOXD_S3_ACCESS_KEY_ID");
  unsetenv("SANDBOXD_S3_SECRET_ACCESS_KEY");
  EXPECT_EQ(refused(s3).rfind("storage.s3.accessKeyId: required", 0), 0u);
  setenv("SANDBOXD_S3_ACCESS_KEY_ID", "from-env", 1);
  setenv("SANDBOXD_S3_SECRET_ACCESS_KEY", "secret-from-env", 1);
  auto config = ops::parse_config(s3 + "    accessKeyId: from-file\n");
  EXPECT_EQ(config.s3.access_key_id, "from-env");  // the environment wins
  EXPECT_EQ(config.s3.secret_access_key, "secret-from-env");
  EXPECT_EQ(config.storage_backend, "s3");
  EXPECT_EQ(config.flush_interval_sec, 30);
  unsetenv("SANDBOXD_S3_ACCESS_KEY_ID");
  unsetenv("SANDBOXD_S3_SECRET_ACCESS_KEY");
  EXPECT_EQ(ops::parse_config("").storage_backend, "local");
}

// Every large body as a multipart upload (a PUT's Content-Length would otherwise make
// it one streamed PUT).
class S3ServeMultipart : public S3Serve {
  std::string extra_s3_yaml() const override { return "    singlePutMaxSize: 0\n"; }
};

TEST_F(S3ServeMultipart, ACutUploadLeavesNothingAndKeepsThePreviousVersion) {
  const std::string previous = "the previous version";
  ASSERT_EQ(server
                ->curl_json("-X PUT --data-binary @" + write_local("p.txt", previous).string() + " " +
                            files_url("cut", "/outputs/cut.bin"))
                .at("etag")
                .as_string(),
            md5_hex(previous));
  ASSERT_EQ(objects().size(), 1u);
  // 12 MiB of a declared 20 MiB, then the connection goes.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(server->port()));
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  std::string request =
      "PUT /api/gpt/v1/files/outputs/cut.bin?scope_id=cut HTTP/1.1\r\nHost: x\r\n"
      "Authorization: Bearer secret-alice\r\nContent-Length: " +
      std::to_string(20 << 20) + "\r\n\r\n" + random_bytes(12 << 20, 6);
  for (size_t sent = 0; sent < request.size();) {
    ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    sent += static_cast<size_t>(n);
  }
  // The bucket has the upload's first parts while the body streams...
  EXPECT_TRUE(eventually([&] { return s3->pending_multipart_uploads() == 1; }));
  close(fd);
  // ...and nothing of it once it is cut: no pending multipart upload, no new object.
  EXPECT_TRUE(eventually([&] { return s3->pending_multipart_uploads() == 0 && objects().size() == 1; }));
  EXPECT_EQ(object_md5s(), std::multiset<std::string>{md5_hex(previous)});
  EXPECT_EQ(server->curl(files_url("cut", "/" + file_id("/mnt/user-data/outputs/cut.bin") + "/content")),
            previous);
}

TEST_F(S3Serve, StopFlushesAndAWipedContainerIsRestoredWithItsIdsEtagsModesAndMtimes) {
  const std::string upload = random_bytes(3000, 7);
  ASSERT_TRUE(
      server->curl_json("-F file=@" + write_local("in.bin", upload).string() + " " + files_url("keep"))
          .as_object()
          .contains("etag"));
  auto ran = bash(
      "keep",
      "mkdir -p /mnt/user-data/outputs/d && head -c 6000000 /dev/urandom > /mnt/user-data/outputs/d/big.bin"
      " && printf '#!/bin/sh\\necho hi\\n' > run.sh && chmod 750 run.sh"
      " && touch -d '2021-02-03 04:05:06.123456789' run.sh && echo done");
  ASSERT_EQ(ran.at("stdout").as_string(), "done\n") << ran;
  const std::string big_id = file_id("/mnt/user-data/outputs/d/big.bin"),
                    run_id = file_id("/home/agent/workspace/run.sh"),
                    in_id = file_id("/mnt/user-data/uploads/in.bin");
  auto listed = server->curl_json(files_url("keep"));  // the outputs file gets its record
  auto big = server->curl_json(files_url("keep", "/" + big_id)),
       run = server->curl_json(files_url("keep", "/" + run_id)),
       in = server->curl_json(files_url("keep", "/" + in_id));
  ASSERT_TRUE(big.as_object().contains("etag")) << big;
  ASSERT_TRUE(run.as_object().contains("etag")) << run;
  const std::string stat_before = bash("keep",
                                       "stat -c '%a %U %y %s' run.sh; stat -c '%a %U %y %s' "
                                       "/mnt/user-data/outputs/d/big.bin /mnt/user-data/uploads/in.bin")
                                      .at("stdout")
                                      .as_string()
                                      .c_str();

  // Stop: what the command wrote goes to the bucket before the answer.
  ASSERT_EQ(server->status("-X POST " + server->base() + "/containers/keep/stop"), 200);
  EXPECT_EQ(object_md5s(),
            (std::multiset<std::string>{std::string(big.at("etag").as_string()),
                                        std::string(run.at("etag").as_string()), md5_hex(upload)}));

  // The local copy wiped (the metadata database kept): a new node, a lost disk.
  server->stop(SIGTERM);
  for (const auto& entry : fs::directory_iterator(server->data_dir() / "containers"))
    fs::remove_all(entry.path());
  server->start();
  // The first file call restores it: same ids, etags, sizes and creation times...
  for (const auto& [id, before] : {std::pair{big_id, big}, std::pair{run_id, run}, std::pair{in_id, in}}) {
    auto after = server->curl_json(files_url("keep", "/" + id));
    EXPECT_EQ(after, before) << after;
  }
  // ...and the same modes, owner and mtimes inside the sandbox.
  EXPECT_EQ(bash("keep",
                 "stat -c '%a %U %y %s' run.sh; stat -c '%a %U %y %s' "
                 "/mnt/user-data/outputs/d/big.bin /mnt/user-data/uploads/in.bin")
                .at("stdout")
                .as_string(),
            stat_before);
  EXPECT_EQ(bash("keep", "./run.sh").at("stdout").as_string(), "hi\n");
  EXPECT_NE(server->log().find("bucket: restoring container keep (3 files"), std::string::npos)
      << server->log();
  EXPECT_EQ(bash("keep", "md5sum < /mnt/user-data/uploads/in.bin").at("stdout").as_string(),
            md5_hex(upload) + "  -\n");
  EXPECT_NE(stat_before.find("750 agent 2021-02-03 04:05:06.123456789"), std::string::npos) << stat_before;
}

TEST_F(S3Serve, AStaleLocalCopyIsDiscardedAndRestoredFromTheBucket) {
  ASSERT_EQ(bash("stale", "echo bucket > /mnt/user-data/outputs/a.txt && echo ok").at("stdout").as_string(),
            "ok\n");
  ASSERT_EQ(server->status("-X POST " + server->base() + "/containers/stale/stop"), 200);  // flushed
  ASSERT_EQ(bash("stale", "echo local > /mnt/user-data/outputs/a.txt && echo ok").at("stdout").as_string(),
            "ok\n");
  server->stop(SIGKILL);  // no flush of the local change
  {                       // Meanwhile another replica held the container and changed its manifest.
    auto db = store::db::open_sqlite((server->data_dir() / "sandboxd.db").string());
    db->acquire().exec(
        "UPDATE manifest_generations SET generation = generation + 1, writer = 'another-replica'");
  }
  server->start();
  const std::string id = file_id("/mnt/user-data/outputs/a.txt");
  EXPECT_EQ(server->curl(files_url("stale", "/" + id + "/content")), "bucket\n");
  EXPECT_NE(server->log().find("bucket: restoring container stale"), std::string::npos) << server->log();
  EXPECT_EQ(bash("stale", "cat /mnt/user-data/outputs/a.txt").at("stdout").as_string(), "bucket\n");
}

TEST_F(S3Serve, WithTheBucketAwayUploadsAre503AndStopsKeepTheLocalCopyUntilAFlushSucceeds) {
  auto first = bash("away", "echo one > /mnt/user-data/outputs/one.txt && echo ok");
  ASSERT_EQ(first.at("stdout").as_string(), "ok\n") << first;
  s3->stop();
  // Nothing is acknowledged while the bucket does not answer.
  std::string headers = sh("curl -s -D - -o " + (work / "body").string() +
                           " -H 'Authorization: Bearer secret-alice' -X PUT "
                           "--data-binary hello " +
                           files_url("away", "/outputs/new.txt"));
  EXPECT_NE(headers.find("HTTP/1.1 503"), std::string::npos) << headers;
  EXPECT_NE(headers.find("Retry-After: 3"), std::string::npos) << headers;
  EXPECT_NE(read_file(work / "body").find("overloaded_error"), std::string::npos);
  EXPECT_EQ(server->status(files_url("away", "/" + file_id("/mnt/user-data/outputs/new.txt"))), 404);
  auto ready = sh("curl -s " + server->url("/ready"));
  EXPECT_NE(ready.find("sessions bucket"), std::string::npos) << ready;

  // A stop cannot flush: the local copy stays and serves.
  ASSERT_EQ(bash("away", "echo two > /mnt/user-data/outputs/two.txt && echo ok").at("stdout").as_string(),
            "ok\n");
  ASSERT_EQ(server->status("-X POST " + server->base() + "/containers/away/stop"), 200);
  EXPECT_GE(metric("sandboxd_storage_flush_failures_total"), 1);
  EXPECT_GT(metric("sandboxd_storage_pending_flush_bytes"), 0);
  EXPECT_EQ(server->curl(files_url("away", "/" + file_id("/mnt/user-data/outputs/two.txt") + "/content")),
            "two\n");

  // The bucket back: the retry completes the flush, and /metrics shows it.
  s3->start();
  EXPECT_TRUE(eventually([&] { return metric("sandboxd_storage_pending_flush_bytes") == 0; },
                         std::chrono::seconds(60)));
  EXPECT_GE(metric("sandboxd_storage_flushes_total{outcome=\"ok\"}"), 1);
  EXPECT_EQ(object_md5s(), (std::multiset<std::string>{md5_hex("one\n"), md5_hex("two\n")}));
  EXPECT_TRUE(eventually(
      [&] { return sh("curl -s " + server->url("/ready")).find("\"ready\"") != std::string::npos; }));
  int valid = -1;
  sh("curl -s " + server->url("/metrics") + " | promtool check metrics >&2", &valid);
  EXPECT_EQ(valid, 0);
}

// --- several parts in flight (storage.s3.maxPartsInFlight, 4 by default), streamed PUTs -

// A PUT of `declared` bytes on a raw connection to `port`, of which the caller sends
// the body (as much as it likes) before it reads the answer or closes.
class RawUpload {
 public:
  RawUpload(int port, const std::string& target, size_t declared) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    send_all("PUT " + target +
             " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret-alice\r\nContent-Length: " +
             std::to_string(declared) + "\r\n\r\n");
  }
  ~RawUpload() { close(fd_); }
  bool connected() const { return connected_; }
  // False once the server stopped taking the body (it answered early and closed).
  bool send_all(std::string_view data) {
    for (size_t sent = 0; sent < data.size();) {
      ssize_t n = send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // Everything the server sends until it closes.
  std::string answer() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd_, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

TEST_F(S3Serve, LargeUploadsStreamedOrInPartsLandByteIdenticalWithTheirMd5) {
  const std::string large = random_bytes((41 << 20) + 123, 7), form = random_bytes((26 << 20) + 5, 8);
  // A PUT announces its length: one PUT to the bucket, streamed while the body arrives.
  auto put = server->curl_json("-X PUT --data-binary @" + write_local("large.bin", large).string() + " " +
                               files_url("many", "/outputs/large.bin"));
  ASSERT_EQ(put.at("etag").as_string(), md5_hex(large)) << put;
  // A multipart/form-data body does not (its file's length is not known up front): 5
  // parts of 5 MiB and a short last one, up to 4 at once on their way.
  auto posted =
      server->curl_json("-F file=@" + write_local("form.bin", form).string() + " " + files_url("many"));
  ASSERT_EQ(posted.at("etag").as_string(), md5_hex(form)) << posted;
  // Both objects are whole and in order (each read back and hashed), no part is left over.
  EXPECT_EQ(object_md5s(), (std::multiset<std::string>{md5_hex(large), md5_hex(form)}));
  EXPECT_EQ(s3->pending_multipart_uploads(), 0u);
  EXPECT_EQ(server->curl(files_url("many", "/" + file_id("/mnt/user-data/outputs/large.bin") + "/content")),
            large);
}

TEST_F(S3ServeMultipart, ALargePutWithSeveralPartsInFlightLandsByteIdenticalWithItsMd5) {
  const std::string large = random_bytes((41 << 20) + 123, 12);  // 8 parts and a short one
  auto put = server->curl_json("-X PUT --data-binary @" + write_local("large.bin", large).string() + " " +
                               files_url("many", "/outputs/large.bin"));
  ASSERT_EQ(put.at("etag").as_string(), md5_hex(large)) << put;
  EXPECT_EQ(object_md5s(), std::multiset<std::string>{md5_hex(large)});
  EXPECT_EQ(s3->pending_multipart_uploads(), 0u);
}

TEST_F(S3ServeMultipart, ACutUploadWithPartsInFlightLeavesNothingInTheBucket) {
  auto upload = std::make_unique<RawUpload>(server->port(),
                                            "/api/gpt/v1/files/outputs/cut.bin?scope_id=cutmany", 80u << 20);
  ASSERT_TRUE(upload->connected());
  // 33 MiB of a declared 80: six full parts handed to the bucket, some still in flight.
  ASSERT_TRUE(upload->send_all(random_bytes(33 << 20, 9)));
  EXPECT_TRUE(eventually([&] { return s3->pending_multipart_uploads() == 1; }));
  upload.reset();  // the connection goes
  // The multipart upload is aborted once its parts came back: no parts, no object. s3rver
  // has no AbortMultipartUpload, so sandboxd completes the upload and deletes the object:
  // for a moment between the two the parts are gone and the object is there.
  EXPECT_TRUE(eventually([&] { return s3->pending_multipart_uploads() == 0 && objects().empty(); }));
  EXPECT_EQ(server->status(files_url("cutmany", "/" + file_id("/mnt/user-data/outputs/cut.bin"))), 404);
}

TEST_F(S3Serve, ACutStreamedPutLeavesNothingAndKeepsThePreviousVersion) {
  const std::string previous = "the previous version";
  ASSERT_EQ(server
                ->curl_json("-X PUT --data-binary @" + write_local("p.txt", previous).string() + " " +
                            files_url("cutput", "/outputs/cut.bin"))
                .at("etag")
                .as_string(),
            md5_hex(previous));
  auto upload = std::make_unique<RawUpload>(server->port(),
                                            "/api/gpt/v1/files/outputs/cut.bin?scope_id=cutput", 80u << 20);
  ASSERT_TRUE(upload->connected());
  ASSERT_TRUE(upload->send_all(random_bytes(33 << 20, 13)));
  upload.reset();
  // Whatever the bucket was sent of it is gone (s3rver lists a PUT's object while it is
  // being written); the previous version stays.
  EXPECT_TRUE(eventually([&] {
    auto listed = objects();
    return listed.size() == 1 && listed[0].size == previous.size();
  }));
  EXPECT_EQ(object_md5s(), std::multiset<std::string>{md5_hex(previous)});
  EXPECT_EQ(s3->pending_multipart_uploads(), 0u);
  EXPECT_EQ(server->curl(files_url("cutput", "/" + file_id("/mnt/user-data/outputs/cut.bin") + "/content")),
            previous);
}

// The S3 server stops after 16 MiB of a 60 MiB PUT (parts or a streamed PUT under way):
// 503 with Retry-After, and nothing is kept.
void expect_503_when_the_bucket_stops_mid_upload(S3Server& s3, ServerProcess& server, bool multipart,
                                                 const std::function<std::vector<store::S3Object>()>& objects,
                                                 const std::string& files_url) {
  RawUpload upload(server.port(), "/api/gpt/v1/files/outputs/mid.bin?scope_id=midway", 60u << 20);
  ASSERT_TRUE(upload.connected());
  ASSERT_TRUE(upload.send_all(random_bytes(16 << 20, 10)));
  if (multipart) {
    for (int i = 0; i < 300 && s3.pending_multipart_uploads() != 1; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_EQ(s3.pending_multipart_uploads(), 1u);
  }
  s3.stop(SIGKILL);  // at once, its open requests cut (SIGTERM would wait for them)
  // The rest of the body from another thread (the server may stop reading it once it
  // knows the answer), the answer read here meanwhile.
  std::thread rest([&] { upload.send_all(random_bytes(44 << 20, 11)); });
  const std::string answer = upload.answer();
  rest.join();
  EXPECT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << answer.substr(0, 300);
  EXPECT_NE(answer.find("Retry-After: 3"), std::string::npos) << answer.substr(0, 300);
  EXPECT_NE(answer.find("overloaded_error"), std::string::npos) << answer.substr(0, 300);
  // Nothing was acknowledged: no record, and (the bucket back) no object: what s3rver
  // kept of a cut PUT is deleted once it answers again.
  EXPECT_EQ(server.status(files_url), 404);
  s3.start();
  for (int i = 0; i < 600 && !objects().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(objects().empty());
}

TEST_F(S3Serve, TheBucketStoppingMidStreamedPutIs503WithRetryAfterAndNothingIsKept) {
  expect_503_when_the_bucket_stops_mid_upload(
      *s3, *server, false, [&] { return objects(); },
      files_url("midway", "/" + file_id("/mnt/user-data/outputs/mid.bin")));
}

TEST_F(S3ServeMultipart, TheBucketStoppingMidMultipartUploadIs503WithRetryAfterAndNothingIsKept) {
  expect_503_when_the_bucket_stops_mid_upload(
      *s3, *server, true, [&] { return objects(); },
      files_url("midway", "/" + file_id("/mnt/user-data/outputs/mid.bin")));
}

TEST(S3Config, MaxPartsInFlightAndSinglePutMaxSizeAreBounded) {
  const std::string s3 =
      "storage:\n  backend: s3\n  s3:\n    endpoint: http://127.0.0.1:9000\n    bucket: sessions\n"
      "    accessKeyId: a\n    secretAccessKey: b\n";
  EXPECT_EQ(ops::parse_config(s3).s3.max_parts_in_flight, 4);
  EXPECT_EQ(ops::parse_config(s3).s3.single_put_max_bytes, 5ull << 30);
  EXPECT_EQ(ops::parse_config(s3 + "    maxPartsInFlight: 1\n").s3.max_parts_in_flight, 1);
  EXPECT_EQ(ops::parse_config(s3 + "    singlePutMaxSize: 0\n").s3.single_put_max_bytes, 0u);
  for (std::string bad :
       {"maxPartsInFlight: 0", "maxPartsInFlight: 17", "maxPartsInFlight: many", "singlePutMaxSize: 6Gi"}) {
    try {
      ops::parse_config(s3 + "    " + bad + "\n");
      ADD_FAILURE() << bad << " accepted";
    } catch (const ops::ConfigError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("storage.s3." + bad.substr(0, bad.find(':')) + ":", 0), 0u)
          << e.what();
    }
  }
}

class S3ServeShortInterval : public S3Serve {
  int flush_interval() const override { return 1; }
};

TEST_F(S3ServeShortInterval, ARunningSandboxIsFlushedWithinTheInterval) {
  ASSERT_EQ(bash("tick", "echo tick > tick.txt && echo ok").at("stdout").as_string(), "ok\n");
  // No stop: the periodic flush brings it to the bucket.
  EXPECT_TRUE(eventually([&] { return object_md5s() == std::multiset<std::string>{md5_hex("tick\n")}; }));
  // A deletion goes the same way.
  ASSERT_EQ(bash("tick", "rm tick.txt && echo ok").at("stdout").as_string(), "ok\n");
  EXPECT_TRUE(eventually([&] { return objects().empty(); }));
}

// sandboxd configured with a secret key the bucket does not know: the verifier refuses
// every request (403 SignatureDoesNotMatch), uploads answer 503 with Retry-After and
// acknowledge nothing, and /ready and the log say why.
class S3ServeWrongSecret : public S3Serve {
  std::string storage_yaml() const override {
    std::string yaml = S3Serve::storage_yaml();
    const std::string right = std::string("secretAccessKey: ") + S3Server::kSecretKey;
    yaml.replace(yaml.find(right), right.size(), "secretAccessKey: not-the-secret");
    return yaml;
  }
  bool expect_signed_right() const override { return false; }
};

TEST_F(S3ServeWrongSecret, UploadsAre503AndNothingIsAcknowledgedAndReadySaysWhy) {
  std::string headers =
      sh("curl -s -D - -o " + (work / "body").string() + " -H 'Authorization: Bearer secret-alice' " +
         "-F file=@" + write_local("in.txt", "hello").string() + " " + files_url("wrong"));
  EXPECT_NE(headers.find("HTTP/1.1 503"), std::string::npos) << headers;
  EXPECT_NE(headers.find("Retry-After: 3"), std::string::npos) << headers;
  EXPECT_NE(read_file(work / "body").find("overloaded_error"), std::string::npos) << read_file(work / "body");
  const std::string large = random_bytes((6 << 20) + 3, 9);  // a multipart one
  headers = sh("curl -s -D - -o /dev/null -H 'Authorization: Bearer secret-alice' -X PUT --data-binary @" +
               write_local("large.bin", large).string() + " " + files_url("wrong", "/outputs/large.bin"));
  EXPECT_NE(headers.find("HTTP/1.1 503"), std::string::npos) << headers;
  EXPECT_EQ(server->status(files_url("wrong", "/" + file_id("/mnt/user-data/outputs/large.bin"))), 404);
  EXPECT_EQ(server->status(files_url("wrong", "/" + file_id("/mnt/user-data/uploads/in.txt"))), 404);
  // Nothing in the bucket (read with the right key), nothing pending.
  EXPECT_TRUE(objects().empty());
  EXPECT_EQ(s3->pending_multipart_uploads(), 0u);
  EXPECT_GE(s3->refused_requests(), 2u) << s3->verifier_log();
  EXPECT_NE(server->log().find("SignatureDoesNotMatch"), std::string::npos) << server->log();
  const std::string ready = sh("curl -s " + server->url("/ready"));
  EXPECT_NE(ready.find("SignatureDoesNotMatch"), std::string::npos) << ready;
}

}  // namespace
}  // namespace sandboxd::testing
