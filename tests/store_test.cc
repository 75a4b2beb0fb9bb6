// The storage module: keys and ids, the SQLite metadata index, file bodies on disk
// (atomic writes, symlink containment, sync) and the streaming multipart parser.
// Everything runs against real files under a mkdtemp directory and a real database.
#include <fcntl.h>
#include <openssl/evp.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "postgres_harness.h"
#include "store/file_store.h"
#include "store/keys.h"
#include "store/lease_store.h"
#include "store/metadata.h"
#include "store/mime.h"
#include "store/multipart.h"
#include "store/schema.h"
#include "store/skill_store.h"
#include "store/thread_store.h"
#include "store/tree_changes.h"

namespace sandboxd::store {
namespace {

namespace fs = std::filesystem;
using sandboxd::ContainerPaths;

// A file operation's outcome as something gtest compares and prints: nullopt when it
// succeeded, else why it failed.
constexpr std::optional<FileError> kSucceeded = std::nullopt;
template <typename T>
std::optional<FileError> error_of(const FileResult<T>& result) {
  if (result) return kSucceeded;
  return result.error();
}

constexpr uid_t kAgentUid = 1000;
constexpr gid_t kAgentGid = 1000;

const std::string kUploads = "/mnt/user-data/uploads";
const std::string kOutputs = "/mnt/user-data/outputs";
const std::string kWorkspace = "/home/agent/workspace";

const std::string kPng(
    "\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02"
    "\x00"
    "\x00\x00\x90\x77\x53\xde\x00\x00\x00\x0c\x49\x44\x41\x54\x78\x9c\x63\xf8\xcf\xc0\x00\x00\x03\x01\x01\x00"
    "\xc9"
    "\xfe\x92\xef\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82",
    69);

std::string md5_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, EVP_md5(), nullptr);
  std::string out;
  char hex[3];
  for (unsigned int i = 0; i < length; ++i) {
    snprintf(hex, sizeof hex, "%02x", digest[i]);
    out += hex;
  }
  return out;
}

std::string read_host_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_host_file(const fs::path& path, std::string_view content) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
}

std::string read_fd(int fd) {
  std::string out;
  char buffer[65536];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof buffer)) > 0) out.append(buffer, static_cast<size_t>(n));
  return out;
}

void set_mtime(const fs::path& path, int64_t seconds) {
  timespec times[2] = {{seconds, 0}, {seconds, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0);
}

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-store-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);  // remove_all never follows symlinks
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// ===================================================================== keys and ids

TEST(Keys, AcceptsOrdinaryKeys) {
  const std::string max_length_key = std::string(255, 'a') + "/" + std::string(255, 'b') + "/" +
                                     std::string(255, 'c') + "/" + std::string(200, 'd') + "/" +
                                     std::string(55, 'e');
  ASSERT_EQ(max_length_key.size(), kMaxKeyLength);
  for (const std::string& key :
       std::vector<std::string>{"sales.csv", "data/2026/q3.xlsx", "outputs/chart.png", "a b/c d.txt",
                                ".hidden", "..a", "a..", "...", "a\\b", "..\\x", "caf\xc3\xa9.csv",
                                "100%.txt", "%41%42", "a/%2e%2ex", "%2e%2e%2e", std::string(255, 'x')}) {
    EXPECT_EQ(validate_key(key), "") << key;
  }
  EXPECT_EQ(validate_key(max_length_key), "");
}

TEST(Keys, RejectsEachClassWithAReason) {
  struct Case {
    std::string key;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"", "key must not be empty"},
      {"/etc/passwd", "key must be relative"},
      {"/", "key must be relative"},
      {"..", "key must not contain '..' segments"},
      {"../x", "key must not contain '..' segments"},
      {"a/../../x", "key must not contain '..' segments"},
      {"a/..", "key must not contain '..' segments"},
      {".", "key must not contain '.' segments"},
      {"./a", "key must not contain '.' segments"},
      {"a/./b", "key must not contain '.' segments"},
      {"%2e%2e/x", "key must not contain '..' segments"},
      {"%2E%2e/etc", "key must not contain '..' segments"},
      {"a/%2E%2E", "key must not contain '..' segments"},
      {"..%2fetc", "key must not contain '..' segments"},
      {"a%2f..%2fb", "key must not contain '..' segments"},
      {"%252e%252e/x", "key must not contain '..' segments"},
      {"%25252E%25252E/x", "key must not contain '..' segments"},
      {"%2e/x", "key must not contain '.' segments"},
      {"a/", "key must not end with '/'"},
      {"outputs/", "key must not end with '/'"},
      {"a//b", "key must not contain empty segments"},
      {std::string("a\0b", 3), "key must not contain NUL characters"},
      {"a\x01"
       "b",
       "key must not contain control characters"},
      {"a\nb", "key must not contain control characters"},
      {"a\x7f", "key must not contain control characters"},
      {std::string(5000, 'k'), "key is too long (max 1024 bytes)"},
      {std::string(kMaxKeyLength + 1, 'k'), "key is too long (max 1024 bytes)"},
      {"dir/" + std::string(256, 's'), "key segment is too long (max 255 bytes)"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(validate_key(c.key), c.reason) << "key: " << c.key.substr(0, 40);
  }
}

TEST(Keys, MapToSandboxPathsAndBack) {
  EXPECT_EQ(sandbox_path_for_key("data/q3.xlsx"), kUploads + "/data/q3.xlsx");
  EXPECT_EQ(sandbox_path_for_key("outputs/chart.png"), kOutputs + "/chart.png");
  EXPECT_EQ(sandbox_path_for_key("outputs"), kUploads + "/outputs");
  EXPECT_EQ(sandbox_path_for_key("outputsx/a"), kUploads + "/outputsx/a");

  EXPECT_EQ(key_for_sandbox_path(kUploads + "/data/q3.xlsx"), "data/q3.xlsx");
  EXPECT_EQ(key_for_sandbox_path(kOutputs + "/chart.png"), "outputs/chart.png");
  EXPECT_EQ(key_for_sandbox_path(kWorkspace + "/notes.txt"), std::nullopt);
  EXPECT_EQ(key_for_sandbox_path(kUploads), std::nullopt);
  EXPECT_EQ(key_for_sandbox_path(kUploads + "x/a"), std::nullopt);
  for (const std::string key : {"a.csv", "data/2026/q3.xlsx", "outputs/r/chart.png"}) {
    EXPECT_EQ(key_for_sandbox_path(sandbox_path_for_key(key)), key);
  }
}

TEST(FileIds, SeedExampleAndRoundTrips) {
  EXPECT_EQ(file_id_for_path("/mnt/user-data/uploads/sales.csv"),
            "L21udC91c2VyLWRhdGEvdXBsb2Fkcy9zYWxlcy5jc3Y");
  EXPECT_EQ(file_id_for_path("/mnt/user-data/outputs/revenue.png"),
            "L21udC91c2VyLWRhdGEvb3V0cHV0cy9yZXZlbnVlLnBuZw");
  EXPECT_EQ(path_for_file_id("L21udC91c2VyLWRhdGEvdXBsb2Fkcy9zYWxlcy5jc3Y"),
            "/mnt/user-data/uploads/sales.csv");
  for (const std::string path : {"/a", "/ab", "/abc", "/mnt/user-data/uploads/caf\xc3\xa9 \xe2\x82\xac.csv",
                                 "/home/agent/workspace/x?y&z=1"}) {
    std::string id = file_id_for_path(path);
    EXPECT_EQ(id.find_first_of("+/="), std::string::npos) << id;
    EXPECT_EQ(path_for_file_id(id), path);
  }
}

TEST(FileIds, RejectsWhatIsNotAnAbsolutePath) {
  EXPECT_EQ(path_for_file_id(""), std::nullopt);
  EXPECT_EQ(path_for_file_id("Zm9v"), std::nullopt);                                     // "foo": relative
  EXPECT_EQ(path_for_file_id(base64url_encode(std::string("/a\0b", 4))), std::nullopt);  // NUL
  EXPECT_EQ(path_for_file_id("L2E+"), std::nullopt);  // '+' is standard base64, not base64url
  EXPECT_EQ(path_for_file_id("L2E="), std::nullopt);  // padding
  EXPECT_EQ(path_for_file_id("L2E.YQ"), std::nullopt);
}

TEST(Base64Url, Rfc4648VectorsWithoutPadding) {
  const std::pair<std::string, std::string> vectors[] = {
      {"", ""},           {"f", "Zg"},          {"fo", "Zm8"},         {"foo", "Zm9v"},
      {"foob", "Zm9vYg"}, {"fooba", "Zm9vYmE"}, {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64url_encode(plain), encoded);
    EXPECT_EQ(base64url_decode(encoded), plain);
  }
  EXPECT_EQ(base64url_encode("\xfb\xff\xbf"), "-_-_");
  EXPECT_EQ(base64url_decode("-_-_"), "\xfb\xff\xbf");
}

TEST(Base64Url, DecodingIsStrict) {
  EXPECT_EQ(base64url_decode("Z"), std::nullopt);      // a length no encoding produces
  EXPECT_EQ(base64url_decode("Zm9v!"), std::nullopt);  // bad character
  EXPECT_EQ(base64url_decode("Zm9vYg=="), std::nullopt);
  EXPECT_EQ(base64url_decode("Zm9v Yg"), std::nullopt);
  EXPECT_EQ(base64url_decode("Zh"), std::nullopt);  // non-zero unused bits: not canonical
}

TEST(Base64Url, RoundTripsRandomBytes) {
  std::mt19937 random(7);
  for (int length = 0; length < 200; ++length) {
    std::string bytes(static_cast<size_t>(length), '\0');
    for (auto& b : bytes) b = static_cast<char>(random() & 0xff);
    EXPECT_EQ(base64url_decode(base64url_encode(bytes)), bytes);
  }
}

// ========================================================================= metadata

// Every metadata test runs on both backends, SQLite and a real PostgreSQL, each with the
// file records held in memory (what `sandboxd serve` does) and without: the same answers.
struct MetadataCase {
  db::Backend backend;
  bool cached;
};

class MetadataTest : public ::testing::TestWithParam<MetadataCase> {
 protected:
  MetadataTest() {
    if (GetParam().cached) metadata_.enable_file_cache(FileCacheLimits{});
  }

  FileRecord file(const std::string& path, int64_t created_at, uint64_t size = 1) {
    FileRecord record;
    record.storage = "s1";
    record.path = path;
    record.created_at = created_at;
    record.size = size;
    record.etag = md5_hex(path);
    record.mime = "text/plain";
    record.mtime_ns = created_at * 1'000'000'000;
    return record;
  }

  static std::vector<std::string> paths_of(const FilePage& page) {
    std::vector<std::string> out;
    for (const auto& f : page.files) out.push_back(f.path);
    return out;
  }

  sandboxd::testing::TestDatabase database_{GetParam().backend};
  Metadata metadata_{database_.open()};
};

INSTANTIATE_TEST_SUITE_P(
    Backends, MetadataTest,
    ::testing::Values(MetadataCase{db::Backend::kSqlite, false}, MetadataCase{db::Backend::kPostgres, false},
                      MetadataCase{db::Backend::kSqlite, true}, MetadataCase{db::Backend::kPostgres, true}),
    [](const ::testing::TestParamInfo<MetadataCase>& info) {
      return std::string(info.param.backend == db::Backend::kPostgres ? "Postgres" : "Sqlite") +
             (info.param.cached ? "Cached" : "");
    });

// A container's network options (service/egress_options.h) are a column of its row: set,
// read back with it, replaced, and only for the container with that storage (one made
// again under the same id is another).
TEST_P(MetadataTest, AContainersNetworkOptionsAreKeptWithItsRow) {
  metadata_.create_container({"alice", "c1", "st-a", 100, 100});
  EXPECT_EQ(metadata_.find_container("alice", "c1")->egress, "");
  EXPECT_TRUE(metadata_.set_container_egress("alice", "c1", "st-a", R"({"allowOut":["a.test"]})"));
  EXPECT_EQ(metadata_.find_container("alice", "c1")->egress, R"({"allowOut":["a.test"]})");
  EXPECT_EQ(metadata_.list_containers("alice", 10, "")[0].egress, R"({"allowOut":["a.test"]})");
  EXPECT_FALSE(metadata_.set_container_egress("alice", "c1", "st-other", "{}"));
  EXPECT_FALSE(metadata_.set_container_egress("alice", "gone", "st-a", "{}"));
  EXPECT_TRUE(metadata_.set_container_egress("alice", "c1", "st-a", ""));
  EXPECT_EQ(metadata_.find_container("alice", "c1")->egress, "");
  EXPECT_EQ(metadata_.list_containers("alice", 10, "")[0].egress, "");
}

TEST_P(MetadataTest, ContainersCreateFindTouchListDelete) {
  ContainerRecord a{"alice", "c1", "st-a", 100, 100};
  EXPECT_EQ(metadata_.create_container(a).storage, "st-a");
  ContainerRecord again{"alice", "c1", "st-other", 200, 200};
  ContainerRecord existing = metadata_.create_container(again);
  EXPECT_EQ(existing.storage, "st-a");
  EXPECT_EQ(existing.created_at, 100);

  metadata_.create_container({"alice", "c0", "st-b", 100, 100});
  metadata_.create_container({"alice", "c2", "st-c", 50, 50});
  metadata_.create_container({"bob", "c1", "st-d", 10, 10});
  EXPECT_THROW(metadata_.create_container({"carol", "x", "st-a", 1, 1}),
               std::runtime_error);  // storage is unique

  EXPECT_EQ(metadata_.find_container("bob", "c1")->storage, "st-d");
  EXPECT_EQ(metadata_.find_container("bob", "c0"), std::nullopt);

  metadata_.touch_container("alice", "c1", 999);
  EXPECT_EQ(metadata_.find_container("alice", "c1")->last_used_at, 999);

  auto ids = [](const std::vector<ContainerRecord>& list) {
    std::vector<std::string> out;
    for (const auto& c : list) out.push_back(c.id);
    return out;
  };
  EXPECT_EQ(ids(metadata_.list_containers("alice", 10, "")), (std::vector<std::string>{"c2", "c0", "c1"}));
  EXPECT_EQ(ids(metadata_.list_containers("alice", 1, "")), (std::vector<std::string>{"c2"}));
  EXPECT_EQ(ids(metadata_.list_containers("alice", 10, "c2")), (std::vector<std::string>{"c0", "c1"}));
  EXPECT_EQ(ids(metadata_.list_containers("alice", 10, "c0")), (std::vector<std::string>{"c1"}));
  EXPECT_TRUE(metadata_.list_containers("alice", 10, "gone").empty());
  EXPECT_EQ(metadata_.all_containers().size(), 4u);

  metadata_.put_file(file("/mnt/user-data/uploads/a", 1), true);
  FileRecord other = file("/mnt/user-data/uploads/a", 1);
  other.storage = "st-d";
  metadata_.put_file(other, true);
  FileRecord mine = file("/mnt/user-data/uploads/a", 1);
  mine.storage = "st-a";
  metadata_.put_file(mine, true);
  metadata_.delete_container("alice", "c1");
  EXPECT_EQ(metadata_.find_container("alice", "c1"), std::nullopt);
  EXPECT_TRUE(metadata_.files_of("st-a").empty());
  EXPECT_EQ(metadata_.files_of("st-d").size(), 1u);
}

