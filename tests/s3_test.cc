// The S3 storage backend against a real S3 server process (s3rver, tests/s3_server.h):
// the client itself (signed requests, multipart, listing, errors), then sandboxd serve
// with storage.backend: s3 (uploads, flush, restore, the bucket going away).

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <openssl/evp.h>
#include <random>
#include <string>

#include "base/hex.h"
#include "s3_server.h"
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

store::S3Settings settings_for(const S3Server& s3) {
  store::S3Settings settings;
  settings.endpoint = s3.endpoint();
  settings.bucket = S3Server::kBucket;
  settings.access_key_id = S3Server::kAccessKey;
  settings.secret_access_key = S3Server::kSecretKey;
  settings.force_path_style = true;
  return settings;
}

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

}  // namespace
}  // namespace sandboxd::testing
