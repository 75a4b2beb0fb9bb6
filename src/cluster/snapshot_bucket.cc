#include "cluster/snapshot_bucket.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <vector>

#include "base/blocking.h"
#include "base/hex.h"
#include "base/unique_fd.h"
#include "store/md5.h"

namespace sandboxd::cluster {
namespace {

namespace fs = std::filesystem;

// capture_state's names (service/container_snapshots.cc).
constexpr const char* kVolumeFile = "volume.img";
constexpr const char* kMemoryFolder = "memory";
constexpr const char* kKernelsFile = "kernels";  // the checkpoint's: a folder without it is never restored
constexpr const char* kExtentsObject = "volume.extents";
constexpr const char* kDataObject = "volume.data";
constexpr std::string_view kExtentsHeader = "sandboxd-extents 1";
// The container's uploads (ContainerSnapshots puts them in the folder's uploads/): each
// file's bytes as uploads/<n>, then the list of every folder and file with its mode,
// owner and times (the list last: a download reads the files it names). Names are hex in
// the list and nowhere in a key: whoever uploaded a file chose its name.
constexpr const char* kUploadsFolder = "uploads";
constexpr const char* kUploadsList = "uploads.list";
constexpr std::string_view kUploadsHeader = "sandboxd-uploads 1";

struct Extent {
  uint64_t offset = 0, length = 0;
};

std::string errno_text(const std::string& call) { return call + ": " + std::strerror(errno); }

bool pread_full(int fd, char* out, size_t size, uint64_t offset) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::pread(fd, out + got, size - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// The extents of `fd` that hold data (the rest are holes, read as zeros).
std::optional<std::vector<Extent>> data_extents(int fd, uint64_t size, std::string& why) {
  std::vector<Extent> extents;
  off_t position = 0;
  while (static_cast<uint64_t>(position) < size) {
    const off_t data = ::lseek(fd, position, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // only a hole is left
      why = errno_text("lseek(SEEK_DATA, " + std::to_string(position) + ")");
      return std::nullopt;
    }
    const off_t hole = ::lseek(fd, data, SEEK_HOLE);
    if (hole < 0) {
      why = errno_text("lseek(SEEK_HOLE, " + std::to_string(data) + ")");
      return std::nullopt;
    }
    extents.push_back({static_cast<uint64_t>(data), static_cast<uint64_t>(hole - data)});
    position = hole;
  }
  return extents;
}

// `total` bytes that `read(position, out, size)` fills, in order, to `key`: one PUT up to
// `part_bytes`, a multipart upload of such parts past it (no more than one part held in
// memory). A failed multipart upload is aborted.
using Reader = std::function<bool(uint64_t position, char* out, size_t size)>;
store::S3Result<void> upload_stream(store::S3Client& client, const std::string& key, uint64_t total,
                                    size_t part_bytes, const Reader& read) {
  const store::S3Error unreadable{store::S3Error::Kind::kLocal, 0, "", "reading the snapshot's file failed"};
  if (total <= part_bytes) {
    std::string body(static_cast<size_t>(total), '\0');
    if (!read(0, body.data(), body.size())) return unreadable;
    auto stored = client.put_object(key, body);
    if (!stored) return stored.error();
    return {};
  }
  auto upload_id = client.create_multipart(key);
  if (!upload_id) return upload_id.error();
  auto fail = [&](store::S3Error error) -> store::S3Result<void> {
    (void)client.abort_multipart(key, *upload_id);
    return error;
  };
  std::vector<std::string> etags;
  std::string part(part_bytes, '\0');
  for (uint64_t position = 0; position < total;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(part_bytes, total - position));
    if (!read(position, part.data(), want)) return fail(unreadable);
    auto etag = client.upload_part(key, *upload_id, static_cast<int>(etags.size()) + 1,
                                   std::string_view(part.data(), want));
    if (!etag) return fail(etag.error());
    etags.push_back(*etag);
    position += want;
  }
  if (auto completed = client.complete_multipart(key, *upload_id, etags); !completed)
    return fail(completed.error());
  return {};
}

// A file's bytes (the checkpoint's files: small, or a few the size of the memory).
store::S3Result<void> upload_file(store::S3Client& client, const std::string& key, const fs::path& path,
                                  size_t part_bytes) {
  UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  struct stat st {};
  if (!file.valid() || fstat(file.get(), &st) != 0)
    return store::S3Error{store::S3Error::Kind::kLocal, 0, "", errno_text("open " + path.string())};
  return upload_stream(client, key, static_cast<uint64_t>(st.st_size), part_bytes,
                       [fd = file.get()](uint64_t position, char* out, size_t size) {
                         return pread_full(fd, out, size, position);
                       });
}

// The object at `key` into a new file `path`; its size, checked against `expected` when
// given.
std::optional<std::string> download_file(store::S3Client& client, const std::string& key,
                                         const fs::path& path, std::optional<uint64_t> expected,
                                         bool& local) {
  UniqueFd file(::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!file.valid()) {
    local = true;
    return errno_text("open " + path.string());
  }
  auto got = client.get_object(key, file.get());
  if (!got) {
    local = got.error().kind == store::S3Error::Kind::kLocal;
    return "GET " + key + ": " + got.error().describe();
  }
  if (expected && *got != *expected)
    return "object " + key + " has " + std::to_string(*got) + " bytes, expected " + std::to_string(*expected);
  return std::nullopt;
}

// volume.extents back: the image's size and its extents, each within it, in order and
// apart (what upload_blocking wrote; anything else is refused rather than trusted).
std::optional<std::vector<Extent>> parse_extents(const std::string& text, uint64_t& size,
                                                 uint64_t& data_bytes) {
  std::istringstream in(text);
  std::string header;
  if (!std::getline(in, header) || header != kExtentsHeader || !(in >> size)) return std::nullopt;
  std::vector<Extent> extents;
  uint64_t end = 0;
  data_bytes = 0;
  for (Extent extent; in >> extent.offset >> extent.length;) {
    if (extent.length == 0 || extent.offset < end || extent.offset > size ||
        extent.length > size - extent.offset)
      return std::nullopt;
    end = extent.offset + extent.length;
    data_bytes += extent.length;
    extents.push_back(extent);
  }
  if (!in.eof()) return std::nullopt;
  return extents;
}

// One folder or file of the uploads' list.
struct UploadEntry {
  char kind = 0;  // 'd' a folder, 'f' a file (uploads/<index>)
  uint32_t mode = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  timespec mtime{};
  uint64_t size = 0;
  std::string path;  // relative to the uploads folder ("." for the folder itself)
};

std::string hex_of(const std::string& text) {
  return hex_encode(reinterpret_cast<const unsigned char*>(text.data()), text.size());
}

std::optional<std::string> unhex(const std::string& text) {
  if (text.size() % 2 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < text.size(); i += 2) {
    int byte = 0;
    for (char c : {text[i], text[i + 1]}) {
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0) return std::nullopt;
      byte = byte * 16 + digit;
    }
    out.push_back(static_cast<char>(byte));
  }
  return out;
}

// The list, strictly: every line whole, every path inside the folder, no NUL in a name.
std::optional<std::vector<UploadEntry>> parse_uploads(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kUploadsHeader) return std::nullopt;
  std::vector<UploadEntry> entries;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    UploadEntry entry;
    std::string kind, mode, name;
    int64_t seconds = 0, nanoseconds = 0;
    if (!(fields >> kind >> mode >> entry.uid >> entry.gid >> seconds >> nanoseconds >> entry.size >> name) ||
        !(fields >> std::ws).eof() || (kind != "d" && kind != "f"))
      return std::nullopt;
    entry.kind = kind[0];
    char* end = nullptr;
    const unsigned long bits = std::strtoul(mode.c_str(), &end, 8);
    if (mode.empty() || *end != '\0' || bits > 07777 || nanoseconds < 0 || nanoseconds >= 1'000'000'000)
      return std::nullopt;
    entry.mode = static_cast<uint32_t>(bits);
    entry.mtime = {static_cast<time_t>(seconds), static_cast<long>(nanoseconds)};
    auto path = unhex(name);
    if (!path || path->empty() || path->find('\0') != std::string::npos || path->front() == '/')
      return std::nullopt;
    const fs::path normal = fs::path(*path).lexically_normal();
    if (normal.empty() || normal.string().starts_with("..") || (*path != "." && normal == "."))
      return std::nullopt;
    entry.path = *path == "." ? "." : normal.string();
    entries.push_back(std::move(entry));
  }
  return entries;
}

