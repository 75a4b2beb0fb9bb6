// cluster::SnapshotBucket (E2B's snapshots in the sessions bucket, docs/storage.md) against
// a real S3 server (s3rver, tests/s3_server.h): a sparse volume image goes up as its data
// extents only (a multipart upload past the part size) and comes back byte for byte and
// as sparse, the memory's files with it; a deletion leaves nothing under the snapshot's
// prefix; a list of extents that is not one, or a snapshot with no objects, is a 503 and
// leaves no half-made folder's image; a folder with no image stores nothing.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>

#include "cluster/snapshot_bucket.h"
#include "s3_server.h"
#include "store/s3_client.h"

namespace sandboxd::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kPartBytes = 5ull << 20;  // S3's smallest part
constexpr uint64_t kImageBytes = 256ull << 20;

template <typename T>
T run(boost::asio::awaitable<T> work) {
  boost::asio::io_context io;
  auto future = boost::asio::co_spawn(io, std::move(work), boost::asio::use_future);
  io.run();
  return future.get();
}

std::string random_bytes(size_t size, unsigned seed) {
  std::mt19937 rng(seed);
  std::string out(size, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_at(int fd, const std::string& data, off_t offset) {
  ASSERT_EQ(pwrite(fd, data.data(), data.size(), offset), static_cast<ssize_t>(data.size()));
}

class SnapshotBucketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-snapshot-bucket-XXXXXX").string();
    root_ = mkdtemp(pattern.data());
    s3_ = std::make_unique<S3Server>();
    client_ = std::make_shared<store::S3Client>(s3_->client_settings());
    bucket_ = std::make_unique<cluster::SnapshotBucket>(client_, "sbx/", kPartBytes, 7);
  }
  void TearDown() override {
    bucket_.reset();
    s3_.reset();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  std::vector<store::S3Object> objects(const std::string& prefix = "sbx/snapshots/") {
    auto listed = client_->list_objects(prefix);
    EXPECT_TRUE(listed) << listed.error().describe();
    return listed ? *listed : std::vector<store::S3Object>{};
  }

  fs::path root_;
  std::unique_ptr<S3Server> s3_;
  std::shared_ptr<store::S3Client> client_;
  std::unique_ptr<cluster::SnapshotBucket> bucket_;
};

TEST_F(SnapshotBucketTest, ASparseImageGoesUpAsItsExtentsAndComesBackAsItWas) {
  const fs::path captured = root_ / "captured";
  fs::create_directories(captured / "memory" / "pages");
  const fs::path image = captured / "volume.img";
  // Three islands of data in a 256 MiB image: 12 MiB at the start (past a part: a
  // multipart upload), 64 KiB in the middle, 4 KiB at the very end.
  const std::string head = random_bytes(12 << 20, 1), middle = random_bytes(64 << 10, 2),
                    tail = random_bytes(4 << 10, 3);
  {
    int fd = ::open(image.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, kImageBytes), 0);
    write_at(fd, head, 0);
    write_at(fd, middle, 100 << 20);
    write_at(fd, tail, kImageBytes - tail.size());
    ::close(fd);
  }
  std::ofstream(captured / "memory" / "pages" / "state") << random_bytes(1 << 20, 4);
  std::ofstream(captured / "memory" / "kernels") << "kernel-list\n";

  ASSERT_TRUE(run(bucket_->upload("alice@example.com", "snap1", captured.string())));
  const std::string prefix = bucket_->prefix_of("alice@example.com", "snap1");
  EXPECT_TRUE(prefix.starts_with("sbx/snapshots/")) << prefix;
  EXPECT_EQ(prefix.find('@'), std::string::npos) << "the owner is hashed into the key";
  std::map<std::string, uint64_t> sizes;
  for (const auto& object : objects()) sizes[object.key.substr(prefix.size())] = object.size;
  ASSERT_EQ(sizes.size(), 4u);
  ASSERT_TRUE(sizes.contains("volume.extents") && sizes.contains("volume.data"));
  EXPECT_TRUE(sizes.contains("memory/kernels") && sizes.contains("memory/pages/state"));
  // The data extents only (file systems allocate by blocks: at least what was written,
  // far from the apparent size).
  EXPECT_GE(sizes["volume.data"], head.size() + middle.size() + tail.size());
  EXPECT_LT(sizes["volume.data"], 32ull << 20);

  const fs::path fetched = root_ / "fetched";
  ASSERT_TRUE(run(bucket_->download("alice@example.com", "snap1", fetched.string())));
  struct stat original {
  }, copy{};
  ASSERT_EQ(stat(image.c_str(), &original), 0);
  ASSERT_EQ(stat((fetched / "volume.img").c_str(), &copy), 0);
  EXPECT_EQ(copy.st_size, original.st_size);
  EXPECT_LE(copy.st_blocks, original.st_blocks + 64) << "the copy is not sparse";
  EXPECT_TRUE(read_all(fetched / "volume.img") == read_all(image)) << "the image's bytes differ";
  EXPECT_EQ(read_all(fetched / "memory" / "kernels"), "kernel-list\n");
  EXPECT_TRUE(read_all(fetched / "memory" / "pages" / "state") ==
              read_all(captured / "memory" / "pages" / "state"));
  // Nothing else in the folder (the downloaded extents and their list are gone).
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(fetched)) names.insert(entry.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"memory", "volume.img"}));
  EXPECT_EQ(fs::status(fetched).permissions() & fs::perms::all, fs::perms::owner_all);

  run(bucket_->remove("alice@example.com", "snap1"));
  EXPECT_TRUE(objects().empty());
}