TEST_P(MetadataTest, PutFileKeepsOrResetsCreation) {
  metadata_.put_file(file(kUploads + "/a", 100, 10), true);
  metadata_.put_file(file(kUploads + "/b", 100, 20), true);
  auto a = metadata_.find_file("s1", kUploads + "/a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->created_at, 100);
  EXPECT_EQ(a->size, 10u);
  EXPECT_EQ(a->etag, md5_hex(kUploads + "/a"));

  FileRecord changed = file(kUploads + "/a", 500, 11);
  changed.etag = "0123456789abcdef0123456789abcdef";
  changed.mime = "text/csv";
  metadata_.put_file(changed, false);
  auto kept = metadata_.find_file("s1", kUploads + "/a");
  EXPECT_EQ(kept->created_at, 100);
  EXPECT_EQ(kept->seq, a->seq);
  EXPECT_EQ(kept->size, 11u);
  EXPECT_EQ(kept->etag, changed.etag);
  EXPECT_EQ(kept->mime, "text/csv");

  metadata_.put_file(file(kUploads + "/a", 100, 12), true);  // an overwrite by upload
  auto reset = metadata_.find_file("s1", kUploads + "/a");
  EXPECT_GT(reset->seq, metadata_.find_file("s1", kUploads + "/b")->seq);
  EXPECT_EQ(paths_of(metadata_.list_files("s1", {}, 10, std::nullopt, std::nullopt)),
            (std::vector<std::string>{kUploads + "/b", kUploads + "/a"}));

  EXPECT_EQ(metadata_.total_bytes(), 32u);
  EXPECT_TRUE(metadata_.delete_file("s1", kUploads + "/a"));
  EXPECT_FALSE(metadata_.delete_file("s1", kUploads + "/a"));
  EXPECT_EQ(metadata_.find_file("s1", kUploads + "/a"), std::nullopt);
}

TEST_P(MetadataTest, ListOrdersByCreationThenInsertion) {
  const int64_t created[] = {5, 3, 5, 3, 4};
  for (int i = 0; i < 5; ++i) metadata_.put_file(file(kUploads + "/f" + std::to_string(i), created[i]), true);
  auto page = metadata_.list_files("s1", {kUploads + "/"}, 10, std::nullopt, std::nullopt);
  EXPECT_EQ(paths_of(page), (std::vector<std::string>{kUploads + "/f1", kUploads + "/f3", kUploads + "/f4",
                                                      kUploads + "/f0", kUploads + "/f2"}));
  EXPECT_FALSE(page.has_more);
  EXPECT_EQ(metadata_.files_of("s1").front().path, kUploads + "/f1");
}

TEST_P(MetadataTest, PagesAfterAndBeforeWithHasMore) {
  std::vector<std::string> all;
  for (int i = 0; i < 7; ++i) {
    all.push_back(kUploads + "/f" + std::to_string(i));
    metadata_.put_file(file(all.back(), 100 + i / 2), true);  // ties on purpose
  }
  auto slice = [&](size_t from, size_t to) {
    return std::vector<std::string>(all.begin() + from, all.begin() + to);
  };

  auto first = metadata_.list_files("s1", {}, 3, std::nullopt, std::nullopt);
  EXPECT_EQ(paths_of(first), slice(0, 3));
  EXPECT_TRUE(first.has_more);
  auto second = metadata_.list_files("s1", {}, 3, first.files.back().path, std::nullopt);
  EXPECT_EQ(paths_of(second), slice(3, 6));
  EXPECT_TRUE(second.has_more);
  auto third = metadata_.list_files("s1", {}, 3, second.files.back().path, std::nullopt);
  EXPECT_EQ(paths_of(third), slice(6, 7));
  EXPECT_FALSE(third.has_more);

  auto previous = metadata_.list_files("s1", {}, 3, std::nullopt, third.files.front().path);
  EXPECT_EQ(paths_of(previous), slice(3, 6));  // the 3 right before, ascending
  EXPECT_TRUE(previous.has_more);
  auto before_that = metadata_.list_files("s1", {}, 3, std::nullopt, all[2]);
  EXPECT_EQ(paths_of(before_that), slice(0, 2));
  EXPECT_FALSE(before_that.has_more);

  auto between = metadata_.list_files("s1", {}, 10, all[1], all[5]);
  EXPECT_EQ(paths_of(between), slice(2, 5));
  EXPECT_FALSE(between.has_more);
  auto between_limited = metadata_.list_files("s1", {}, 2, all[1], all[5]);
  EXPECT_EQ(paths_of(between_limited), slice(2, 4));
  EXPECT_TRUE(between_limited.has_more);

  auto last = metadata_.list_files("s1", {}, 3, all.back(), std::nullopt);
  EXPECT_TRUE(last.files.empty());
  EXPECT_FALSE(last.has_more);
}

TEST_P(MetadataTest, UnknownCursorGivesAnEmptyPage) {
  metadata_.put_file(file(kUploads + "/a", 1), true);
  auto after = metadata_.list_files("s1", {}, 10, kUploads + "/missing", std::nullopt);
  EXPECT_TRUE(after.files.empty());
  EXPECT_FALSE(after.has_more);
  auto before = metadata_.list_files("s1", {}, 10, std::nullopt, kUploads + "/missing");
  EXPECT_TRUE(before.files.empty());
  // A path of another storage is no cursor here either.
  FileRecord elsewhere = file(kUploads + "/b", 1);
  elsewhere.storage = "s2";
  metadata_.put_file(elsewhere, true);
  EXPECT_TRUE(metadata_.list_files("s1", {}, 10, kUploads + "/b", std::nullopt).files.empty());
}

TEST_P(MetadataTest, FiltersByPathPrefixes) {
  metadata_.put_file(file(kUploads + "/data/2026/a.csv", 1), true);
  metadata_.put_file(file(kUploads + "/data/20261/b.csv", 2), true);
  metadata_.put_file(file(kOutputs + "/chart.png", 3), true);
  metadata_.put_file(file(kWorkspace + "/scratch.txt", 4), true);
  metadata_.put_file(file(kUploads + "/data/2026/c.csv", 5), true);
  FileRecord other = file(kUploads + "/data/2026/z.csv", 0);
  other.storage = "s2";
  metadata_.put_file(other, true);

  EXPECT_EQ(
      paths_of(metadata_.list_files("s1", {kUploads + "/", kOutputs + "/"}, 10, std::nullopt, std::nullopt)),
      (std::vector<std::string>{kUploads + "/data/2026/a.csv", kUploads + "/data/20261/b.csv",
                                kOutputs + "/chart.png", kUploads + "/data/2026/c.csv"}));
  auto narrow = metadata_.list_files("s1", {kUploads + "/data/2026/"}, 1, std::nullopt, std::nullopt);
  EXPECT_EQ(paths_of(narrow), (std::vector<std::string>{kUploads + "/data/2026/a.csv"}));
  EXPECT_TRUE(narrow.has_more);
  auto next =
      metadata_.list_files("s1", {kUploads + "/data/2026/"}, 1, narrow.files.back().path, std::nullopt);
  EXPECT_EQ(paths_of(next), (std::vector<std::string>{kUploads + "/data/2026/c.csv"}));
  EXPECT_FALSE(next.has_more);
  EXPECT_EQ(
      metadata_.list_files("s1", {kUploads + "/data/2026"}, 10, std::nullopt, std::nullopt).files.size(), 3u);
  EXPECT_TRUE(
      metadata_.list_files("s1", {kUploads + "/nothing"}, 10, std::nullopt, std::nullopt).files.empty());

  EXPECT_EQ(metadata_.delete_prefix("s1", kUploads + "/data/2026/"), 2u);
  EXPECT_EQ(metadata_.files_of("s1").size(), 3u);
  EXPECT_EQ(metadata_.files_of("s2").size(), 1u);
}

TEST_P(MetadataTest, TenThousandFilesPageForwardBackwardAndFromTheMiddle) {
  std::vector<std::string> expected;
  for (int i = 0; i < 10'000; ++i) {
    char name[64];
    snprintf(name, sizeof name, "%s/dir%02d/file%05d.csv", (i % 3 ? kUploads : kOutputs).c_str(), i % 50, i);
    expected.push_back(name);
    metadata_.put_file(file(name, 1'700'000'000 + i / 100), true);
  }
  const std::vector<std::string> prefixes = {kUploads + "/", kOutputs + "/"};

  std::vector<std::string> forward;
  std::optional<std::string> cursor;
  int pages = 0;
  for (;;) {
    auto page = metadata_.list_files("s1", prefixes, 1000, cursor, std::nullopt);
    for (const auto& f : page.files) forward.push_back(f.path);
    ++pages;
    if (!page.has_more) break;
    cursor = page.files.back().path;
  }
  EXPECT_EQ(pages, 10);
  EXPECT_EQ(forward, expected);

  std::vector<std::string> backward;
  std::optional<std::string> before = expected.back();
  backward.push_back(expected.back());
  for (;;) {
    auto page = metadata_.list_files("s1", prefixes, 1000, std::nullopt, before);
    auto page_paths = paths_of(page);
    backward.insert(backward.begin(), page_paths.begin(), page_paths.end());
    if (!page.has_more) break;
    before = page.files.front().path;
  }
  EXPECT_EQ(backward, expected);

  // A page from the middle (its speed is measured by bench/, not here).
  auto page = metadata_.list_files("s1", prefixes, 1000, expected[4000], std::nullopt);
  ASSERT_EQ(page.files.size(), 1000u);
  EXPECT_EQ(page.files.front().path, expected[4001]);
}

TEST_P(MetadataTest, ReopensTheSameDatabaseWithItsSchemaVersion) {
  metadata_.put_file(file(kUploads + "/kept", 42), true);
  metadata_.create_container({"alice", "c1", "st-a", 1, 1});
  {
    Metadata reopened(database_.open());
    EXPECT_EQ(reopened.find_file("s1", kUploads + "/kept")->created_at, 42);
    EXPECT_TRUE(reopened.find_container("alice", "c1"));
  }
  {
    auto database = database_.open();
    auto conn = database->acquire();
    db::Statement versions(conn, "SELECT version FROM schema_migrations ORDER BY version");
    std::vector<int64_t> applied;
    while (versions.step()) applied.push_back(versions.integer(0));
    EXPECT_EQ(applied.size(), schema::migrations().size());
    EXPECT_EQ(applied.back(), schema::migrations().back().version);
  }
  if (GetParam().backend != db::Backend::kSqlite) return;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(database_.sqlite_path().c_str(), &db), SQLITE_OK);
  auto scalar = [db](const char* sql) {
    sqlite3_stmt* stmt = nullptr;
    sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
    std::string value =
        sqlite3_step(stmt) == SQLITE_ROW ? reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)) : "";
    sqlite3_finalize(stmt);
    return value;
  };
  EXPECT_EQ(scalar("PRAGMA user_version"), std::to_string(schema::migrations().back().version));
  EXPECT_EQ(scalar("PRAGMA journal_mode"), "wal");
  sqlite3_close(db);
}

TEST_P(MetadataTest, PathsThatAreNotUtf8KeepTheirBytesAndByteOrder) {
  // Sandbox paths are bytes: a file made in a sandbox may have any name but NUL and '/'.
  const std::string base = kOutputs + "/";
  const std::vector<std::string> names = {"a",    "\xc3\xa9", "\x7f",  "\x80",    "\xc3\x28",
                                          "\xff", "\xff\xfe", "\xffz", "\xff\xff"};
  int64_t created = 1;
  for (const auto& name : names) metadata_.put_file(file(base + name, created++), true);
  FileRecord sibling = file(kOutputs + "0", created++);  // just past the prefix range of "outputs/"
  metadata_.put_file(sibling, true);

  for (const auto& name : names) {
    auto found = metadata_.find_file("s1", base + name);
    ASSERT_TRUE(found) << name;
    EXPECT_EQ(found->path, base + name);
    EXPECT_EQ(found->etag, md5_hex(base + name));
  }
  auto all = metadata_.list_files("s1", {base}, 100, std::nullopt, std::nullopt);
  std::vector<std::string> expected;
  for (const auto& name : names) expected.push_back(base + name);
  EXPECT_EQ(paths_of(all), expected);  // by creation, with every byte intact

  // The prefix range [prefix, prefix with its last byte + 1) in byte order: "\xff"'s
  // upper bound drops the 0xff and bumps the '/' before it.
  auto high = metadata_.list_files("s1", {base + "\xff"}, 100, std::nullopt, std::nullopt);
  EXPECT_EQ(paths_of(high),
            (std::vector<std::string>{base + "\xff", base + "\xff\xfe", base + "\xffz", base + "\xff\xff"}));
  auto cursor = metadata_.list_files("s1", {base + "\xff"}, 1, base + "\xff\xfe", std::nullopt);
  EXPECT_EQ(paths_of(cursor), (std::vector<std::string>{base + "\xffz"}));
  auto invalid_pair = metadata_.list_files("s1", {base + "\xc3"}, 100, std::nullopt, std::nullopt);
  EXPECT_EQ(paths_of(invalid_pair), (std::vector<std::string>{base + "\xc3\xa9", base + "\xc3\x28"}));
  EXPECT_EQ(metadata_.delete_prefix("s1", base + "\xff"), 4u);
  EXPECT_EQ(metadata_.files_of("s1").size(), names.size() - 4 + 1);
  EXPECT_TRUE(metadata_.delete_file("s1", base + "\x80"));
  EXPECT_FALSE(metadata_.find_file("s1", base + "\x80"));

  // Ids from outside that are not UTF-8 name nothing (PostgreSQL's TEXT could not hold them).
  EXPECT_EQ(metadata_.find_container("alice", "c\xff"), std::nullopt);
  EXPECT_TRUE(metadata_.list_containers("alice", 10, "\xff").empty());
  metadata_.touch_container("alice", "\xff", 1);
  metadata_.delete_container("alice", "\xff");
}