// `length` bytes of `from` at `from_offset` into `to` at `to_offset` (in the kernel:
// copy_file_range shares blocks where the file system can; read and write where it
// cannot copy between these files at all).
bool copy_range(int from, uint64_t from_offset, int to, uint64_t to_offset, uint64_t length) {
  auto in = static_cast<loff_t>(from_offset), out = static_cast<loff_t>(to_offset);
  while (length > 0) {
    ssize_t n = ::copy_file_range(from, &in, to, &out, static_cast<size_t>(length), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS)) break;
    if (n <= 0) return false;
    length -= static_cast<uint64_t>(n);
  }
  std::string buffer(static_cast<size_t>(std::min<uint64_t>(length, 1 << 20)), '\0');
  while (length > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(length, buffer.size()));
    if (!pread_full(from, buffer.data(), n, static_cast<uint64_t>(in))) return false;
    for (size_t written = 0; written < n;) {
      ssize_t w = ::pwrite(to, buffer.data() + written, n - written, static_cast<off_t>(out) + written);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      written += static_cast<size_t>(w);
    }
    in += n;
    out += n;
    length -= n;
  }
  return true;
}

}  // namespace

SnapshotBucket::SnapshotBucket(std::shared_ptr<store::S3Client> client, std::string prefix,
                               uint64_t part_bytes, int retry_after_sec)
    : client_(std::move(client)),
      prefix_(std::move(prefix)),
      part_bytes_(part_bytes),
      retry_after_sec_(retry_after_sec) {}