TEST_F(SnapshotBucketTest, WhatIsNotASnapshotIsRefused) {
  // No objects at all (deleted a moment ago): a 503, to be retried.
  auto missing = run(bucket_->download("alice", "gone", (root_ / "gone").string()));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, ErrorKind::overloaded);
  EXPECT_EQ(missing.error().retry_after, 7);
  // A list of extents that is not one (past the image, overlapping, or not numbers) is
  // refused before anything is written into an image.
  const std::string prefix = bucket_->prefix_of("alice", "bad");
  ASSERT_TRUE(client_->put_object(prefix + "volume.data", std::string(8192, 'x')));
  int n = 0;
  for (const std::string list :
       {"sandboxd-extents 1\n4096\n0 8192\n", "sandboxd-extents 1\n65536\n0 8192\n4096 4096\n",
        "sandboxd-extents 1\n65536\nzero 8192\n", "something else\n65536\n0 8192\n"}) {
    ASSERT_TRUE(client_->put_object(prefix + "volume.extents", list));
    const fs::path folder = root_ / ("bad-" + std::to_string(++n));
    auto refused = run(bucket_->download("alice", "bad", folder.string()));
    ASSERT_FALSE(refused) << list;
    EXPECT_EQ(refused.error().kind, ErrorKind::overloaded) << list;
    EXPECT_FALSE(fs::exists(folder / "volume.img")) << list;
  }
  // A folder with no image stores nothing.
  fs::create_directories(root_ / "empty");
  auto stored = run(bucket_->upload("alice", "empty", (root_ / "empty").string()));
  ASSERT_FALSE(stored);
  EXPECT_TRUE(objects(bucket_->prefix_of("alice", "empty")).empty());
}

// The uploads a capture put beside the volume come back as they were: folders and files,
// their owners, modes and modification times, names of any bytes (an uploader chose them);
// a list of uploads that names a place outside the folder is refused.
TEST_F(SnapshotBucketTest, UploadsComeBackWithTheirOwnersModesAndTimesAndAHostileListIsRefused) {
  const fs::path captured = root_ / "with-uploads";
  fs::create_directories(captured / "uploads" / "data 2026");
  {
    int fd = ::open((captured / "volume.img").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
    write_at(fd, "ext4 here", 0);
    ::close(fd);
  }
  const std::string odd_name = "line\nbreak %41 \xff.csv";
  std::ofstream(captured / "uploads" / "notes.txt") << "uploaded notes";
  std::ofstream(captured / "uploads" / "data 2026" / odd_name) << "a,b\n1,2\n";
  ASSERT_EQ(chown((captured / "uploads" / "notes.txt").c_str(), 1000, 1000), 0);
  ASSERT_EQ(chmod((captured / "uploads" / "notes.txt").c_str(), 0640), 0);
  const struct timespec then[2] = {{1700000000, 123456789}, {1700000000, 123456789}};
  ASSERT_EQ(utimensat(AT_FDCWD, (captured / "uploads" / "notes.txt").c_str(), then, 0), 0);
  ASSERT_EQ(chmod((captured / "uploads" / "data 2026").c_str(), 0750), 0);

  ASSERT_TRUE(run(bucket_->upload("alice", "up1", captured.string())));
  for (const auto& object : objects(bucket_->prefix_of("alice", "up1")))
    EXPECT_EQ(object.key.find("line"), std::string::npos) << "a name in a key: " << object.key;
  const fs::path fetched = root_ / "fetched-uploads";
  ASSERT_TRUE(run(bucket_->download("alice", "up1", fetched.string())));
  EXPECT_EQ(read_all(fetched / "uploads" / "notes.txt"), "uploaded notes");
  EXPECT_EQ(read_all(fetched / "uploads" / "data 2026" / odd_name), "a,b\n1,2\n");
  struct stat st {};
  ASSERT_EQ(stat((fetched / "uploads" / "notes.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_gid, 1000u);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_mtim.tv_sec, 1700000000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 123456789);
  ASSERT_EQ(stat((fetched / "uploads" / "data 2026").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);

  // A list naming "../escaped" (hex), or a line cut short: refused, nothing written out.
  const std::string prefix = bucket_->prefix_of("alice", "up1");
  for (const std::string list :
       {"sandboxd-uploads 1\nd 755 0 0 0 0 0 2e\nf 644 0 0 0 0 14 2e2e2f65736361706564\n",
        "sandboxd-uploads 1\nf 644 0 0 0 0 14\n"}) {
    ASSERT_TRUE(client_->put_object(prefix + "uploads.list", list));
    const fs::path folder = root_ / "hostile";
    fs::remove_all(folder);
    auto refused = run(bucket_->download("alice", "up1", folder.string()));
    ASSERT_FALSE(refused) << list;
    EXPECT_FALSE(fs::exists(folder / "escaped")) << list;
  }
  run(bucket_->remove("alice", "up1"));
  EXPECT_TRUE(objects(bucket_->prefix_of("alice", "up1")).empty());
}

}  // namespace
}  // namespace sandboxd::testing