// Two processes (here: threads, each with connections of its own) starting on one new
// database at once: exactly one of them migrates, the other waits and finds it done.
TEST_P(MetadataTest, ConcurrentStartsMigrateExactlyOnce) {
  sandboxd::testing::TestDatabase fresh(GetParam().backend);
  constexpr int kStarters = 4;
  std::vector<std::shared_ptr<db::Database>> databases;
  for (int i = 0; i < kStarters; ++i) databases.push_back(fresh.open());
  std::atomic<int> applied{0}, failures{0}, ready{0};
  std::vector<std::thread> starters;
  for (int i = 0; i < kStarters; ++i) {
    starters.emplace_back([&, i] {
      ++ready;
      while (ready < kStarters) std::this_thread::yield();
      try {
        applied += schema::migrate(*databases[i]);
      } catch (const std::exception& e) {
        ++failures;
        ADD_FAILURE() << e.what();
      }
    });
  }
  for (auto& t : starters) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(applied, static_cast<int>(schema::migrations().size()));
  {
    auto conn = databases[0]->acquire();
    db::Statement rows(conn, "SELECT COUNT(*) FROM schema_migrations");
    ASSERT_TRUE(rows.step());
    EXPECT_EQ(rows.integer(0), static_cast<int64_t>(schema::migrations().size()));
    db::Statement counters(conn, "SELECT COUNT(*) FROM counters");
    ASSERT_TRUE(counters.step());
    EXPECT_EQ(counters.integer(0), 1);
  }
  EXPECT_EQ(schema::migrate(*databases[1]), 0);  // nothing left to do
}

// ========================================================================= file cache

// The file records held in memory (Metadata::enable_file_cache), on both backends. A
// second Metadata on the same database stands for another process writing the rows
// (the replica that took a container over): what the first one holds is not asked of
// the database again, which is how these tests see that a read came from memory.
class FileCacheTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  static FileRecord file(const std::string& storage, const std::string& path, int64_t created_at = 100) {
    FileRecord record;
    record.storage = storage;
    record.path = path;
    record.created_at = created_at;
    record.size = path.size();
    record.etag = md5_hex(path);
    record.mime = "text/plain";
    record.mtime_ns = created_at * 1'000'000'000;
    return record;
  }
  static std::vector<std::string> paths_of(const std::vector<FileRecord>& records) {
    std::vector<std::string> out;
    for (const auto& f : records) out.push_back(f.path);
    return out;
  }
  std::vector<std::string> listed(Metadata& metadata, const std::string& storage) {
    return paths_of(metadata.list_files(storage, {}, 100, std::nullopt, std::nullopt).files);
  }

  sandboxd::testing::TestDatabase database_{GetParam()};
  Metadata metadata_{database_.open()};
  Metadata other_process_{database_.open()};
};

INSTANTIATE_TEST_SUITE_P(Backends, FileCacheTest,
                         ::testing::Values(db::Backend::kSqlite, db::Backend::kPostgres),
                         sandboxd::testing::backend_name);

TEST_P(FileCacheTest, OwnWritesAreSeenAtOnceAndADeletedFileIsNeverServed) {
  metadata_.enable_file_cache(FileCacheLimits{});
  metadata_.put_file(file("s1", kUploads + "/a"), true);
  EXPECT_EQ(listed(metadata_, "s1"), (std::vector<std::string>{kUploads + "/a"}));  // filled here
  EXPECT_EQ(metadata_.cached_containers(), 1u);
  ASSERT_TRUE(metadata_.cached_list_files("s1", {}, 10, std::nullopt, std::nullopt));

  // Held: a row another process writes is not read again (the reads make no round trip).
  other_process_.put_file(file("s1", kUploads + "/written-elsewhere"), true);
  EXPECT_EQ(listed(metadata_, "s1"), (std::vector<std::string>{kUploads + "/a"}));

  // This process's own writes, each seen by the next read: an upload, an index sync's
  // update that keeps the position, a delete, a prefix delete.
  metadata_.put_file(file("s1", kUploads + "/b", 100), true);
  metadata_.put_file(file("s1", kOutputs + "/chart.png", 90), false);
  EXPECT_EQ(listed(metadata_, "s1"),
            (std::vector<std::string>{kOutputs + "/chart.png", kUploads + "/a", kUploads + "/b"}));
  FileRecord changed = file("s1", kUploads + "/a", 500);
  changed.size = 77;
  changed.etag = "0123456789abcdef0123456789abcdef";
  metadata_.put_file(changed, false);
  auto a = metadata_.find_file("s1", kUploads + "/a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->size, 77u);
  EXPECT_EQ(a->etag, changed.etag);
  EXPECT_EQ(a->created_at, 100);                                    // kept, as in the database
  EXPECT_EQ(*a, *other_process_.find_file("s1", kUploads + "/a"));  // the row exactly

  EXPECT_TRUE(metadata_.delete_file("s1", kUploads + "/b"));
  EXPECT_EQ(metadata_.find_file("s1", kUploads + "/b"), std::nullopt);
  EXPECT_EQ(listed(metadata_, "s1"), (std::vector<std::string>{kOutputs + "/chart.png", kUploads + "/a"}));
  EXPECT_EQ(metadata_.delete_prefix("s1", kUploads + "/"), 2u);  // a, and the other process's row
  EXPECT_EQ(listed(metadata_, "s1"), (std::vector<std::string>{kOutputs + "/chart.png"}));
  EXPECT_EQ(metadata_.files_of("s1").size(), 1u);

  // A deleted container's records go with it.
  metadata_.create_container({"alice", "c1", "s1", 1, 1});
  metadata_.delete_container("alice", "c1");
  EXPECT_TRUE(metadata_.files_of("s1").empty());
  EXPECT_EQ(metadata_.find_file("s1", kOutputs + "/chart.png"), std::nullopt);
  EXPECT_TRUE(other_process_.files_of("s1").empty());
}

TEST_P(FileCacheTest, AWriteThatFailsForgetsTheContainer) {
  metadata_.enable_file_cache(FileCacheLimits{});
  metadata_.put_file(file("s1", kUploads + "/a"), true);
  EXPECT_EQ(listed(metadata_, "s1").size(), 1u);
  // The fence refuses the write (another replica took the container): nothing of it is
  // held any more, and the next read asks the database.
  metadata_.set_write_fence(
      [](db::Connection&, const std::string& storage) { throw FencedError(storage, 2, 1); });
  EXPECT_THROW(metadata_.put_file(file("s1", kUploads + "/b"), true), FencedError);
  EXPECT_EQ(metadata_.cached_containers(), 0u);
  metadata_.set_write_fence(nullptr);
  other_process_.put_file(file("s1", kUploads + "/by-the-new-holder"), true);
  EXPECT_EQ(listed(metadata_, "s1"),
            (std::vector<std::string>{kUploads + "/a", kUploads + "/by-the-new-holder"}));
}

// Cluster mode: what is held under a lease's epoch is served only while the scope says
// that epoch; a lease lost (no epoch) reads the database, one taken again (a new epoch)
// fills anew.
TEST_P(FileCacheTest, ALostLeaseIsNeverServedFromMemory) {
  std::mutex mutex;
  std::map<std::string, int64_t> held{{"s1", 1}};
  metadata_.enable_file_cache(FileCacheLimits{}, [&](const std::string& storage) -> std::optional<int64_t> {
    std::lock_guard lock(mutex);
    auto it = held.find(storage);
    if (it == held.end()) return std::nullopt;
    return it->second;
  });
  metadata_.put_file(file("s1", kUploads + "/a"), true);
  metadata_.put_file(file("s2", kUploads + "/a"), true);
  EXPECT_EQ(listed(metadata_, "s1").size(), 1u);
  EXPECT_EQ(listed(metadata_, "s2").size(), 1u);
  EXPECT_EQ(metadata_.cached_containers(), 1u);  // s2's lease is not held here: never kept

  other_process_.put_file(file("s2", kUploads + "/b"), true);
  EXPECT_EQ(listed(metadata_, "s2").size(), 2u);  // read from the database

  // The lease of s1 is lost; the replica that took it writes.
  {
    std::lock_guard lock(mutex);
    held.erase("s1");
  }
  other_process_.put_file(file("s1", kUploads + "/b"), true);
  other_process_.delete_file("s1", kUploads + "/a");
  EXPECT_EQ(listed(metadata_, "s1"), (std::vector<std::string>{kUploads + "/b"}));
  EXPECT_EQ(metadata_.find_file("s1", kUploads + "/a"), std::nullopt);
  EXPECT_FALSE(metadata_.cached_list_files("s1", {}, 10, std::nullopt, std::nullopt));
  // Taken back at a later epoch: filled anew, never the copy of epoch 1.
  {
    std::lock_guard lock(mutex);
    held["s1"] = 3;
  }
  EXPECT_EQ(listed(metadata_, "s1"), (std::vector<std::string>{kUploads + "/b"}));
  ASSERT_TRUE(metadata_.cached_list_files("s1", {}, 10, std::nullopt, std::nullopt));
  // Let go of (released): forgotten at once.
  metadata_.forget_cached_files("s1");
  EXPECT_EQ(metadata_.cached_containers(), 0u);
}

TEST_P(FileCacheTest, TheLimitsEvictTheLeastRecentlyUsedContainers) {
  metadata_.enable_file_cache(FileCacheLimits{.max_records = 10, .max_bytes = 1u << 20});
  for (const std::string storage : {"s1", "s2", "s3"})
    for (int i = 0; i < 4; ++i) metadata_.put_file(file(storage, kUploads + "/f" + std::to_string(i)), true);
  EXPECT_EQ(listed(metadata_, "s1").size(), 4u);
  EXPECT_EQ(listed(metadata_, "s2").size(), 4u);
  EXPECT_EQ(metadata_.cached_records(), 8u);
  EXPECT_EQ(listed(metadata_, "s3").size(), 4u);  // 12 > 10: s1, the least recently used, goes
  EXPECT_EQ(metadata_.cached_records(), 8u);
  EXPECT_FALSE(metadata_.cached_list_files("s1", {}, 10, std::nullopt, std::nullopt));
  EXPECT_TRUE(metadata_.cached_list_files("s2", {}, 10, std::nullopt, std::nullopt));
  EXPECT_TRUE(metadata_.cached_list_files("s3", {}, 10, std::nullopt, std::nullopt));
  EXPECT_EQ(listed(metadata_, "s1").size(), 4u);  // filled again; now s2 goes
  EXPECT_FALSE(metadata_.cached_list_files("s2", {}, 10, std::nullopt, std::nullopt));

  // A container with more records than the limit is read from the database, correctly.
  for (int i = 0; i < 11; ++i) metadata_.put_file(file("big", kUploads + "/g" + std::to_string(i)), true);
  EXPECT_EQ(listed(metadata_, "big").size(), 11u);
  EXPECT_FALSE(metadata_.cached_list_files("big", {}, 100, std::nullopt, std::nullopt));
  other_process_.put_file(file("big", kUploads + "/g11"), true);
  EXPECT_EQ(listed(metadata_, "big").size(), 12u);
  EXPECT_LE(metadata_.cached_records(), 10u);
  // Growing past the limits by writes: the others are evicted first, then it is too large.
  for (int i = 4; i < 12; ++i) metadata_.put_file(file("s3", kUploads + "/f" + std::to_string(i)), true);
  EXPECT_LE(metadata_.cached_records(), 10u);
  EXPECT_EQ(listed(metadata_, "s3").size(), 12u);
  EXPECT_EQ(paths_of(metadata_.files_of("s3")), paths_of(other_process_.files_of("s3")));
}

// A single host holds its owners' container lists too, with its own writes (made, used,
// deleted) applied; in cluster mode (a scope given) never: other replicas make an
// owner's containers.
TEST_P(FileCacheTest, ASingleHostHoldsContainerListsAndAClusterNever) {
  metadata_.enable_file_cache(FileCacheLimits{});
  auto ids = [](const std::vector<ContainerRecord>& list) {
    std::vector<std::string> out;
    for (const auto& c : list) out.push_back(c.id);
    return out;
  };
  metadata_.create_container({"alice", "c1", "st-1", 10, 10});
  EXPECT_EQ(ids(metadata_.list_containers("alice", 10, "")), (std::vector<std::string>{"c1"}));
  ASSERT_TRUE(metadata_.cached_list_containers("alice", 10, ""));
  other_process_.create_container({"alice", "elsewhere", "st-x", 1, 1});
  EXPECT_EQ(ids(metadata_.list_containers("alice", 10, "")), (std::vector<std::string>{"c1"}));

  metadata_.create_container({"alice", "c0", "st-0", 5, 5});
  metadata_.create_container({"alice", "c2", "st-2", 10, 10});
  EXPECT_EQ(metadata_.create_container({"alice", "c2", "st-other", 99, 99}).storage, "st-2");  // found made
  metadata_.touch_container("alice", "c1", 777);
  auto listed = metadata_.list_containers("alice", 10, "");
  EXPECT_EQ(ids(listed), (std::vector<std::string>{"c0", "c1", "c2"}));
  EXPECT_EQ(listed[1].last_used_at, 777);
  EXPECT_EQ(ids(metadata_.list_containers("alice", 1, "c0")), (std::vector<std::string>{"c1"}));
  EXPECT_TRUE(metadata_.list_containers("alice", 10, "gone").empty());
  metadata_.delete_container("alice", "c1");
  EXPECT_EQ(ids(metadata_.list_containers("alice", 10, "")), (std::vector<std::string>{"c0", "c2"}));
  EXPECT_EQ(ids(*metadata_.cached_list_containers("alice", 10, "")), (std::vector<std::string>{"c0", "c2"}));
  EXPECT_TRUE(metadata_.list_containers("bob", 10, "").empty());

  Metadata replica(database_.open());
  replica.enable_file_cache(FileCacheLimits{}, [](const std::string&) { return std::optional<int64_t>(1); });
  EXPECT_EQ(replica.list_containers("alice", 10, "").size(), 3u);
  EXPECT_FALSE(replica.cached_list_containers("alice", 10, ""));
  other_process_.create_container({"alice", "later", "st-l", 100, 100});
  EXPECT_EQ(replica.list_containers("alice", 10, "").size(), 4u);
}

// ========================================================================= database

class DatabaseTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  sandboxd::testing::TestDatabase database_{GetParam()};
};