std::string SnapshotBucket::prefix_of(const std::string& owner, const std::string& id) const {
  store::Md5 md5;
  md5.update(owner.data(), owner.size());
  return prefix_ + "snapshots/" + md5.hex_digest() + "/" + id + "/";
}

std::optional<SnapshotBucket::Failure> SnapshotBucket::upload_blocking(const std::string& prefix,
                                                                       const std::string& folder) {
  const auto bucket_failure = [](const store::S3Error& error) {
    return Failure{error.kind == store::S3Error::Kind::kLocal, error.describe()};
  };
  // The volume: its data extents, then the list that says where they go (the list last:
  // a download without it finds nothing to restore).
  const fs::path image_path = fs::path(folder) / kVolumeFile;
  UniqueFd image(::open(image_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  struct stat st {};
  if (!image.valid() || fstat(image.get(), &st) != 0)
    return Failure{true, errno_text("open " + image_path.string())};
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::string why;
  auto extents = data_extents(image.get(), size, why);
  if (!extents) return Failure{true, why};
  std::vector<uint64_t> starts;  // each extent's place in volume.data
  uint64_t total = 0;
  std::ostringstream list;
  list << kExtentsHeader << "\n" << size << "\n";
  for (const auto& extent : *extents) {
    starts.push_back(total);
    total += extent.length;
    list << extent.offset << " " << extent.length << "\n";
  }
  const auto read_extents = [&](uint64_t position, char* out, size_t want) {
    while (want > 0) {
      // The extent holding `position`: the last one starting at or before it.
      const size_t i =
          static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), position) - starts.begin()) - 1;
      const uint64_t within = position - starts[i];
      const size_t n = static_cast<size_t>(std::min<uint64_t>(want, (*extents)[i].length - within));
      if (!pread_full(image.get(), out, n, (*extents)[i].offset + within)) return false;
      out += n;
      position += n;
      want -= n;
    }
    return true;
  };
  if (auto stored = upload_stream(*client_, prefix + kDataObject, total, part_bytes_, read_extents); !stored)
    return bucket_failure(stored.error());
  if (auto stored = client_->put_object(prefix + kExtentsObject, list.str()); !stored)
    return bucket_failure(stored.error());
  // The uploads.
  std::error_code ec;
  const fs::path uploads = fs::path(folder) / kUploadsFolder;
  if (fs::exists(uploads, ec)) {
    std::ostringstream listing;
    listing << kUploadsHeader << "\n";
    size_t files = 0;
    const auto add = [&](const fs::path& path, const std::string& relative) -> std::optional<Failure> {
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0) return Failure{true, errno_text("lstat " + path.string())};
      char kind = 0;
      if (S_ISDIR(st.st_mode)) {
        kind = 'd';
      } else if (S_ISREG(st.st_mode)) {
        kind = 'f';
        const std::string key = prefix + kUploadsFolder + "/" + std::to_string(files++);
        if (auto stored = upload_file(*client_, key, path, part_bytes_); !stored)
          return bucket_failure(stored.error());
      } else {
        return std::nullopt;  // (the capture copies folders and files only)
      }
      char mode[8];
      std::snprintf(mode, sizeof mode, "%o", static_cast<unsigned>(st.st_mode & 07777));
      listing << kind << ' ' << mode << ' ' << st.st_uid << ' ' << st.st_gid << ' ' << st.st_mtim.tv_sec
              << ' ' << st.st_mtim.tv_nsec << ' ' << (kind == 'f' ? static_cast<uint64_t>(st.st_size) : 0)
              << ' ' << hex_of(relative) << "\n";
      return std::nullopt;
    };
    if (auto failed = add(uploads, ".")) return failed;
    for (auto it = fs::recursive_directory_iterator(uploads, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (auto failed = add(it->path(), fs::relative(it->path(), uploads).string())) return failed;
    if (ec) return Failure{true, "listing " + uploads.string() + ": " + ec.message()};
    if (auto stored = client_->put_object(prefix + kUploadsList, listing.str()); !stored)
      return bucket_failure(stored.error());
  }
  // The memory's checkpoint, its list of kernels last (as container_memory.cc writes it).
  const fs::path memory = fs::path(folder) / kMemoryFolder;
  if (!fs::exists(memory, ec)) return std::nullopt;
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(memory, ec))
    if (entry.is_regular_file() && entry.path() != memory / kKernelsFile) files.push_back(entry.path());
  if (ec) return Failure{true, "listing " + memory.string() + ": " + ec.message()};
  if (fs::exists(memory / kKernelsFile, ec)) files.push_back(memory / kKernelsFile);
  for (const auto& file : files) {
    const std::string key = prefix + kMemoryFolder + "/" + fs::relative(file, memory).string();
    if (auto stored = upload_file(*client_, key, file, part_bytes_); !stored)
      return bucket_failure(stored.error());
  }
  return std::nullopt;
}

std::optional<SnapshotBucket::Failure> SnapshotBucket::download_blocking(const std::string& prefix,
                                                                         const std::string& folder) {
  const fs::path root(folder);
  std::error_code ec;
  fs::create_directory(root, ec);
  if (ec) return Failure{true, "creating " + folder + ": " + ec.message()};
  chmod(root.c_str(), 0700);  // root's only: what the sandbox had in its files and memory
  bool local = false;
  // The list of extents, read whole (a line per extent).
  const fs::path list_path = root / kExtentsObject;
  if (auto failed = download_file(*client_, prefix + kExtentsObject, list_path, std::nullopt, local))
    return Failure{local, *failed};
  std::string text;
  {
    std::ifstream in(list_path);
    std::ostringstream read;
    read << in.rdbuf();
    text = read.str();
  }
  fs::remove(list_path, ec);
  uint64_t size = 0, data_bytes = 0;
  auto extents = parse_extents(text, size, data_bytes);
  if (!extents) return Failure{false, "object " + prefix + kExtentsObject + " is not a list of extents"};
  // The extents' bytes into a file of their own, then each into its place in a sparse
  // image of the volume's size (the holes stay holes).
  const fs::path data_path = root / kDataObject;
  if (auto failed = download_file(*client_, prefix + kDataObject, data_path, data_bytes, local))
    return Failure{local, *failed};
  UniqueFd data(::open(data_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  const fs::path image_path = root / kVolumeFile;
  UniqueFd image(::open(image_path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!data.valid() || !image.valid()) return Failure{true, errno_text("open " + image_path.string())};
  if (::ftruncate(image.get(), static_cast<off_t>(size)) != 0)
    return Failure{true, errno_text("ftruncate " + image_path.string() + " to " + std::to_string(size))};
  uint64_t position = 0;
  for (const auto& extent : *extents) {
    if (!copy_range(data.get(), position, image.get(), extent.offset, extent.length))
      return Failure{true, errno_text("copy_file_range into " + image_path.string())};
    position += extent.length;
  }
  if (::fsync(image.get()) != 0) return Failure{true, errno_text("fsync " + image_path.string())};
  data.reset();
  fs::remove(data_path, ec);
  // The uploads, when the snapshot has some: their folders and files as they were.
  auto listed = client_->list_objects(prefix + kUploadsList);
  if (!listed) return Failure{false, "listing " + prefix + kUploadsList + ": " + listed.error().describe()};
  if (!listed->empty()) {
    const fs::path list_file = root / kUploadsList;
    if (auto failed = download_file(*client_, prefix + kUploadsList, list_file, std::nullopt, local))
      return Failure{local, *failed};
    std::ostringstream read;
    read << std::ifstream(list_file).rdbuf();
    fs::remove(list_file, ec);
    auto entries = parse_uploads(read.str());
    if (!entries) return Failure{false, "object " + prefix + kUploadsList + " is not a list of uploads"};
    const fs::path uploads = root / kUploadsFolder;
    fs::create_directory(uploads, ec);
    size_t files = 0;
    for (const auto& entry : *entries) {
      const fs::path target = entry.path == "." ? uploads : uploads / entry.path;
      if (entry.kind == 'd') {
        fs::create_directories(target, ec);
        if (ec) return Failure{true, "creating " + target.string() + ": " + ec.message()};
      } else {
        fs::create_directories(target.parent_path(), ec);
        if (auto failed = download_file(*client_, prefix + kUploadsFolder + "/" + std::to_string(files++),
                                        target, entry.size, local))
          return Failure{local, *failed};
      }
      // (A path that is a symlink here was made by nothing but this loop: lchown, and
      // chmod/utimensat of what this loop created.)
      const struct timespec times[2] = {entry.mtime, entry.mtime};
      if (::lchown(target.c_str(), entry.uid, entry.gid) != 0 || ::chmod(target.c_str(), entry.mode) != 0 ||
          ::utimensat(AT_FDCWD, target.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0)
        return Failure{true, errno_text("setting the owner, mode and times of " + target.string())};
    }
  }
  // The memory's files (none on the native tier), the list of kernels last.
  auto objects = client_->list_objects(prefix + kMemoryFolder + "/");
  if (!objects)
    return Failure{false, "listing " + prefix + kMemoryFolder + "/: " + objects.error().describe()};
  const fs::path memory = root / kMemoryFolder;
  std::stable_partition(objects->begin(), objects->end(), [](const store::S3Object& object) {
    return !object.key.ends_with(std::string("/") + kKernelsFile);
  });
  for (const auto& object : *objects) {
    const std::string relative = object.key.substr(prefix.size() + std::strlen(kMemoryFolder) + 1);
    const fs::path target = (memory / relative).lexically_normal();
    // Keys this replica's peers wrote; a key that would land outside the folder is refused all the same.
    if (relative.empty() || relative.front() == '/' ||
        target.lexically_relative(memory).string().starts_with(".."))
      return Failure{false, "a checkpoint object named " + object.key};
    fs::create_directories(target.parent_path(), ec);
    if (ec) return Failure{true, "creating " + target.parent_path().string() + ": " + ec.message()};
    chmod(memory.c_str(), 0700);
    if (auto failed = download_file(*client_, object.key, target, object.size, local))
      return Failure{local, *failed};
  }
  return std::nullopt;
}

void SnapshotBucket::remove_blocking(const std::string& prefix) {
  auto objects = client_->list_objects(prefix);
  if (!objects) {
    spdlog::warn("bucket: listing the snapshot objects under {}: {}", prefix, objects.error().describe());
    return;
  }
  for (const auto& object : *objects)
    if (auto removed = client_->delete_object(object.key); !removed)
      spdlog::warn("bucket: deleting the snapshot object {}: {}", object.key, removed.error().describe());
}

boost::asio::awaitable<Result<void>> SnapshotBucket::upload(std::string owner, std::string id,
                                                            std::string folder) {
  const std::string prefix = prefix_of(owner, id);
  auto work = [this, &prefix, &folder] {
    std::optional<Failure> failure;
    try {
      failure = upload_blocking(prefix, folder);
    } catch (const std::exception& e) {  // (the file system's walk)
      failure = Failure{true, e.what()};
    }
    if (failure) remove_blocking(prefix);  // nothing of a snapshot that failed stays
    return failure;
  };
  const std::optional<Failure> failure = co_await run_blocking(std::move(work));
  if (!failure) co_return Result<void>{};
  spdlog::error("bucket: storing snapshot {} of {} from {}: {}", id, owner, folder, failure->why);
  if (failure->local) co_return ApiError::internal();
  co_return ApiError::overloaded("The sessions bucket cannot store the snapshot now; try again later",
                                 retry_after_sec_);
}

boost::asio::awaitable<Result<void>> SnapshotBucket::download(std::string owner, std::string id,
                                                              std::string folder) {
  const std::string prefix = prefix_of(owner, id);
  auto work = [this, &prefix, &folder] {
    try {
      return download_blocking(prefix, folder);
    } catch (const std::exception& e) {  // (the file system's calls)
      return std::optional<Failure>(Failure{true, e.what()});
    }
  };
  const std::optional<Failure> failure = co_await run_blocking(std::move(work));
  if (!failure) co_return Result<void>{};
  spdlog::error("bucket: fetching snapshot {} of {} into {}: {}", id, owner, folder, failure->why);
  if (failure->local)
    co_return ApiError::insufficient_storage("The server's disk could not take the snapshot's copy");
  co_return ApiError::overloaded(
      "The snapshot cannot be fetched from the sessions bucket now; try again later", retry_after_sec_);
}

boost::asio::awaitable<void> SnapshotBucket::remove(std::string owner, std::string id) {
  const std::string prefix = prefix_of(owner, id);
  try {
    co_await run_blocking([this, &prefix] { remove_blocking(prefix); });
  } catch (const std::exception& e) {
    spdlog::warn("bucket: deleting the snapshot objects under {}: {}", prefix, e.what());
  }
}

}  // namespace sandboxd::cluster