INSTANTIATE_TEST_SUITE_P(Backends, DatabaseTest,
                         ::testing::Values(db::Backend::kSqlite, db::Backend::kPostgres),
                         sandboxd::testing::backend_name);

TEST_P(DatabaseTest, StatementsBindReadAndCountChanges) {
  auto database = database_.open();
  auto conn = database->acquire();
  conn.exec(GetParam() == db::Backend::kSqlite ? "CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER, b BLOB)"
                                               : "CREATE TABLE t (k TEXT PRIMARY KEY, n BIGINT, b BYTEA)");
  const std::string bytes("\x00\xff\x01'?\"", 6);
  db::Statement insert(conn, "INSERT INTO t (k, n, b) VALUES (?, ?, ?), ('it''s ?', ?, NULL)");
  insert.add("a?").add(int64_t{INT64_MAX}).add_blob(bytes).add(int64_t{-1}).run();
  EXPECT_EQ(insert.changes(), 2);
  db::Statement query(conn, "SELECT k, n, b FROM t WHERE k = ? OR k = 'it''s ?' ORDER BY k");
  query.add("a?");
  ASSERT_TRUE(query.step());
  EXPECT_EQ(query.text(0), "a?");
  EXPECT_EQ(query.integer(1), INT64_MAX);
  EXPECT_EQ(query.blob(2), bytes);
  EXPECT_FALSE(query.is_null(2));
  ASSERT_TRUE(query.step());
  EXPECT_EQ(query.text(0), "it's ?");
  EXPECT_EQ(query.integer(1), -1);
  EXPECT_TRUE(query.is_null(2));
  EXPECT_FALSE(query.step());

  db::Statement upsert(
      conn,
      "INSERT INTO t (k, n) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET n = excluded.n + t.n "
      "RETURNING n");
  upsert.add("it's ?").add(int64_t{5});
  ASSERT_TRUE(upsert.step());
  EXPECT_EQ(upsert.integer(0), 4);
  {
    db::Transaction transaction(conn);
    db::Statement(conn, "DELETE FROM t").run();
  }  // not committed: rolled back
  db::Statement count(conn, "SELECT COUNT(*) FROM t");
  ASSERT_TRUE(count.step());
  EXPECT_EQ(count.integer(0), 2);
  // A failing statement throws with the backend's message, and the connection stays usable.
  try {
    db::Statement(conn, "SELECT missing FROM nowhere").run();
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("nowhere"), std::string::npos) << e.what();
  }
  db::Statement again(conn, "SELECT COUNT(*) FROM t");
  ASSERT_TRUE(again.step());
  EXPECT_EQ(again.integer(0), 2);
}

TEST(DatabasePlaceholders, NumberedOutsideQuotes) {
  int count = 0;
  EXPECT_EQ(
      db::number_placeholders("SELECT '?', \"a?\" FROM t WHERE a = ? AND b IN (?, 'it''s?') OR c = ?", count),
      "SELECT '?', \"a?\" FROM t WHERE a = $1 AND b IN ($2, 'it''s?') OR c = $3");
  EXPECT_EQ(count, 3);
}

// A server that restarts (an upgrade, a failover) drops every pooled connection: the
// next use reconnects instead of failing a request.
TEST(PostgresDatabase, ReconnectsAfterTheServerRestarts) {
  sandboxd::testing::TestDatabase fresh(db::Backend::kPostgres);
  Metadata metadata(fresh.open());
  metadata.create_container({"alice", "c1", "st-a", 1, 1});
  auto& server = sandboxd::testing::PostgresEnvironment::server();
  server.stop();
  EXPECT_THROW(metadata.find_container("alice", "c1"), std::runtime_error);  // down: an error, not a hang
  server.start();
  ASSERT_TRUE(metadata.find_container("alice", "c1"));
  EXPECT_EQ(metadata.find_container("alice", "c1")->storage, "st-a");
}

TEST(PostgresDatabase, AWrongUrlFailsAtOpenWithTheServersMessage) {
  auto& server = sandboxd::testing::PostgresEnvironment::server();
  try {
    db::open_postgres(server.url("no_such_database"));
    ADD_FAILURE() << "opened";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_database"), std::string::npos) << e.what();
  }
}

// A database made by sandboxd before migrations existed (metadata at user_version 1,
// thread and skill tables made by their stores) upgrades in place with every row.
TEST(SqliteUpgrade, TodaysLayoutKeepsEveryRow) {
  TempDir dir;
  const std::string path = (dir.path() / "sandboxd.db").string();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* old_layout = R"sql(
CREATE TABLE containers (owner TEXT NOT NULL, id TEXT NOT NULL, storage TEXT NOT NULL UNIQUE,
  created_at INTEGER NOT NULL, last_used_at INTEGER NOT NULL, PRIMARY KEY (owner, id));
CREATE INDEX containers_by_creation ON containers (owner, created_at, id);
CREATE TABLE files (storage TEXT NOT NULL, path TEXT NOT NULL, created_at INTEGER NOT NULL, seq INTEGER NOT NULL,
  size INTEGER NOT NULL, etag TEXT NOT NULL, mime TEXT NOT NULL, mtime_ns INTEGER NOT NULL, PRIMARY KEY (storage, path));
CREATE INDEX files_by_creation ON files (storage, created_at, seq);
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO counters (name, value) VALUES ('file_seq', 7);
CREATE TABLE threads (owner TEXT NOT NULL, id TEXT NOT NULL, title TEXT NOT NULL, created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL, seq INTEGER PRIMARY KEY AUTOINCREMENT, UNIQUE (owner, id));
CREATE TABLE thread_messages (owner TEXT NOT NULL, thread_id TEXT NOT NULL, seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, extra TEXT NOT NULL, created_at INTEGER NOT NULL);
CREATE INDEX thread_messages_by_thread ON thread_messages (owner, thread_id, seq);
CREATE TABLE thread_artifacts (owner TEXT NOT NULL, thread_id TEXT NOT NULL, seq INTEGER PRIMARY KEY AUTOINCREMENT,
  file_id TEXT NOT NULL, path TEXT NOT NULL, filename TEXT NOT NULL, mime TEXT NOT NULL, size INTEGER NOT NULL,
  message_id TEXT NOT NULL, created_at INTEGER NOT NULL);
CREATE INDEX thread_artifacts_by_thread ON thread_artifacts (owner, thread_id, seq);
CREATE TABLE skills (owner TEXT NOT NULL, id TEXT NOT NULL PRIMARY KEY, display_name TEXT NOT NULL, name TEXT NOT NULL,
  latest_version TEXT NOT NULL, created_at_us INTEGER NOT NULL, updated_at_us INTEGER NOT NULL);
CREATE INDEX skills_by_owner ON skills (owner, created_at_us, id);
CREATE TABLE skill_versions (skill_id TEXT NOT NULL, version TEXT NOT NULL, name TEXT NOT NULL,
  description TEXT NOT NULL, created_at_us INTEGER NOT NULL, PRIMARY KEY (skill_id, version));
INSERT INTO containers VALUES ('alice', 'c1', 'st-a', 10, 20);
INSERT INTO files VALUES ('st-a', '/mnt/user-data/uploads/old.csv', 10, 7, 3, 'etag', 'text/csv', 5);
INSERT INTO threads (owner, id, title, created_at, updated_at) VALUES ('alice', 'thread_1', 'Old', 10, 11);
INSERT INTO thread_messages (owner, thread_id, id, role, content, extra, created_at)
  VALUES ('alice', 'thread_1', 'msg_1', 'user', '"hi"', '{}', 10);
INSERT INTO skills VALUES ('alice', 'skill_old', 'Old skill', 'old-skill', '100', 1, 1);
INSERT INTO skill_versions VALUES ('skill_old', '100', 'old-skill', 'An old skill', 1);
PRAGMA user_version = 1;
)sql";
    char* error = nullptr;
    ASSERT_EQ(sqlite3_exec(db, old_layout, nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
    sqlite3_close(db);
  }
  Metadata metadata(path);
  ThreadStore threads(path);
  SkillStore skills(path, (dir.path() / "data").string(), "");
  EXPECT_EQ(metadata.find_container("alice", "c1")->last_used_at, 20);
  auto old_file = metadata.find_file("st-a", "/mnt/user-data/uploads/old.csv");
  ASSERT_TRUE(old_file);
  EXPECT_EQ(old_file->seq, 7);
  FileRecord added = *old_file;
  added.path = "/mnt/user-data/uploads/new.csv";
  metadata.put_file(added, true);
  EXPECT_EQ(metadata.find_file("st-a", added.path)->seq, 8);  // the counter carried on
  EXPECT_EQ(threads.find("alice", "thread_1")->title, "Old");
  ASSERT_EQ(threads.messages("alice", "thread_1").size(), 1u);
  EXPECT_EQ(skills.find("alice", "skill_old")->display_name, "Old skill");
  EXPECT_EQ(skills.find_version("alice", "skill_old", "latest")->description, "An old skill");

  auto database = db::open_sqlite(path);
  {
    auto conn = database->acquire();
    db::Statement applied(conn, "SELECT COUNT(*) FROM schema_migrations");
    ASSERT_TRUE(applied.step());
    EXPECT_EQ(applied.integer(0), static_cast<int64_t>(schema::migrations().size()));
  }
  EXPECT_EQ(schema::migrate(*database), 0);
}

TEST(SqliteUpgrade, ANewerDatabaseIsRefused) {
  TempDir dir;
  const std::string path = (dir.path() / "sandboxd.db").string();
  { Metadata metadata(path); }
  {
    auto database = db::open_sqlite(path);
    auto conn = database->acquire();
    conn.exec("INSERT INTO schema_migrations (version, description, applied_at) VALUES (9999, 'future', 0)");
  }
  EXPECT_THROW(Metadata{path}, std::runtime_error);
}

// ========================================================================== threads

class ThreadStoreTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  sandboxd::testing::TestDatabase database_{GetParam()};
  ThreadStore threads_{database_.open()};
};

INSTANTIATE_TEST_SUITE_P(Backends, ThreadStoreTest,
                         ::testing::Values(db::Backend::kSqlite, db::Backend::kPostgres),
                         sandboxd::testing::backend_name);

TEST_P(ThreadStoreTest, CreateListRenameAppendAndRemove) {
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(threads_.create({"alice", "thread_" + std::to_string(i), "", 100 + i, 0, 0}));
  EXPECT_FALSE(threads_.create({"alice", "thread_0", "again", 1, 0, 0}));
  EXPECT_TRUE(threads_.create({"bob", "thread_0", "bob's", 1, 0, 0}));

  auto first = threads_.list("alice", 2, "");
  ASSERT_EQ(first.threads.size(), 2u);
  EXPECT_EQ(first.threads[0].id, "thread_4");  // newest first
  EXPECT_EQ(first.threads[1].id, "thread_3");
  EXPECT_TRUE(first.has_more);
  auto rest = threads_.list("alice", 10, "thread_3");
  ASSERT_EQ(rest.threads.size(), 3u);
  EXPECT_EQ(rest.threads.back().id, "thread_0");
  EXPECT_FALSE(rest.has_more);
  EXPECT_TRUE(threads_.list("alice", 10, "thread_missing").threads.empty());

  EXPECT_TRUE(threads_.rename("alice", "thread_1", "Renamed", 500));
  EXPECT_EQ(threads_.find("alice", "thread_1")->title, "Renamed");
  EXPECT_EQ(threads_.find("alice", "thread_1")->updated_at, 500);
  EXPECT_FALSE(threads_.rename("carol", "thread_1", "x", 1));

  ThreadMessage user{"msg_u", "user", "\"make a chart\"", "", 600};
  ThreadMessage answer{"msg_a", "assistant", "[{\"type\":\"text\",\"text\":\"done\"}]",
                       "{\"stop_reason\":\"end_turn\"}", 601};
  const std::string odd_path = kOutputs + "/chart\xff.png";
  std::vector<ThreadArtifact> artifacts = {
      {"file_x", odd_path, "chart\xff.png", "image/png", 69, "msg_a", 601}};
  EXPECT_TRUE(threads_.append_turn("alice", "thread_2", user, answer, artifacts, "Make a chart"));
  EXPECT_TRUE(threads_.append_turn("alice", "thread_2", user, answer, {}, "Ignored: it has a title"));
  EXPECT_FALSE(threads_.append_turn("alice", "thread_gone", user, answer, artifacts, "x"));
  EXPECT_EQ(threads_.find("alice", "thread_2")->title, "Make a chart");
  EXPECT_EQ(threads_.find("alice", "thread_2")->updated_at, 601);
  auto messages = threads_.messages("alice", "thread_2");
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[0].id, "msg_u");
  EXPECT_EQ(messages[0].extra, "{}");
  EXPECT_EQ(messages[1].content, answer.content);
  EXPECT_EQ(messages[1].extra, answer.extra);
  auto stored = threads_.artifacts("alice", "thread_2");
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].path, odd_path);
  EXPECT_EQ(stored[0].filename, "chart\xff.png");
  EXPECT_EQ(stored[0].size, 69u);

  // Ids from a URL that are not UTF-8 find nothing and change nothing.
  EXPECT_EQ(threads_.find("alice", "thread_\xff"), std::nullopt);
  EXPECT_FALSE(threads_.rename("alice", "\xc3\x28", "x", 1));
  EXPECT_FALSE(threads_.remove("alice", "\xff"));
  EXPECT_TRUE(threads_.messages("alice", "\xff").empty());
  EXPECT_TRUE(threads_.list("alice", 10, "\xff").threads.empty());

  EXPECT_TRUE(threads_.remove("alice", "thread_2"));
  EXPECT_FALSE(threads_.remove("alice", "thread_2"));
  EXPECT_TRUE(threads_.messages("alice", "thread_2").empty());
  EXPECT_TRUE(threads_.artifacts("alice", "thread_2").empty());
  EXPECT_EQ(threads_.find("bob", "thread_0")->title, "bob's");
}

// =========================================================================== skills

class SkillStoreTest : public ::testing::TestWithParam<db::Backend> {
 protected:
  SkillStaging::Checked staged(const std::string& name, const std::string& description) {
    fs::path folder = skills_.new_staging_dir();
    fs::create_directories(folder);
    std::ofstream(folder / "SKILL.md") << "---\nname: " << name << "\ndescription: x\n---\n";
    return {folder.string(), {name, description}};
  }

  TempDir dir_;
  sandboxd::testing::TestDatabase database_{GetParam()};
  SkillStore skills_{database_.open(), dir_.path().string(), ""};
};

INSTANTIATE_TEST_SUITE_P(Backends, SkillStoreTest,
                         ::testing::Values(db::Backend::kSqlite, db::Backend::kPostgres),
                         sandboxd::testing::backend_name);

TEST_P(SkillStoreTest, CreateVersionListAndRemove) {
  const std::string odd_description = "Makes charts \xff\xfe (bytes as uploaded)";
  auto created = skills_.create("alice", std::string("Charts \xc3\x28"), staged("charts", odd_description));
  EXPECT_EQ(created.display_name, "Charts \xc3\x28");
  auto second = skills_.add_version("alice", created.id, staged("charts", "v2"));
  ASSERT_TRUE(second);
  auto third = skills_.add_version("alice", created.id, staged("charts", "v3"));
  ASSERT_TRUE(third);
  EXPECT_GT(std::stoll(third->version), std::stoll(second->version));
  auto not_bobs = skills_.add_version("bob", created.id, staged("charts", "not bob's"));
  ASSERT_FALSE(not_bobs);
  EXPECT_EQ(not_bobs.error().kind, SkillRefusal::Kind::kNoSuchSkill);
  auto renamed = skills_.add_version("alice", created.id, staged("graphs", "another name"));
  ASSERT_FALSE(renamed);
  EXPECT_EQ(renamed.error().kind, SkillRefusal::Kind::kNameChanged);

  auto found = skills_.find("alice", created.id);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->display_name, "Charts \xc3\x28");
  EXPECT_EQ(found->latest_version, third->version);
  EXPECT_EQ(skills_.find("bob", created.id), std::nullopt);
  EXPECT_EQ(skills_.find_version("alice", created.id, created.latest_version)->description, odd_description);
  EXPECT_EQ(skills_.find_version("alice", created.id, "latest")->description, "v3");

  auto page = skills_.versions("alice", created.id, 2, "");
  ASSERT_EQ(page.items.size(), 2u);
  EXPECT_EQ(page.items[0].version, third->version);  // newest first
  EXPECT_TRUE(page.has_more);
  auto next = skills_.versions("alice", created.id, 2, page.items.back().version);
  ASSERT_EQ(next.items.size(), 1u);
  EXPECT_EQ(next.items[0].version, created.latest_version);
  EXPECT_TRUE(skills_.versions("alice", created.id, 2, "not a number").items.empty());  // read as version 0

  auto other = skills_.create("alice", std::nullopt, staged("other", "second skill"));
  auto listed = skills_.list("alice", "custom", 1, "");
  ASSERT_EQ(listed.items.size(), 1u);
  EXPECT_EQ(listed.items[0].id, created.id);
  EXPECT_TRUE(listed.has_more);
  auto listed_next = skills_.list("alice", "custom", 1, created.id);
  ASSERT_EQ(listed_next.items.size(), 1u);
  EXPECT_EQ(listed_next.items[0].id, other.id);
  EXPECT_TRUE(skills_.list("alice", "custom", 10, "skill_\xff").items.empty());
  EXPECT_EQ(skills_.find("alice", "skill_\xff"), std::nullopt);

  EXPECT_EQ(skills_.remove_version("alice", created.id, third->version),
            SkillStore::VersionRemoval::kRemoved);
  EXPECT_EQ(skills_.find("alice", created.id)->latest_version, second->version);
  // The last version may go: the skill stays, with no version to resolve, until removed.
  EXPECT_EQ(skills_.remove_version("alice", other.id, "latest"), SkillStore::VersionRemoval::kRemoved);
  EXPECT_EQ(skills_.find("alice", other.id)->latest_version, "");
  EXPECT_EQ(skills_.find_version("alice", other.id, "latest"), std::nullopt);
  EXPECT_EQ(skills_.remove_version("alice", other.id, "latest"), SkillStore::VersionRemoval::kMissing);
  EXPECT_TRUE(skills_.remove("alice", other.id));
  EXPECT_TRUE(skills_.remove("alice", created.id));
  EXPECT_FALSE(skills_.remove("alice", created.id));
  EXPECT_EQ(skills_.find_version("alice", created.id, "latest"), std::nullopt);
}

// ======================================================================= file store

class FileStoreTest : public ::testing::Test {
 protected:
  FileStoreTest() {
    for (const auto& dir : {workspace_, uploads_, outputs_, skills_, outside_}) fs::create_directories(dir);
    paths_ = {workspace_.string(), uploads_.string(), outputs_.string(), skills_.string()};
  }
  ~FileStoreTest() override {
    if (mounted_) umount2(outputs_.c_str(), MNT_DETACH);
  }

  // A complete upload as the Files API does it: stream, commit, record.
  // nullopt (kSucceeded) or why it failed.
  std::optional<FileError> put(const std::string& sandbox_path, std::string_view content, size_t chunk = 7) {
    auto writer = store_.begin_write(paths_, sandbox_path);
    if (!writer) return writer.error();
    for (size_t at = 0; at < content.size(); at += chunk) {
      if (auto written = (*writer)->write(content.data() + at, std::min(chunk, content.size() - at));
          !written) {
        return written.error();
      }
    }
    auto record = (*writer)->commit();
    if (!record) return record.error();
    record->storage = kStorage;
    metadata_.put_file(*record, true);
    return kSucceeded;
  }

  std::set<std::string> recorded_paths() {
    std::set<std::string> out;
    for (const auto& f : metadata_.files_of(kStorage)) out.insert(f.path);
    return out;
  }

  static std::vector<std::string> directory_entries(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& entry : fs::directory_iterator(dir)) out.push_back(entry.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  const std::string kStorage = "st-1";
  TempDir dir_;
  fs::path workspace_ = dir_.path() / "c" / "workspace";
  fs::path uploads_ = dir_.path() / "c" / "uploads";
  fs::path outputs_ = dir_.path() / "c" / "outputs";
  fs::path skills_ = dir_.path() / "skills";
  fs::path outside_ = dir_.path() / "outside";
  ContainerPaths paths_;
  Metadata metadata_{(dir_.path() / "meta.db").string()};
  FileStore store_{metadata_, kAgentUid, kAgentGid};
  bool mounted_ = false;
};

TEST_F(FileStoreTest, CommitWritesTheBodyAtomicallyWithItsRecord) {
  const std::string content = "region,revenue\nnorth,10\nsouth,20\n";
  int64_t before = unix_now();
  auto begun = store_.begin_write(paths_, kUploads + "/data/2026/q3.csv");
  ASSERT_EQ(error_of(begun), kSucceeded);
  auto writer = std::move(*begun);
  ASSERT_TRUE(writer);
  EXPECT_EQ(error_of(writer->write(content.data(), 10)), kSucceeded);
  // Nothing visible before commit: O_TMPFILE or a dot-named temp file only.
  EXPECT_FALSE(fs::exists(uploads_ / "data/2026/q3.csv"));
  EXPECT_EQ(error_of(writer->write(content.data() + 10, content.size() - 10)), kSucceeded);
  auto committed = writer->commit();
  ASSERT_EQ(error_of(committed), kSucceeded);
  FileRecord record = *committed;

  EXPECT_EQ(read_host_file(uploads_ / "data/2026/q3.csv"), content);
  EXPECT_EQ(record.path, kUploads + "/data/2026/q3.csv");
  EXPECT_EQ(record.size, content.size());
  EXPECT_EQ(record.etag, md5_hex(content));
  EXPECT_EQ(record.mime, "text/csv");
  EXPECT_GE(record.created_at, before);
  EXPECT_LE(record.created_at, unix_now());
  struct stat st;
  ASSERT_EQ(stat((uploads_ / "data/2026/q3.csv").c_str(), &st), 0);
  EXPECT_EQ(record.mtime_ns, st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec);
  EXPECT_EQ(st.st_uid, kAgentUid);
  EXPECT_EQ(st.st_gid, kAgentGid);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  ASSERT_EQ(stat((uploads_ / "data/2026").c_str(), &st), 0);  // created parents belong to the agent too
  EXPECT_EQ(st.st_uid, kAgentUid);
  EXPECT_EQ(directory_entries(uploads_ / "data/2026"), (std::vector<std::string>{"q3.csv"}));

  ASSERT_EQ(put(kUploads + "/data/2026/q3.csv", "replaced"), kSucceeded);
  EXPECT_EQ(read_host_file(uploads_ / "data/2026/q3.csv"), "replaced");
  ASSERT_EQ(put(kOutputs + "/empty.csv", ""), kSucceeded);
  EXPECT_EQ(metadata_.find_file(kStorage, kOutputs + "/empty.csv")->etag, "d41d8cd98f00b204e9800998ecf8427e");
}

TEST_F(FileStoreTest, AbortAndAbandonedWritesKeepThePreviousVersion) {
  ASSERT_EQ(put(kOutputs + "/report.txt", "version 1"), kSucceeded);
  {
    auto writer = store_.begin_write(paths_, kOutputs + "/report.txt");
    ASSERT_TRUE(writer);
    (*writer)->write("version 2, cut off", 18);
    (*writer)->abort();
    EXPECT_NE(error_of((*writer)->commit()), kSucceeded);  // nothing left to commit
  }
  EXPECT_EQ(read_host_file(outputs_ / "report.txt"), "version 1");
  {
    auto writer = store_.begin_write(paths_, kOutputs + "/report.txt");
    ASSERT_TRUE(writer);
    (*writer)->write("abandoned", 9);
  }  // destroyed without commit: a client that disconnected
  EXPECT_EQ(read_host_file(outputs_ / "report.txt"), "version 1");
  EXPECT_EQ(directory_entries(outputs_), (std::vector<std::string>{"report.txt"}));
}

TEST_F(FileStoreTest, RefusesFoldersAndPathsOutsideTheWritableMounts) {
  fs::create_directories(uploads_ / "folder");
  EXPECT_EQ(error_of(store_.begin_write(paths_, kUploads + "/folder")), FileError::kNotAFile);
  EXPECT_EQ(error_of(store_.begin_write(paths_, kUploads)), FileError::kNotAFile);
  write_host_file(uploads_ / "plain.txt", "x");
  EXPECT_EQ(error_of(store_.begin_write(paths_, kUploads + "/plain.txt/child")), FileError::kNotAFile);
  EXPECT_EQ(error_of(store_.begin_write(paths_, kWorkspace + "/notes.txt")), FileError::kOutsideMounts);
  EXPECT_EQ(error_of(store_.begin_write(paths_, "/mnt/skills/x")), FileError::kOutsideMounts);
  EXPECT_EQ(error_of(store_.begin_write(paths_, "/etc/passwd")), FileError::kOutsideMounts);
  EXPECT_EQ(error_of(store_.begin_write(paths_, kUploads + "/../../../etc/x")), FileError::kOutsideMounts);
}

// Past the first 4 MiB the MD5 is computed on a worker thread while the body streams;
// the etag must still be the MD5 of every byte, in order.
TEST_F(FileStoreTest, LargeBodiesGetTheRightEtag) {
  std::string content;
  for (int i = 0; content.size() < (13u << 20); ++i)
    content += "line " + std::to_string(i) + " of a large body\n";
  auto writer = store_.begin_write(paths_, kUploads + "/large.txt");
  ASSERT_TRUE(writer);
  for (size_t offset = 0; offset < content.size(); offset += 100'003)
    ASSERT_EQ(error_of((*writer)->write(content.data() + offset,
                                        std::min<size_t>(100'003, content.size() - offset))),
              kSucceeded);
  auto committed = (*writer)->commit();
  ASSERT_EQ(error_of(committed), kSucceeded);
  FileRecord record = *committed;
  EXPECT_EQ(record.size, content.size());
  EXPECT_EQ(record.etag, md5_hex(content));
  EXPECT_EQ(read_host_file(uploads_ / "large.txt"), content);
  // An abandoned large write stops its worker cleanly and leaves nothing.
  auto dropped = store_.begin_write(paths_, kUploads + "/dropped.txt");
  ASSERT_TRUE(dropped);
  ASSERT_EQ(error_of((*dropped)->write(content.data(), content.size())), kSucceeded);
  dropped->reset();
  EXPECT_FALSE(fs::exists(uploads_ / "dropped.txt"));
}

TEST_F(FileStoreTest, ConcurrentWritersNeverMixTheirContent) {
  constexpr size_t kSize = 1 << 20;
  std::string pattern_a(kSize, '\0'), pattern_b(kSize, '\0'), initial(kSize, 'i');
  for (size_t i = 0; i < kSize; ++i) {
    pattern_a[i] = static_cast<char>('a' + i % 13);
    pattern_b[i] = static_cast<char>('A' + i % 17);
  }
  const std::string path = kOutputs + "/shared.bin";
  ASSERT_EQ(put(path, initial, 65536), kSucceeded);

  std::atomic<bool> writing{true};
  std::atomic<int> mixed_reads{0}, reads{0}, failed_opens{0};
  // The reader reads at least once before the writers start and goes on until they are
  // done; the file is replaced by rename, so an open never finds it missing.
  std::thread reader([&] {
    do {
      auto opened = store_.open_for_read(paths_, path);
      if (!opened) {
        ++failed_opens;
        continue;
      }
      std::string seen = read_fd(opened->fd);
      close(opened->fd);
      ++reads;
      if (seen != initial && seen != pattern_a && seen != pattern_b) ++mixed_reads;
    } while (writing);
  });
  while (reads == 0 && failed_opens == 0) std::this_thread::yield();
  auto writer_loop = [&](const std::string& pattern) {
    for (int round = 0; round < 6; ++round) {
      ASSERT_EQ(put(path, pattern, 4096 + round * 1000), kSucceeded);
    }
  };
  std::thread first(writer_loop, pattern_a), second(writer_loop, pattern_b);
  first.join();
  second.join();
  writing = false;
  reader.join();

  std::string final_content = read_host_file(outputs_ / "shared.bin");
  EXPECT_TRUE(final_content == pattern_a || final_content == pattern_b);
  // The two writers' rename and put_file may interleave (last rename wins on disk,
  // last put_file in the index); every version has its own mtime, so stat_file
  // always ends up describing the body that is actually there.
  auto record = store_.stat_file(kStorage, paths_, path);
  ASSERT_TRUE(record);
  EXPECT_EQ(record->etag, md5_hex(final_content));
  EXPECT_EQ(metadata_.find_file(kStorage, path)->etag, md5_hex(final_content));
  EXPECT_GT(reads, 0);
  EXPECT_EQ(failed_opens, 0);
  EXPECT_EQ(mixed_reads, 0) << "of " << reads << " reads";
  EXPECT_EQ(directory_entries(outputs_), (std::vector<std::string>{"shared.bin"}));
}

// A body lent and filled as the Files API's raw uploads do (the socket read straight
// into the writer's buffers): many times the ring of buffers, so the producer outruns
// hashing and writing and waits for room; an unaligned tail after the O_DIRECT part.
TEST_F(FileStoreTest, ALargeBodyFilledIntoLentBuffersIsHashedAndWrittenWhole) {
  std::string content(20 * 1024 * 1024 + 12345, '\0');
  std::mt19937_64 random(17);
  for (auto& c : content) c = static_cast<char>(random());
  auto begun = store_.begin_write(paths_, kUploads + "/large.bin");
  ASSERT_EQ(error_of(begun), kSucceeded);
  auto writer = std::move(*begun);
  ASSERT_EQ(error_of(writer->write(content.data(), 3)), kSucceeded);  // copied in, as multipart does
  size_t at = 3, waits = 0;
  while (at < content.size()) {
    std::span<char> lent = writer->lend();
    if (lent.empty()) {
      std::promise<void> room;
      writer->when_room(1, [&room] { room.set_value(); });  // from a step's thread
      room.get_future().wait();
      ++waits;
      continue;
    }
    const size_t take = std::min({lent.size(), content.size() - at, size_t{100003}});
    std::memcpy(lent.data(), content.data() + at, take);
    ASSERT_EQ(error_of(writer->fill(take)), kSucceeded);
    at += take;
  }
  auto committed = writer->commit();
  ASSERT_EQ(error_of(committed), kSucceeded);
  EXPECT_EQ(committed->size, content.size());
  EXPECT_EQ(committed->etag, md5_hex(content));
  EXPECT_TRUE(read_host_file(uploads_ / "large.bin") == content);
  EXPECT_EQ(directory_entries(uploads_), (std::vector<std::string>{"large.bin"}));
  EXPECT_GT(waits, 0u) << "the producer never had to wait for room";
}

// A volume that fills while the write step runs behind: fill or commit says so, the
// previous version stays.
TEST_F(FileStoreTest, FullVolumeWhileFillingLentBuffersKeepsTheOldFile) {
  if (mount("tmpfs", outputs_.c_str(), "tmpfs", 0, "size=2m") != 0) GTEST_SKIP() << "cannot mount tmpfs";
  mounted_ = true;
  ASSERT_EQ(put(kOutputs + "/big.bin", "old", 3), kSucceeded);
  auto begun = store_.begin_write(paths_, kOutputs + "/big.bin");
  ASSERT_TRUE(begun);
  auto writer = std::move(*begun);
  std::optional<FileError> result = kSucceeded;
  for (size_t filled = 0; filled < (16u << 20) && result == kSucceeded;) {
    std::span<char> lent = writer->lend();
    if (lent.empty()) {
      std::promise<void> room;
      writer->when_room(1, [&room] { room.set_value(); });
      room.get_future().wait();
      continue;
    }
    std::memset(lent.data(), 'n', lent.size());
    result = error_of(writer->fill(lent.size()));
    filled += lent.size();
  }
  if (result == kSucceeded) result = error_of(writer->commit());
  EXPECT_EQ(result, FileError::kNoSpace);
  writer.reset();
  EXPECT_EQ(read_host_file(outputs_ / "big.bin"), "old");
  EXPECT_EQ(directory_entries(outputs_), (std::vector<std::string>{"big.bin"}));
  ASSERT_EQ(umount2(outputs_.c_str(), 0), 0);
  mounted_ = false;
}

TEST_F(FileStoreTest, FullVolumeReportsNoSpaceAndKeepsTheOldFile) {
  if (mount("tmpfs", outputs_.c_str(), "tmpfs", 0, "size=1m") != 0) GTEST_SKIP() << "cannot mount tmpfs";
  mounted_ = true;
  const std::string old_content(300 * 1024, 'o');
  ASSERT_EQ(put(kOutputs + "/big.bin", old_content, 65536), kSucceeded);

  auto begun = store_.begin_write(paths_, kOutputs + "/big.bin");
  ASSERT_TRUE(begun);
  auto writer = std::move(*begun);
  const std::string chunk(64 * 1024, 'n');
  std::optional<FileError> result = kSucceeded;
  for (int i = 0; i < 32 && result == kSucceeded; ++i)
    result = error_of(writer->write(chunk.data(), chunk.size()));
  if (result == kSucceeded) result = error_of(writer->commit());
  EXPECT_EQ(result, FileError::kNoSpace);
  writer.reset();

  EXPECT_EQ(read_host_file(outputs_ / "big.bin"), old_content);
  EXPECT_EQ(directory_entries(outputs_), (std::vector<std::string>{"big.bin"}));
  // The space of the failed attempt was given back.
  EXPECT_EQ(put(kOutputs + "/small.txt", std::string(400 * 1024, 's'), 65536), kSucceeded);

  ASSERT_EQ(umount2(outputs_.c_str(), 0), 0);
  mounted_ = false;
}

TEST_F(FileStoreTest, SymlinksNeverLeadReadsOrWritesOutside) {
  write_host_file(outside_ / "victim.txt", "outside the container");
  const std::string passwd_before = read_host_file("/etc/passwd");
  const std::string marker = "sandboxd-store-test-" + std::to_string(getpid());
  struct Mount {
    std::string sandbox;
    fs::path host;
    bool writable;
  };
  const Mount mounts[] = {
      {kUploads, uploads_, true}, {kOutputs, outputs_, true}, {kWorkspace, workspace_, false}};
  for (const auto& m : mounts) {
    fs::create_directory_symlink("/", m.host / "root_link");
    fs::create_symlink("/etc/passwd", m.host / "passwd_link");
    fs::create_directory_symlink("/etc", m.host / "etc_dir");
    fs::create_directory_symlink("../../../../../../../../../../etc", m.host / "relative_escape");
    fs::create_directory_symlink(outside_, m.host / "outside_dir");

    for (const std::string path : {"/passwd_link", "/etc_dir/passwd", "/root_link/etc/passwd",
                                   "/relative_escape/passwd", "/outside_dir/victim.txt", "/etc_dir"}) {
      EXPECT_NE(error_of(store_.open_for_read(paths_, m.sandbox + path)), kSucceeded) << m.sandbox + path;
      EXPECT_EQ(store_.stat_file(kStorage, paths_, m.sandbox + path), std::nullopt) << m.sandbox + path;
    }
    for (const std::string& path : std::vector<std::string>{
             "/passwd_link", "/etc_dir/" + marker, "/etc_dir/" + marker + "/x", "/root_link/tmp/" + marker,
             "/relative_escape/" + marker, "/outside_dir/victim.txt", "/outside_dir/" + marker}) {
      auto writer = store_.begin_write(paths_, m.sandbox + path);
      EXPECT_FALSE(writer) << m.sandbox + path;
      EXPECT_EQ(error_of(writer), m.writable && path != "/passwd_link" ? FileError::kOutsideMounts
                                  : m.writable                         ? FileError::kNotAFile
                                                                       : FileError::kOutsideMounts)
          << m.sandbox + path;
    }
    EXPECT_EQ(error_of(store_.remove(kStorage, paths_, m.sandbox + "/outside_dir/victim.txt")),
              FileError::kOutsideMounts);
    EXPECT_EQ(error_of(store_.remove(kStorage, paths_, m.sandbox + "/etc_dir/passwd")),
              FileError::kOutsideMounts);
  }
  EXPECT_EQ(read_host_file("/etc/passwd"), passwd_before);
  EXPECT_FALSE(fs::exists("/etc/" + marker));
  EXPECT_FALSE(fs::exists("/tmp/" + marker));
  EXPECT_EQ(read_host_file(outside_ / "victim.txt"), "outside the container");
  EXPECT_EQ(directory_entries(outside_), (std::vector<std::string>{"victim.txt"}));

  // sync records regular files only, and never walks into linked folders.
  write_host_file(outputs_ / "real.txt", "real");
  store_.sync(kStorage, paths_);
  EXPECT_EQ(recorded_paths(), (std::set<std::string>{kOutputs + "/real.txt"}));
}

TEST_F(FileStoreTest, ReadsFollowSymlinksThatStayInside) {
  write_host_file(outputs_ / "data/real.csv", "a,b\n");
  fs::create_symlink("data/real.csv", outputs_ / "alias.csv");
  auto opened = store_.open_for_read(paths_, kOutputs + "/alias.csv");
  ASSERT_EQ(error_of(opened), kSucceeded);
  EXPECT_EQ(read_fd(opened->fd), "a,b\n");
  EXPECT_EQ(opened->size, 4u);
  EXPECT_EQ(fcntl(opened->fd, F_GETFL) & O_NONBLOCK, 0);
  close(opened->fd);
}

TEST_F(FileStoreTest, OpenForReadCoversEveryMountAndRefusesNonFiles) {
  write_host_file(workspace_ / "notes.txt", "workspace");
  write_host_file(skills_ / "pdf/SKILL.md", "# skill");
  write_host_file(uploads_ / "in.csv", "upload");
  ASSERT_EQ(mkfifo((outputs_ / "pipe").c_str(), 0644), 0);
  fs::create_directories(outputs_ / "folder");

  for (const auto& [path, content] :
       std::vector<std::pair<std::string, std::string>>{{kWorkspace + "/notes.txt", "workspace"},
                                                        {"notes.txt", "workspace"},
                                                        {"/mnt/skills/pdf/SKILL.md", "# skill"},
                                                        {kUploads + "/in.csv", "upload"}}) {
    auto opened = store_.open_for_read(paths_, path);
    ASSERT_EQ(error_of(opened), kSucceeded) << path;
    EXPECT_EQ(read_fd(opened->fd), content);
    EXPECT_EQ(opened->size, content.size());
    close(opened->fd);
  }
  EXPECT_EQ(error_of(store_.open_for_read(paths_, kOutputs + "/pipe")), FileError::kNotAFile);  // and no hang
  EXPECT_EQ(error_of(store_.open_for_read(paths_, kOutputs + "/folder")), FileError::kNotAFile);
  EXPECT_EQ(error_of(store_.open_for_read(paths_, kOutputs)), FileError::kNotAFile);
  EXPECT_EQ(error_of(store_.open_for_read(paths_, kOutputs + "/missing")), FileError::kNotFound);
  EXPECT_EQ(error_of(store_.open_for_read(paths_, kUploads + "/in.csv/below")), FileError::kNotFound);
  EXPECT_EQ(error_of(store_.open_for_read(paths_, "/etc/passwd")), FileError::kOutsideMounts);
}

TEST_F(FileStoreTest, SyncDiscoversChangesAndDeletions) {
  const std::string csv = "x,y\n1,2\n";
  const std::string json = "{\"a\": [1, 2, 3]}\n";
  write_host_file(uploads_ / "a.csv", csv);
  write_host_file(uploads_ / "sub/dir/b.json", json);
  write_host_file(outputs_ / "chart.png", kPng);
  write_host_file(outputs_ / ".sandboxd-tmp-0123456789abcdef", "half-written upload");
  write_host_file(workspace_ / "scratch.txt", "not listed");
  ASSERT_EQ(mkfifo((outputs_ / "pipe").c_str(), 0644), 0);
  fs::create_symlink("chart.png", outputs_ / "link.png");

  int64_t before = unix_now();
  store_.sync(kStorage, paths_);
  int64_t after = unix_now();
  EXPECT_EQ(recorded_paths(), (std::set<std::string>{kUploads + "/a.csv", kUploads + "/sub/dir/b.json",
                                                     kOutputs + "/chart.png"}));
  auto a = metadata_.find_file(kStorage, kUploads + "/a.csv");
  EXPECT_EQ(a->etag, md5_hex(csv));
  EXPECT_EQ(a->size, csv.size());
  EXPECT_EQ(a->mime, "text/csv");
  EXPECT_GE(a->created_at, before);
  EXPECT_LE(a->created_at, after);
  EXPECT_EQ(metadata_.find_file(kStorage, kUploads + "/sub/dir/b.json")->mime, "application/json");
  auto png = metadata_.find_file(kStorage, kOutputs + "/chart.png");
  EXPECT_EQ(png->mime, "image/png");
  EXPECT_EQ(png->etag, md5_hex(kPng));

  // Pretend a.csv was first seen long ago: a change must keep that.
  FileRecord old = *a;
  old.created_at = 1000;
  metadata_.put_file(old, true);
  write_host_file(uploads_ / "a.csv", csv + "3,4\n");
  // Same size, new content, new mtime.
  write_host_file(outputs_ / "chart.png", std::string(kPng.size(), 'z'));
  set_mtime(outputs_ / "chart.png", 1'800'000'000);
  fs::remove(uploads_ / "sub/dir/b.json");
  store_.sync(kStorage, paths_);

  auto changed = metadata_.find_file(kStorage, kUploads + "/a.csv");
  EXPECT_EQ(changed->created_at, 1000);
  EXPECT_EQ(changed->etag, md5_hex(csv + "3,4\n"));
  EXPECT_EQ(changed->size, csv.size() + 4);
  EXPECT_EQ(metadata_.find_file(kStorage, kOutputs + "/chart.png")->etag,
            md5_hex(std::string(kPng.size(), 'z')));
  EXPECT_EQ(recorded_paths(), (std::set<std::string>{kUploads + "/a.csv", kOutputs + "/chart.png"}));

  // Listing order is creation order: the re-dated a.csv comes first.
  auto page =
      metadata_.list_files(kStorage, {kUploads + "/", kOutputs + "/"}, 10, std::nullopt, std::nullopt);
  ASSERT_EQ(page.files.size(), 2u);
  EXPECT_EQ(page.files[0].path, kUploads + "/a.csv");
}

TEST_F(FileStoreTest, SyncOfAnUnchangedTreeOnlyStats) {
  for (int i = 0; i < 10'000; ++i) {
    write_host_file(uploads_ / ("d" + std::to_string(i % 100)) / ("f" + std::to_string(i) + ".txt"),
                    "file " + std::to_string(i) + "\n");
  }
  store_.sync(kStorage, paths_);
  ASSERT_EQ(metadata_.files_of(kStorage).size(), 10'000u);

  // Rewrite one body behind the store's back, restoring size and mtime: a stat-only
  // sync cannot notice, which shows it does not read unchanged files.
  const fs::path probe = uploads_ / "d7" / "f7.txt";
  struct stat st;
  ASSERT_EQ(stat(probe.c_str(), &st), 0);
  write_host_file(probe, "FILE 7\n");
  timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, probe.c_str(), times, 0), 0);

  store_.sync(kStorage, paths_);
  EXPECT_EQ(metadata_.find_file(kStorage, kUploads + "/d7/f7.txt")->etag, md5_hex("file 7\n"));

  set_mtime(probe, 1'800'000'000);
  store_.sync(kStorage, paths_);
  EXPECT_EQ(metadata_.find_file(kStorage, kUploads + "/d7/f7.txt")->etag, md5_hex("FILE 7\n"));
}

// The kernel's word on a container's trees (store/tree_changes.h), with the real inotify:
// The mark a command's start takes, once the events queued before it are read: the
// server's loop on the inotify descriptor reads them as they come (mark() reads none).
TreeChanges::Mark mark_now(TreeChanges& changes, const std::string& key) {
  changes.drain();
  return changes.mark(key);
}

// a tree is covered only once its walk watched every folder of it, and "no event since"
// then means no change under it.
TEST_F(FileStoreTest, TreeChangesCoverATreeOnlyWhenEveryFolderIsWatched) {
  TreeChanges changes(TreeChanges::Limits{/*folders_per_tree=*/4, /*total=*/100});
  ASSERT_TRUE(changes.enabled());
  store_.set_tree_changes(&changes);
  fs::create_directories(outputs_ / "a");
  write_host_file(outputs_ / "r.txt", "r");
  store_.sync(kStorage, paths_);  // not tracked (no sandbox running): nothing is watched
  EXPECT_EQ(changes.watches(), 0u);
  EXPECT_FALSE(mark_now(changes, kStorage).covered);

  changes.track(kStorage);
  EXPECT_FALSE(mark_now(changes, kStorage).covered);  // tracked, not walked yet
  store_.sync(kStorage, paths_);
  auto mark = mark_now(changes, kStorage);
  EXPECT_TRUE(mark.covered);
  EXPECT_EQ(changes.watches(), 3u);  // uploads, outputs, outputs/a
  EXPECT_TRUE(changes.unchanged_since(kStorage, mark));
  EXPECT_EQ(read_host_file(outputs_ / "r.txt"), "r");  // reading is no change
  EXPECT_TRUE(changes.unchanged_since(kStorage, mark));

  // A file written, in a folder below: an event, and the tree stays covered.
  write_host_file(outputs_ / "a" / "f.txt", "x");
  EXPECT_FALSE(changes.unchanged_since(kStorage, mark));
  mark = mark_now(changes, kStorage);
  EXPECT_TRUE(mark.covered);
  chmod((outputs_ / "a" / "f.txt").c_str(), 0600);
  EXPECT_FALSE(changes.unchanged_since(kStorage, mark));
  mark = mark_now(changes, kStorage);
  write_host_file(uploads_ / "u.txt", "u");
  EXPECT_FALSE(changes.unchanged_since(kStorage, mark));

  // A new folder has no watch yet: uncovered until a walk watches it.
  fs::create_directories(outputs_ / "a" / "b");
  EXPECT_FALSE(mark_now(changes, kStorage).covered);
  store_.sync(kStorage, paths_);
  mark = mark_now(changes, kStorage);
  EXPECT_TRUE(mark.covered);
  EXPECT_EQ(changes.watches(), 4u);
  write_host_file(outputs_ / "a" / "b" / "deep.txt", "d");
  EXPECT_FALSE(changes.unchanged_since(kStorage, mark));

  // A symlink to a folder outside is never followed: what changes there is no event.
  fs::create_directory_symlink(outside_, outputs_ / "out");
  store_.sync(kStorage, paths_);
  mark = mark_now(changes, kStorage);
  EXPECT_TRUE(mark.covered);
  EXPECT_EQ(changes.watches(), 4u);
  write_host_file(outside_ / "elsewhere.txt", "e");
  EXPECT_TRUE(changes.unchanged_since(kStorage, mark));

  // A folder moved away keeps its watch only until the next clean walk.
  fs::rename(outputs_ / "a" / "b", workspace_ / "b");
  EXPECT_FALSE(mark_now(changes, kStorage).covered);
  store_.sync(kStorage, paths_);
  mark = mark_now(changes, kStorage);
  EXPECT_TRUE(mark.covered);
  EXPECT_EQ(changes.watches(), 3u);
  write_host_file(workspace_ / "b" / "moved.txt", "m");
  EXPECT_TRUE(changes.unchanged_since(kStorage, mark));

  // Past the cap of folders a tree is not watched at all, until it is small again.
  fs::create_directories(outputs_ / "c");
  fs::create_directories(outputs_ / "d");
  store_.sync(kStorage, paths_);
  EXPECT_FALSE(mark_now(changes, kStorage).covered);
  EXPECT_EQ(changes.watches(), 0u);
  store_.sync(kStorage, paths_);
  EXPECT_FALSE(mark_now(changes, kStorage).covered);
  EXPECT_EQ(changes.watches(), 0u);
  fs::remove(outputs_ / "d");
  store_.sync(kStorage, paths_);  // small again: the next walk watches
  EXPECT_FALSE(mark_now(changes, kStorage).covered);
  store_.sync(kStorage, paths_);
  EXPECT_TRUE(mark_now(changes, kStorage).covered);
  EXPECT_EQ(changes.watches(), 4u);

  // A file with a second name is never covered: a write through a name outside the
  // watched folders would give no event in them.
  ASSERT_EQ(link((outputs_ / "a" / "f.txt").c_str(), (outputs_ / "c" / "g.txt").c_str()), 0);
  store_.sync(kStorage, paths_);
  EXPECT_FALSE(mark_now(changes, kStorage).covered);
  fs::remove(outputs_ / "c" / "g.txt");
  store_.sync(kStorage, paths_);
  EXPECT_TRUE(mark_now(changes, kStorage).covered);

  // A stopped sandbox's watches go.
  changes.forget(kStorage);
  EXPECT_EQ(changes.watches(), 0u);
  EXPECT_FALSE(mark_now(changes, kStorage).covered);
  store_.set_tree_changes(nullptr);
}

// The server's total is shared by every container: past it a tree is walked as before.
TEST_F(FileStoreTest, TreeChangesStayWithinTheServersTotal) {
  TreeChanges changes(TreeChanges::Limits{/*folders_per_tree=*/64, /*total=*/2});
  ASSERT_TRUE(changes.enabled());
  store_.set_tree_changes(&changes);
  changes.track(kStorage);
  fs::create_directories(outputs_ / "a");
  store_.sync(kStorage, paths_);
  EXPECT_FALSE(mark_now(changes, kStorage).covered);
  EXPECT_LE(changes.watches(), 2u);
  fs::remove(outputs_ / "a");
  store_.sync(kStorage, paths_);
  EXPECT_TRUE(mark_now(changes, kStorage).covered);
  EXPECT_EQ(changes.watches(), 2u);
  store_.set_tree_changes(nullptr);
}

TEST_F(FileStoreTest, StatFileSyncsOneFileInAnyMount) {
  write_host_file(workspace_ / "analysis/result.json", "{\"ok\": true}");
  int64_t before = unix_now();
  auto record = store_.stat_file(kStorage, paths_, kWorkspace + "/analysis/result.json");
  ASSERT_TRUE(record);
  EXPECT_EQ(record->path, kWorkspace + "/analysis/result.json");
  EXPECT_EQ(record->storage, kStorage);
  EXPECT_EQ(record->etag, md5_hex("{\"ok\": true}"));
  EXPECT_EQ(record->mime, "application/json");
  EXPECT_GE(record->created_at, before);
  EXPECT_TRUE(metadata_.find_file(kStorage, kWorkspace + "/analysis/result.json"));

  write_host_file(workspace_ / "analysis/result.json", "{\"ok\": false}");
  auto updated = store_.stat_file(kStorage, paths_, kWorkspace + "/analysis/result.json");
  ASSERT_TRUE(updated);
  EXPECT_EQ(updated->etag, md5_hex("{\"ok\": false}"));
  EXPECT_EQ(updated->created_at, record->created_at);
  EXPECT_EQ(updated->seq, record->seq);

  fs::remove(workspace_ / "analysis/result.json");
  EXPECT_EQ(store_.stat_file(kStorage, paths_, kWorkspace + "/analysis/result.json"), std::nullopt);
  EXPECT_EQ(metadata_.find_file(kStorage, kWorkspace + "/analysis/result.json"), std::nullopt);
  EXPECT_EQ(store_.stat_file(kStorage, paths_, kWorkspace + "/analysis"), std::nullopt);
  EXPECT_EQ(store_.stat_file(kStorage, paths_, kOutputs + "/missing"), std::nullopt);
  EXPECT_EQ(store_.stat_file(kStorage, paths_, "/etc/passwd"), std::nullopt);
}

TEST_F(FileStoreTest, RemoveDeletesTheFileAndItsRecord) {
  ASSERT_EQ(put(kUploads + "/sales.csv", "a,b\n"), kSucceeded);
  EXPECT_EQ(error_of(store_.remove(kStorage, paths_, kUploads + "/sales.csv")), kSucceeded);
  EXPECT_FALSE(fs::exists(uploads_ / "sales.csv"));
  EXPECT_EQ(metadata_.find_file(kStorage, kUploads + "/sales.csv"), std::nullopt);
  EXPECT_EQ(error_of(store_.remove(kStorage, paths_, kUploads + "/sales.csv")), FileError::kNotFound);
  EXPECT_EQ(error_of(store_.remove(kStorage, paths_, kUploads + "/no/such/dir/x")), FileError::kNotFound);

  write_host_file(workspace_ / "scratch.txt", "tmp");
  ASSERT_TRUE(store_.stat_file(kStorage, paths_, kWorkspace + "/scratch.txt"));
  EXPECT_EQ(error_of(store_.remove(kStorage, paths_, kWorkspace + "/scratch.txt")), kSucceeded);
  EXPECT_FALSE(fs::exists(workspace_ / "scratch.txt"));
  EXPECT_EQ(metadata_.find_file(kStorage, kWorkspace + "/scratch.txt"), std::nullopt);

  fs::create_directories(outputs_ / "folder");
  EXPECT_EQ(error_of(store_.remove(kStorage, paths_, kOutputs + "/folder")), FileError::kNotAFile);
  EXPECT_TRUE(fs::exists(outputs_ / "folder"));
  EXPECT_EQ(error_of(store_.remove(kStorage, paths_, "/etc/passwd")), FileError::kOutsideMounts);
  write_host_file(skills_ / "pdf/SKILL.md", "shared");
  EXPECT_EQ(error_of(store_.remove(kStorage, paths_, "/mnt/skills/pdf/SKILL.md")), FileError::kOutsideMounts);
  EXPECT_TRUE(fs::exists(skills_ / "pdf/SKILL.md"));

  // A link is removed itself, never its target.
  write_host_file(outside_ / "target.txt", "kept");
  fs::create_symlink(outside_ / "target.txt", outputs_ / "link.txt");
  EXPECT_EQ(error_of(store_.remove(kStorage, paths_, kOutputs + "/link.txt")), kSucceeded);
  EXPECT_FALSE(fs::is_symlink(outputs_ / "link.txt"));
  EXPECT_EQ(read_host_file(outside_ / "target.txt"), "kept");
}

TEST_F(FileStoreTest, RemovePrefixDeletesMatchingUploadsOnly) {
  for (const std::string key :
       {"data/2026/a.csv", "data/2026/deep/b.csv", "data/20261/c.csv", "data/2025/d.csv"}) {
    ASSERT_EQ(put(sandbox_path_for_key(key), key), kSucceeded);
  }
  ASSERT_EQ(put(sandbox_path_for_key("outputs/data/2026/o.csv"), "output"), kSucceeded);
  write_host_file(uploads_ / "data/2026/written-by-code.txt", "found by sync");

  EXPECT_EQ(store_.remove_prefix(kStorage, paths_, "data/2026/"), 3u);
  EXPECT_EQ(recorded_paths(),
            (std::set<std::string>{kUploads + "/data/20261/c.csv", kUploads + "/data/2025/d.csv",
                                   kOutputs + "/data/2026/o.csv"}));
  EXPECT_FALSE(fs::exists(uploads_ / "data/2026/a.csv"));
  EXPECT_FALSE(fs::exists(uploads_ / "data/2026/written-by-code.txt"));
  EXPECT_TRUE(fs::exists(uploads_ / "data/20261/c.csv"));
  EXPECT_TRUE(fs::exists(outputs_ / "data/2026/o.csv"));

  EXPECT_EQ(store_.remove_prefix(kStorage, paths_, "data/202"), 2u);  // a plain string prefix
  EXPECT_EQ(store_.remove_prefix(kStorage, paths_, "data/"), 0u);
  EXPECT_EQ(recorded_paths(), (std::set<std::string>{kOutputs + "/data/2026/o.csv"}));
}

TEST(DetectMime, ContentFirstThenExtension) {
  EXPECT_EQ(detect_mime("sales.csv", "region,revenue\nnorth,10\nsouth,20\n"), "text/csv");
  EXPECT_EQ(detect_mime("data.json", "{\"rows\": [1, 2, 3], \"name\": \"q3\"}\n"), "application/json");
  EXPECT_EQ(detect_mime("chart.png", kPng), "image/png");
  EXPECT_EQ(detect_mime("no-extension", kPng), "image/png");
  EXPECT_EQ(detect_mime("misnamed.csv", kPng), "image/png");
  EXPECT_EQ(detect_mime("empty.csv", ""), "text/csv");
  EXPECT_EQ(detect_mime("empty", ""), "application/octet-stream");
  EXPECT_EQ(detect_mime("notes", "just some words\n"), "text/plain");
  EXPECT_EQ(detect_mime("README.MD", "# Title\n\nSome text.\n"), "text/markdown");
  EXPECT_EQ(detect_mime("style.css", "body { color: red; }\n"), "text/css");
  EXPECT_EQ(detect_mime("blob", std::string("\x00\x01\x02\x03\xfe\xff\x00\x10", 8)),
            "application/octet-stream");
  EXPECT_EQ(detect_mime("table.parquet", std::string("PAR1\x15\x04\x15\x10", 8)),
            "application/vnd.apache.parquet");
  EXPECT_EQ(detect_mime("report.pdf", "%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n"), "application/pdf");
}

// ======================================================================== multipart

struct ParsedPart {
  PartHeaders headers;
  std::string data;
  bool ended = false;
};

struct ParseResult {
  std::vector<ParsedPart> parts;
  bool ok = true;
  bool finished = false;
  std::string error;
};

// Parses `body` cut at `cuts` (ascending offsets).
ParseResult parse_split(const std::string& boundary, std::string_view body, const std::vector<size_t>& cuts) {
  ParseResult result;
  MultipartParser parser(
      boundary,
      [&](const PartHeaders& headers) {
        result.parts.push_back({headers, {}, false});
        return true;
      },
      [&](std::string_view chunk) {
        EXPECT_FALSE(chunk.empty());
        result.parts.back().data.append(chunk);
        return true;
      },
      [&] {
        result.parts.back().ended = true;
        return true;
      });
  size_t at = 0;
  for (size_t cut : cuts) {
    result.ok = result.ok && parser.feed(body.substr(at, cut - at));
    at = cut;
  }
  result.ok = result.ok && parser.feed(body.substr(at));
  result.finished = parser.finished();
  result.error = parser.error();
  return result;
}

ParseResult parse_whole(const std::string& boundary, std::string_view body) {
  return parse_split(boundary, body, {});
}

const std::string kBoundary = "xYzZY";
// Content that resembles the delimiter without being one.
const std::string kTrickyContent = "line 1\r\nline 2\r\n--xYzZ\r\n-\r\n--xYz--\r\n\r\nx--xYzZY\r\n--\r\n";

std::string sample_body(std::string_view file_content) {
  return "This preamble is ignored.\r\n"
         "--" +
         kBoundary +
         "\r\n"
         "Content-Disposition: form-data; name=\"path\"\r\n"
         "\r\n"
         "data/q3.csv\r\n"
         "--" +
         kBoundary +
         "  \r\n"  // transport padding
         "content-disposition: form-data; name=\"file\"; filename=\"q 3.csv\"\r\n"
         "Content-Type: text/csv\r\n"
         "\r\n" +
         std::string(file_content) +
         "\r\n"
         "--" +
         kBoundary +
         "--\r\n"
         "The epilogue is ignored too.\r\n";
}

void expect_sample(const ParseResult& result, std::string_view file_content) {
  ASSERT_TRUE(result.ok) << result.error;
  EXPECT_TRUE(result.finished);
  ASSERT_EQ(result.parts.size(), 2u);
  EXPECT_EQ(result.parts[0].headers.name, "path");
  EXPECT_EQ(result.parts[0].headers.filename, std::nullopt);
  EXPECT_EQ(result.parts[0].data, "data/q3.csv");
  EXPECT_TRUE(result.parts[0].ended);
  EXPECT_EQ(result.parts[1].headers.name, "file");
  EXPECT_EQ(result.parts[1].headers.filename, "q 3.csv");
  EXPECT_EQ(result.parts[1].headers.content_type, "text/csv");
  EXPECT_EQ(result.parts[1].data, file_content);
  EXPECT_TRUE(result.parts[1].ended);
}

TEST(Multipart, ParsesAWholeBody) {
  expect_sample(parse_whole(kBoundary, sample_body(kTrickyContent)), kTrickyContent);
}

TEST(Multipart, AnyOneOrTwoCutsGiveTheSameParts) {
  const std::string body = sample_body(kTrickyContent);
  for (size_t i = 0; i <= body.size(); ++i) {
    for (size_t j = i; j <= body.size(); ++j) {
      auto result = parse_split(kBoundary, body, {i, j});
      ASSERT_TRUE(result.ok && result.finished && result.parts.size() == 2 &&
                  result.parts[1].data == kTrickyContent && result.parts[0].data == "data/q3.csv")
          << "cuts at " << i << " and " << j << ": " << result.error;
    }
  }
}

// A receiver that pauses at each part's start and end (to do asynchronous work there)
// gets control back exactly there, with the rest of the bytes left to feed, and the
// same parts as a plain feed.
TEST(Multipart, PausesAtEachPartsStartAndEnd) {
  const std::string body = sample_body(kTrickyContent);
  ParseResult result;
  MultipartParser* self = nullptr;
  std::vector<std::string> events;
  MultipartParser parser(
      kBoundary,
      [&](const PartHeaders& headers) {
        result.parts.push_back({headers, {}, false});
        events.push_back("part");
        self->pause();
        return true;
      },
      [&](std::string_view chunk) {
        result.parts.back().data.append(chunk);
        return true;
      },
      [&] {
        result.parts.back().ended = true;
        events.push_back("end");
        self->pause();
        return true;
      });
  self = &parser;
  std::string_view rest = body;
  int returns = 0;
  while (!rest.empty()) {
    const size_t before = events.size();
    ASSERT_TRUE(parser.feed_until_pause(rest)) << parser.error();
    ++returns;
    // Each return follows at most one callback that paused (none for the last bytes).
    ASSERT_LE(events.size(), before + 1);
    ASSERT_LE(returns, 10);
  }
  EXPECT_EQ(events, (std::vector<std::string>{"part", "end", "part", "end"}));
  result.ok = true;
  result.finished = parser.finished();
  expect_sample(result, kTrickyContent);
}

TEST(Multipart, OneByteAtATime) {
  const std::string body = sample_body(kTrickyContent);
  std::vector<size_t> cuts;
  for (size_t i = 1; i < body.size(); ++i) cuts.push_back(i);
  expect_sample(parse_split(kBoundary, body, cuts), kTrickyContent);
}

TEST(Multipart, LargeBodyInRandomChunks) {
  std::mt19937 random(2026);
  std::string content(1 << 20, '\0');
  for (auto& c : content) c = static_cast<char>(random() & 0xff);
  // Sprinkle near-delimiters over the random bytes.
  for (int i = 0; i < 200; ++i) {
    std::string near = "\r\n--" + kBoundary.substr(0, random() % kBoundary.size());
    content.replace(random() % (content.size() - near.size()), near.size(), near);
  }
  ASSERT_EQ(content.find("\r\n--" + kBoundary), std::string::npos);
  const std::string body = sample_body(content);
  for (int round = 0; round < 20; ++round) {
    size_t max_chunk = round < 10 ? 16 : 200'000;
    std::vector<size_t> cuts;
    for (size_t at = 1 + random() % max_chunk; at < body.size(); at += 1 + random() % max_chunk)
      cuts.push_back(at);
    expect_sample(parse_split(kBoundary, body, cuts), content);
  }
}

TEST(Multipart, FilenameForms) {
  struct Case {
    std::string disposition;
    std::optional<std::string> filename;
  };
  const std::vector<Case> cases = {
      {R"(form-data; name="file"; filename="a b.csv")", "a b.csv"},
      {R"(form-data; name="file"; filename="say \"hi\".txt")", "say \"hi\".txt"},
      {R"(form-data; name="file"; filename="back\\slash.txt")", "back\\slash.txt"},
      {R"(form-data; name="file"; filename="semi;colon=.txt")", "semi;colon=.txt"},
      {R"(form-data; name="file"; filename="fallback.csv"; filename*=UTF-8''caf%C3%A9.csv)",
       "caf\xc3\xa9.csv"},
      {R"(form-data; filename*=utf-8'fr'na%C3%AFve%20file.txt; name="file"; filename="naive.txt")",
       "na\xc3\xafve file.txt"},
      {R"(form-data; name="file"; filename*=ISO-8859-1''%E9t%E9.txt)", "\xc3\xa9t\xc3\xa9.txt"},
      {R"(form-data; name="file"; filename*=UTF-8''bad%ZZ.txt; filename="ok.txt")", "ok.txt"},
      {R"(form-data; name="file"; filename="%2e%2e/raw.txt")", "%2e%2e/raw.txt"},  // not decoded
      {R"(form-data; name=file; filename=plain.txt)", "plain.txt"},
      {R"(FORM-DATA; NAME="file"; FILENAME="upper.txt")", "upper.txt"},
      {R"(form-data; name="file"; filename="")", ""},
      {R"(form-data; name="file")", std::nullopt},
  };
  for (const auto& c : cases) {
    std::string body = "--B\r\nContent-Disposition: " + c.disposition + "\r\n\r\nx\r\n--B--";
    auto result = parse_whole("B", body);
    ASSERT_TRUE(result.ok) << c.disposition << ": " << result.error;
    ASSERT_EQ(result.parts.size(), 1u);
    EXPECT_EQ(result.parts[0].headers.name, "file") << c.disposition;
    EXPECT_EQ(result.parts[0].headers.filename, c.filename) << c.disposition;
  }
}

TEST(Multipart, PartsWithoutHeadersOrContent) {
  auto result = parse_whole("B",
                            "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n\r\n--B\r\n"
                            "Content-Disposition: form-data; name=\"b\"\r\n"
                            "X-Folded: one\r\n two\r\n\r\nbee\r\n--B--");
  ASSERT_TRUE(result.ok) << result.error;
  ASSERT_EQ(result.parts.size(), 2u);
  EXPECT_EQ(result.parts[0].data, "");
  EXPECT_TRUE(result.parts[0].ended);
  EXPECT_EQ(result.parts[1].data, "bee");
  EXPECT_TRUE(result.finished);
}

TEST(Multipart, MalformedBodiesAreErrors) {
  // No boundary at all: nothing parsed, never finished.
  auto no_boundary = parse_whole("B", "just some text, no multipart here\r\n");
  EXPECT_TRUE(no_boundary.parts.empty());
  EXPECT_FALSE(no_boundary.finished);

  // Cut off inside the file and right after a delimiter: not finished.
  const std::string body = sample_body("content");
  for (size_t cut : {body.find("content"), body.rfind("--" + kBoundary + "--") + 2 + kBoundary.size()}) {
    auto cut_result = parse_whole(kBoundary, body.substr(0, cut));
    EXPECT_TRUE(cut_result.ok);
    EXPECT_FALSE(cut_result.finished) << cut;
  }

  const std::string long_header =
      "--B\r\nContent-Disposition: form-data; name=\"f\"\r\nX-Long: " + std::string(20'000, 'a') +
      "\r\n\r\nbody\r\n--B--";
  auto too_long = parse_whole("B", long_header);
  EXPECT_FALSE(too_long.ok);
  EXPECT_EQ(too_long.error, "part headers are too long");
  std::vector<size_t> cuts;
  for (size_t at = 100; at < long_header.size(); at += 100) cuts.push_back(at);
  EXPECT_FALSE(parse_split("B", long_header, cuts).ok);

  const std::pair<std::string, std::string> bad[] = {
      {"--B\r\nContent-Type: text/plain\r\n\r\nx\r\n--B--", "part has no Content-Disposition header"},
      {"--B\r\nContent-Disposition form-data\r\n\r\nx\r\n--B--", "malformed part header"},
      {"--B\r\nContent-Disposition: attachment; filename=\"a\"\r\n\r\nx\r\n--B--", "part is not form-data"},
      {"--B\r\nContent-Disposition: form-data; name=\"unterminated\r\n\r\nx\r\n--B--",
       "malformed Content-Disposition header"},
      {"--BX\r\n", "malformed boundary line"},
      {"--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--B-x", "malformed boundary line"},
      {"--B\rX", "malformed boundary line"},
  };
  for (const auto& [input, reason] : bad) {
    auto result = parse_whole("B", input);
    EXPECT_FALSE(result.ok) << input;
    EXPECT_EQ(result.error, reason) << input;
  }

  // A stopped upload (the receiver hit the size limit) is an error too, and stays one.
  MultipartParser stopping(
      "B", [](const PartHeaders&) { return true; }, [](std::string_view) { return false; },
      [] { return true; });
  EXPECT_FALSE(stopping.feed("--B\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\ndata"));
  EXPECT_FALSE(stopping.error().empty());
  EXPECT_FALSE(stopping.feed("more"));

  for (const std::string& boundary : {std::string(), std::string(71, 'b'), std::string("bad\"quote")}) {
    MultipartParser invalid(
        boundary, [](const PartHeaders&) { return true; }, [](std::string_view) { return true; },
        [] { return true; });
    EXPECT_FALSE(invalid.feed("--" + boundary + "--"));
  }
}

TEST(Multipart, BoundaryFromContentType) {
  using P = MultipartParser;
  EXPECT_EQ(P::boundary_from_content_type("multipart/form-data; boundary=abc123"), "abc123");
  EXPECT_EQ(P::boundary_from_content_type("Multipart/Form-Data;charset=utf-8;BOUNDARY=\"a b:c\""), "a b:c");
  EXPECT_EQ(P::boundary_from_content_type(
                "multipart/form-data; boundary=\"----WebKitFormBoundary7MA4YWxkTrZu0gW\""),
            "----WebKitFormBoundary7MA4YWxkTrZu0gW");
  EXPECT_EQ(P::boundary_from_content_type("multipart/form-data ; boundary = x-y ; charset=utf-8"), "x-y");
  EXPECT_EQ(P::boundary_from_content_type(" multipart/form-data;boundary=\"q\\\"\""),
            std::nullopt);  // '"' invalid
  EXPECT_EQ(P::boundary_from_content_type("multipart/form-data; boundary=" + std::string(70, 'b')),
            std::string(70, 'b'));
  EXPECT_EQ(P::boundary_from_content_type("multipart/form-data; boundary=" + std::string(71, 'b')),
            std::nullopt);
  EXPECT_EQ(P::boundary_from_content_type("multipart/form-data; boundary=\"\""), std::nullopt);
  EXPECT_EQ(P::boundary_from_content_type("multipart/form-data; boundary=\"ends with space \""),
            std::nullopt);
  EXPECT_EQ(P::boundary_from_content_type("multipart/form-data"), std::nullopt);
  EXPECT_EQ(P::boundary_from_content_type("multipart/form-data; charset=utf-8"), std::nullopt);
  EXPECT_EQ(P::boundary_from_content_type("multipart/mixed; boundary=abc"), std::nullopt);
  EXPECT_EQ(P::boundary_from_content_type("text/plain"), std::nullopt);
  EXPECT_EQ(P::boundary_from_content_type(""), std::nullopt);
}

}  // namespace
}  // namespace sandboxd::store
