#include "store/file_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <magic.h>
#include <openssl/evp.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <cerrno>
#include <ctime>
#include <functional>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "base/hex.h"
#include "base/temp_files.h"
#include "base/unique_fd.h"

namespace sandboxd::store {
namespace {


constexpr size_t kMimeHeadBytes = 4096;
constexpr size_t kReadChunkBytes = 64 * 1024;
// Deeper trees are left unlisted rather than holding one fd per level without bound.
constexpr int kMaxWalkDepth = 128;


int64_t now_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

int64_t mtime_ns_of(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && text.substr(0, prefix.size()) == prefix;
}

// The part of `path` strictly below `mount`, or nullopt.
std::optional<std::string_view> below_mount(std::string_view path, std::string_view mount) {
  if (path.size() <= mount.size() + 1 || !starts_with(path, mount) || path[mount.size()] != '/') return std::nullopt;
  return path.substr(mount.size() + 1);
}

std::string random_temp_name() {
  unsigned char bytes[8];
  size_t filled = 0;
  while (filled < sizeof bytes) {
    ssize_t n = getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (n > 0) filled += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name(kTempPrefix);
  for (unsigned char b : bytes) {
    name.push_back(kHex[b >> 4]);
    name.push_back(kHex[b & 15]);
  }
  return name;
}

// The usual meaning of an errno for callers; operations adjust the cases where their
// header documents something else.
FileError error_from_errno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return FileError::kNotFound;
    case EISDIR:
      return FileError::kNotAFile;
    case EXDEV:  // RESOLVE_BENEATH: a symlink or ".." led outside the mount
    case ELOOP:  // RESOLVE_NO_MAGICLINKS, or a symlink where none may be
      return FileError::kOutsideMounts;
    case ENOSPC:
    case EDQUOT:
      return FileError::kNoSpace;
    case EFBIG:
      return FileError::kTooLarge;
    default:
      return FileError::kIo;
  }
}

struct SplitPath {
  std::string parent;  // "" for the mount itself
  std::string leaf;
};

SplitPath split_relative(const std::string& relative) {
  auto slash = relative.rfind('/');
  if (slash == std::string::npos) return {"", relative};
  return {relative.substr(0, slash), relative.substr(slash + 1)};
}

UniqueFd open_directory(const std::string& host_path, int flags) {
  return UniqueFd(::open(host_path.c_str(), flags | O_DIRECTORY | O_CLOEXEC));
}

class Md5 {
 public:
  Md5() : context_(EVP_MD_CTX_new()) {
    if (!context_ || EVP_DigestInit_ex(context_, EVP_md5(), nullptr) != 1) throw std::runtime_error("md5: init failed");
  }
  ~Md5() { EVP_MD_CTX_free(context_); }
  Md5(const Md5&) = delete;
  Md5& operator=(const Md5&) = delete;

  void update(const char* data, size_t size) { EVP_DigestUpdate(context_, data, size); }
  std::string hex_digest() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_DigestFinal_ex(context_, digest, &length);
    return hex_encode(digest, length);
  }

 private:
  EVP_MD_CTX* context_;
};

// MD5 of an upload as it streams: the first bytes are hashed inline; past
// kInlineBytes the hashing moves to a worker thread fed through a small bounded queue,
// so that hashing (about 750 MB/s, inherently serial) overlaps receiving and writing.
class StreamingMd5 {
 public:
  static constexpr size_t kInlineBytes = 4u << 20;
  static constexpr size_t kQueueChunks = 8;

  ~StreamingMd5() { stop_worker(); }

  void update(const char* data, size_t size) {
    if (!worker_.joinable() && seen_ + size <= kInlineBytes) {
      seen_ += size;
      md5_.update(data, size);
      return;
    }
    seen_ += size;
    if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
    std::unique_lock lock(mutex_);
    space_.wait(lock, [&] { return queue_.size() < kQueueChunks; });
    queue_.emplace_back(data, size);
    ready_.notify_one();
  }

  std::string hex_digest() {
    stop_worker();
    return md5_.hex_digest();
  }

 private:
  void run() {
    for (;;) {
      std::string chunk;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return !queue_.empty() || done_; });
        if (queue_.empty()) return;
        chunk = std::move(queue_.front());
        queue_.pop_front();
      }
      space_.notify_one();
      md5_.update(chunk.data(), chunk.size());
    }
  }

  void stop_worker() {
    if (!worker_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    ready_.notify_one();
    worker_.join();
  }

  Md5 md5_;
  uint64_t seen_ = 0;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable ready_, space_;
  std::deque<std::string> queue_;
  bool done_ = false;
};

// What sync and stat_file learn by reading a whole body.
struct Content {
  uint64_t size = 0;
  std::string etag;
  std::string head;  // the first kMimeHeadBytes, for MIME detection
};

bool read_content(int fd, Content& out) {
  Md5 md5;
  std::string buffer(kReadChunkBytes, '\0');
  for (;;) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    md5.update(buffer.data(), static_cast<size_t>(n));
    if (out.head.size() < kMimeHeadBytes) {
      out.head.append(buffer.data(), std::min(static_cast<size_t>(n), kMimeHeadBytes - out.head.size()));
    }
    out.size += static_cast<uint64_t>(n);
  }
  out.etag = md5.hex_digest();
  return true;
}

std::string leaf_name(std::string_view path) {
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// A record for the regular file open at `fd` (position 0), or nullopt when reading fails.
std::optional<FileRecord> describe_open_file(int fd, const std::string& storage, const std::string& sandbox_path) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  // mtime is taken before reading: a write racing with the read changes mtime again,
  // so the next sync sees the file as changed and hashes it anew.
  FileRecord record;
  record.storage = storage;
  record.path = sandbox_path;
  record.mtime_ns = mtime_ns_of(st);
  Content content;
  if (!read_content(fd, content)) return std::nullopt;
  record.size = content.size;
  record.etag = std::move(content.etag);
  record.mime = FileStore::detect_mime(leaf_name(sandbox_path), content.head);
  return record;
}

bool unchanged(const FileRecord& record, const struct stat& st) {
  return record.size == static_cast<uint64_t>(st.st_size) && record.mtime_ns == mtime_ns_of(st);
}

// --- writing ------------------------------------------------------------------------

class AtomicFileWriter final : public FileWriter {
 public:
  AtomicFileWriter(UniqueFd directory, UniqueFd file, std::string temp_name, std::string leaf,
                   std::string sandbox_path, uid_t uid, gid_t gid)
      : directory_(std::move(directory)),
        file_(std::move(file)),
        temp_name_(std::move(temp_name)),
        leaf_(std::move(leaf)),
        sandbox_path_(std::move(sandbox_path)),
        uid_(uid),
        gid_(gid) {}

  ~AtomicFileWriter() override {
    if (!finished_) abort();
  }

  FileError write(const char* data, size_t size) override {
    if (finished_) return FileError::kIo;
    if (failure_ != FileError::kNone) return failure_;
    md5_.update(data, size);
    if (head_.size() < kMimeHeadBytes) head_.append(data, std::min(size, kMimeHeadBytes - head_.size()));
    while (size > 0) {
      ssize_t n = ::write(file_.get(), data, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return failure_ = error_from_errno(errno);
      data += n;
      size -= static_cast<size_t>(n);
      size_ += static_cast<uint64_t>(n);
    }
    // Start writing back what has arrived so far (without waiting for it): the disk
    // works while the rest of the body streams in, and the fsync at commit has only the
    // tail left instead of the whole file.
    if (size_ - written_back_ >= kWritebackStep) {
      sync_file_range(file_.get(), static_cast<off_t>(written_back_), static_cast<off_t>(size_ - written_back_),
                      SYNC_FILE_RANGE_WRITE);
      written_back_ = size_;
    }
    return FileError::kNone;
  }

  FileError commit(FileRecord& record) override {
    if (finished_) return FileError::kIo;
    FileError error = failure_ != FileError::kNone ? failure_ : finish_file(record);
    if (error != FileError::kNone) {
      abort();
      return error;
    }
    finished_ = true;
    file_.reset();
    return FileError::kNone;
  }

  void abort() override {
    if (finished_) return;
    finished_ = true;
    file_.reset();
    if (!temp_name_.empty()) unlinkat(directory_.get(), temp_name_.c_str(), 0);
  }

 private:
  FileError finish_file(FileRecord& record) {
    if (fchown(file_.get(), uid_, gid_) != 0 || fchmod(file_.get(), 0644) != 0) return FileError::kIo;
    if (!stamp_precise_mtime()) return FileError::kIo;
    // Delayed allocation can report a full volume only here.
    if (fsync(file_.get()) != 0) return error_from_errno(errno);
    struct stat st;
    if (fstat(file_.get(), &st) != 0) return FileError::kIo;
    if (FileError error = place_file(); error != FileError::kNone) return error;
    if (fsync(directory_.get()) != 0) return FileError::kIo;

    record.path = sandbox_path_;
    record.size = size_;
    record.etag = md5_.hex_digest();
    record.mime = FileStore::detect_mime(leaf_, head_);
    record.created_at = now_seconds();
    record.mtime_ns = mtime_ns_of(st);
    return FileError::kNone;
  }

  // File systems stamp mtime from a coarse clock, so two uploads of the same size to
  // one key within a few milliseconds could share (size, mtime) and sync/stat_file
  // could not tell which one is on disk. A nanosecond clock reading keeps versions
  // apart: if two commits race and the metadata ends up describing the loser, the
  // next stat_file or sync sees the mismatch and re-reads the body.
  bool stamp_precise_mtime() {
    timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) return false;
    const timespec times[2] = {now, now};
    return futimens(file_.get(), times) == 0;
  }

  // Moves the finished body over the target in one rename, so readers see either the
  // old or the new version, never a mix.
  FileError place_file() {
    if (temp_name_.empty()) {
      if (FileError error = link_anonymous_file(); error != FileError::kNone) return error;
    }
    if (renameat(directory_.get(), temp_name_.c_str(), directory_.get(), leaf_.c_str()) != 0) {
      int err = errno;
      unlinkat(directory_.get(), temp_name_.c_str(), 0);
      temp_name_.clear();
      return err == EISDIR || err == ENOTEMPTY || err == EEXIST ? FileError::kNotAFile : error_from_errno(err);
    }
    temp_name_.clear();
    return FileError::kNone;
  }

  // An O_TMPFILE body gets a name first: linkat cannot replace an existing file.
  // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc/self/fd works without it.
  FileError link_anonymous_file() {
    std::string name = random_temp_name();
    if (linkat(file_.get(), "", directory_.get(), name.c_str(), AT_EMPTY_PATH) != 0) {
      std::string proc_path = "/proc/self/fd/" + std::to_string(file_.get());
      if (linkat(AT_FDCWD, proc_path.c_str(), directory_.get(), name.c_str(), AT_SYMLINK_FOLLOW) != 0) {
        return error_from_errno(errno);
      }
    }
    temp_name_ = std::move(name);
    return FileError::kNone;
  }

  UniqueFd directory_;     // the target's parent, for linkat/renameat/fsync
  UniqueFd file_;          // the temporary body
  std::string temp_name_;  // its name in directory_; empty while it is an O_TMPFILE
  std::string leaf_;
  std::string sandbox_path_;
  uid_t uid_;
  gid_t gid_;
  StreamingMd5 md5_;
  std::string head_;
  uint64_t size_ = 0;
  uint64_t written_back_ = 0;  // writeback started up to here
  static constexpr uint64_t kWritebackStep = 8u << 20;
  FileError failure_ = FileError::kNone;
  bool finished_ = false;
};

// Opens an anonymous (O_TMPFILE) or, where unsupported, a named temporary file in
// `directory`. `temp_name` is set for a named one.
int open_temp_file(int directory, std::string& temp_name) {
  int fd = openat(directory, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) return -errno;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string name = random_temp_name();
    fd = openat(directory, name.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      temp_name = std::move(name);
      return fd;
    }
    if (errno != EEXIST) break;
  }
  return -errno;
}

// --- walking ------------------------------------------------------------------------

using FileVisitor = std::function<void(int directory, const char* name, const std::string& sandbox_path,
                                       const struct stat& st)>;

// Visits every regular file below `directory` (an fd this function does not own).
// Symlinks are never followed: entries are lstat'ed and sub-folders are opened with
// O_NOFOLLOW, so a link swapped in after the lstat fails to open instead of leading out.
void walk_regular_files(int directory, const std::string& sandbox_dir, int depth, const FileVisitor& visit) {
  int listing_fd = fcntl(directory, F_DUPFD_CLOEXEC, 0);
  if (listing_fd < 0) return;
  DIR* listing = fdopendir(listing_fd);
  if (!listing) {
    ::close(listing_fd);
    return;
  }
  while (dirent* entry = readdir(listing)) {
    std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (fstatat(directory, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    std::string sandbox_path = sandbox_dir + "/" + entry->d_name;
    if (S_ISDIR(st.st_mode)) {
      if (depth >= kMaxWalkDepth) continue;
      UniqueFd child(openat(directory, entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (child.valid()) walk_regular_files(child.get(), sandbox_path, depth + 1, visit);
    } else if (S_ISREG(st.st_mode) && !is_temp_name(name)) {
      visit(directory, entry->d_name, sandbox_path, st);
    }
  }
  closedir(listing);
}

bool is_regular_file_beneath(int root, const std::string& relative) {
  UniqueFd fd(open_beneath(root, relative, O_PATH | O_NOFOLLOW));
  struct stat st;
  return fd.valid() && fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode);
}

// --- MIME ---------------------------------------------------------------------------

// One libmagic handle per thread: magic_t is not thread-safe and loading the database
// costs milliseconds.
class MagicCookie {
 public:
  MagicCookie() : cookie_(magic_open(MAGIC_MIME_TYPE)) {
    if (cookie_ && magic_load(cookie_, nullptr) != 0) {
      magic_close(cookie_);
      cookie_ = nullptr;
    }
  }
  ~MagicCookie() {
    if (cookie_) magic_close(cookie_);
  }
  MagicCookie(const MagicCookie&) = delete;
  MagicCookie& operator=(const MagicCookie&) = delete;

  std::string type_of(std::string_view bytes) {
    if (!cookie_) return {};
    const char* type = magic_buffer(cookie_, bytes.data(), bytes.size());
    return type ? type : "";
  }

 private:
  magic_t cookie_;
};

struct ExtensionType {
  std::string_view extension;
  std::string_view mime;
};

constexpr ExtensionType kExtensionTypes[] = {
    {"csv", "text/csv"},
    {"tsv", "text/tab-separated-values"},
    {"json", "application/json"},
    {"jsonl", "application/jsonl"},
    {"ndjson", "application/x-ndjson"},
    {"md", "text/markdown"},
    {"markdown", "text/markdown"},
    {"html", "text/html"},
    {"htm", "text/html"},
    {"css", "text/css"},
    {"js", "text/javascript"},
    {"mjs", "text/javascript"},
    {"ts", "text/x-typescript"},
    {"py", "text/x-python"},
    {"ipynb", "application/x-ipynb+json"},
    {"sh", "text/x-shellscript"},
    {"sql", "application/sql"},
    {"xml", "application/xml"},
    {"yaml", "application/yaml"},
    {"yml", "application/yaml"},
    {"toml", "application/toml"},
    {"svg", "image/svg+xml"},
    {"txt", "text/plain"},
    {"log", "text/plain"},
    {"tex", "application/x-tex"},
    {"rtf", "application/rtf"},
    {"xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"},
    {"docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"},
    {"pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation"},
    {"xls", "application/vnd.ms-excel"},
    {"doc", "application/msword"},
    {"ppt", "application/vnd.ms-powerpoint"},
    {"odt", "application/vnd.oasis.opendocument.text"},
    {"ods", "application/vnd.oasis.opendocument.spreadsheet"},
    {"pdf", "application/pdf"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"bmp", "image/bmp"},
    {"ico", "image/vnd.microsoft.icon"},
    {"tif", "image/tiff"},
    {"tiff", "image/tiff"},
    {"mp3", "audio/mpeg"},
    {"wav", "audio/wav"},
    {"mp4", "video/mp4"},
    {"webm", "video/webm"},
    {"zip", "application/zip"},
    {"tar", "application/x-tar"},
    {"gz", "application/gzip"},
    {"tgz", "application/gzip"},
    {"bz2", "application/x-bzip2"},
    {"xz", "application/x-xz"},
    {"7z", "application/x-7z-compressed"},
    {"parquet", "application/vnd.apache.parquet"},
    {"feather", "application/vnd.apache.arrow.file"},
    {"arrow", "application/vnd.apache.arrow.file"},
    {"sqlite", "application/vnd.sqlite3"},
    {"db", "application/vnd.sqlite3"},
    {"pkl", "application/octet-stream"},
    {"npy", "application/octet-stream"},
    {"wasm", "application/wasm"},
};

std::string_view type_for_extension(std::string_view filename) {
  auto dot = filename.rfind('.');
  if (dot == std::string_view::npos || dot + 1 == filename.size()) return {};
  std::string extension(filename.substr(dot + 1));
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& entry : kExtensionTypes) {
    if (entry.extension == extension) return entry.mime;
  }
  return {};
}

bool is_textual(std::string_view mime) {
  return starts_with(mime, "text/") || mime == "application/json" || mime == "application/xml" ||
         mime == "image/svg+xml" || mime == "application/yaml" || mime == "application/toml" ||
         mime == "application/sql" || mime == "application/x-tex" || mime == "application/x-ipynb+json" ||
         mime == "application/jsonl" || mime == "application/x-ndjson";
}

// libmagic says nothing useful about these, or (for text) guesses a language from a
// few keywords ("text/x-c" for CSS, "text/plain" for CSV), so the extension decides.
bool extension_should_decide(std::string_view magic_type, std::string_view extension_type) {
  if (magic_type.empty() || magic_type == "text/plain" || magic_type == "application/octet-stream" ||
      magic_type == "inode/x-empty" || magic_type == "application/x-empty") {
    return true;
  }
  // Office documents and other zip-based formats are zip archives to libmagic.
  if (magic_type == "application/zip") return !is_textual(extension_type);
  return starts_with(magic_type, "text/") && is_textual(extension_type);
}

// Text a person would read: no NUL and no control bytes besides whitespace and ESC.
// Bytes >= 0x80 pass, so UTF-8 and Latin-1 text both count.
bool looks_like_text(std::string_view head) {
  return std::none_of(head.begin(), head.end(), [](char c) {
    auto byte = static_cast<unsigned char>(c);
    return (byte < 0x20 && byte != '\t' && byte != '\n' && byte != '\r' && byte != '\f' && byte != 0x1b) ||
           byte == 0x7f;
  });
}

}  // namespace

// --- FileStore ----------------------------------------------------------------------

FileStore::FileStore(Metadata& metadata, uid_t uid, gid_t gid) : metadata_(metadata), uid_(uid), gid_(gid) {}

std::unique_ptr<FileWriter> FileStore::begin_write(const ContainerPaths& paths,
                                                   const std::string& sandbox_path, FileError& error) {
  auto resolved = resolve_sandbox_path(paths, sandbox_path);
  if (!resolved || (resolved->mount != Mount::kUploads && resolved->mount != Mount::kOutputs)) {
    error = FileError::kOutsideMounts;
    return nullptr;
  }
  if (resolved->relative.empty()) {
    error = FileError::kNotAFile;
    return nullptr;
  }
  UniqueFd root = open_directory(resolved->host_root, O_PATH);
  if (!root.valid()) {
    error = FileError::kIo;
    return nullptr;
  }
  // ENOTDIR: a path component is a file where a folder is needed.
  auto fail = [&error](int err) -> std::unique_ptr<FileWriter> {
    error = err == ENOTDIR ? FileError::kNotAFile : error_from_errno(err);
    return nullptr;
  };
  if (int rc = make_parents_beneath(root.get(), resolved->relative, uid_, gid_); rc < 0) return fail(-rc);

  SplitPath target = split_relative(resolved->relative);
  int directory_fd = open_beneath(root.get(), target.parent, O_RDONLY | O_DIRECTORY);
  if (directory_fd < 0) return fail(-directory_fd);
  UniqueFd directory(directory_fd);

  // Only regular files are created or replaced: never a folder, and never a symlink
  // (whatever it points to), so nothing is written through a link code made.
  struct stat st;
  if (fstatat(directory.get(), target.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st.st_mode)) {
      error = FileError::kNotAFile;
      return nullptr;
    }
  } else if (errno != ENOENT) {
    return fail(errno);
  }

  std::string temp_name;
  int fd = open_temp_file(directory.get(), temp_name);
  if (fd < 0) return fail(-fd);
  error = FileError::kNone;
  return std::make_unique<AtomicFileWriter>(std::move(directory), UniqueFd(fd), std::move(temp_name),
                                            std::move(target.leaf), resolved->sandbox_path, uid_, gid_);
}

FileError FileStore::open_for_read(const ContainerPaths& paths, const std::string& sandbox_path,
                                   OpenedFile& out) {
  auto resolved = resolve_sandbox_path(paths, sandbox_path);
  if (!resolved) return FileError::kOutsideMounts;
  UniqueFd root = open_directory(resolved->host_root, O_PATH);
  if (!root.valid()) return FileError::kNotFound;
  // O_NONBLOCK: opening a FIFO that code left behind must not hang the server.
  int fd = open_beneath(root.get(), resolved->relative, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return fd == -EXDEV || fd == -ELOOP ? FileError::kNotAFile : error_from_errno(-fd);
  UniqueFd file(fd);
  struct stat st;
  if (fstat(file.get(), &st) != 0) return FileError::kIo;
  if (!S_ISREG(st.st_mode)) return FileError::kNotAFile;
  int flags = fcntl(file.get(), F_GETFL);
  if (flags < 0 || fcntl(file.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) return FileError::kIo;
  out.fd = file.release();
  out.size = static_cast<uint64_t>(st.st_size);
  out.mtime_ns = mtime_ns_of(st);
  return FileError::kNone;
}

// One pass over uploads/ and outputs/: unchanged files (same size and mtime) cost one
// lstat, only new or changed ones are read. A mount whose host directory cannot be
// opened is skipped entirely, so its records survive a volume that is not mounted.
void FileStore::sync(const std::string& storage, const ContainerPaths& paths) {
  const std::pair<std::string_view, const std::string*> mounts[] = {{kUploadsMount, &paths.uploads},
                                                                      {kOutputsMount, &paths.outputs}};
  auto synced_here = [&mounts](std::string_view path) {
    return std::any_of(std::begin(mounts), std::end(mounts),
                       [path](const auto& mount) { return below_mount(path, mount.first).has_value(); });
  };
  std::unordered_map<std::string, FileRecord> unseen;  // rows not (yet) matched by a file on disk
  for (auto& record : metadata_.files_of(storage)) {
    if (synced_here(record.path)) {
      std::string path = record.path;
      unseen.emplace(std::move(path), std::move(record));
    }
  }

  int64_t now = now_seconds();
  for (const auto& [mount, host] : mounts) {
    if (host->empty()) continue;
    UniqueFd root = open_directory(*host, O_RDONLY);
    if (!root.valid()) {
      std::erase_if(unseen, [mount = mount](const auto& entry) { return below_mount(entry.first, mount); });
      continue;
    }
    walk_regular_files(root.get(), std::string(mount), 0,
                       [&](int directory, const char* name, const std::string& path, const struct stat& st) {
                         auto known = unseen.find(path);
                         if (known != unseen.end() && unchanged(known->second, st)) {
                           unseen.erase(known);
                           return;
                         }
                         UniqueFd file(openat(directory, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
                         auto record = file.valid() ? describe_open_file(file.get(), storage, path) : std::nullopt;
                         if (!record) return;  // vanished or unreadable: dropped below if it had a row
                         record->created_at = known != unseen.end() ? known->second.created_at : now;
                         metadata_.put_file(*record, false);
                         if (known != unseen.end()) unseen.erase(known);
                       });
  }

  // Rows whose file is gone. Looked at once more, in case it was written after the walk.
  for (const auto& [path, record] : unseen) {
    auto resolved = resolve_sandbox_path(paths, path);
    if (resolved) {
      UniqueFd root = open_directory(resolved->host_root, O_PATH);
      if (root.valid() && is_regular_file_beneath(root.get(), resolved->relative)) continue;
    }
    metadata_.delete_file(storage, path);
  }
}

// A final-component symlink is not followed here (O_NOFOLLOW), matching sync, which
// never records symlinks: a path that is a link has no record.
std::optional<FileRecord> FileStore::stat_file(const std::string& storage, const ContainerPaths& paths,
                                               const std::string& sandbox_path) {
  auto resolved = resolve_sandbox_path(paths, sandbox_path);
  if (!resolved || resolved->relative.empty()) return std::nullopt;
  UniqueFd root = open_directory(resolved->host_root, O_PATH);
  if (!root.valid()) return std::nullopt;

  int fd = open_beneath(root.get(), resolved->relative, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY);
  // Only a definite answer drops the row; a transient error (EMFILE, EIO) must not.
  auto absent = [&](bool definite) -> std::optional<FileRecord> {
    if (definite) metadata_.delete_file(storage, resolved->sandbox_path);
    return std::nullopt;
  };
  if (fd < 0) return absent(fd == -ENOENT || fd == -ENOTDIR || fd == -ELOOP || fd == -EXDEV);
  UniqueFd file(fd);
  struct stat st;
  if (fstat(file.get(), &st) != 0) return std::nullopt;
  if (!S_ISREG(st.st_mode)) return absent(true);

  auto known = metadata_.find_file(storage, resolved->sandbox_path);
  if (known && unchanged(*known, st)) return known;
  auto record = describe_open_file(file.get(), storage, resolved->sandbox_path);
  if (!record) return std::nullopt;
  record->created_at = known ? known->created_at : now_seconds();
  metadata_.put_file(*record, false);
  return metadata_.find_file(storage, resolved->sandbox_path);
}

FileError FileStore::remove(const std::string& storage, const ContainerPaths& paths,
                            const std::string& sandbox_path) {
  auto resolved = resolve_sandbox_path(paths, sandbox_path);
  // Skills are shared, read-only content, never one container's to delete.
  if (!resolved || resolved->mount == Mount::kSkills) return FileError::kOutsideMounts;
  if (resolved->relative.empty()) return FileError::kNotAFile;
  UniqueFd root = open_directory(resolved->host_root, O_PATH);
  if (!root.valid()) return FileError::kNotFound;

  SplitPath target = split_relative(resolved->relative);
  auto absent = [&] {
    metadata_.delete_file(storage, resolved->sandbox_path);
    return FileError::kNotFound;
  };
  int directory_fd = open_beneath(root.get(), target.parent, O_PATH | O_DIRECTORY);
  if (directory_fd < 0) {
    return directory_fd == -ENOENT || directory_fd == -ENOTDIR ? absent() : error_from_errno(-directory_fd);
  }
  UniqueFd directory(directory_fd);
  struct stat st;
  if (fstatat(directory.get(), target.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? absent() : error_from_errno(errno);
  }
  if (S_ISDIR(st.st_mode)) return FileError::kNotAFile;
  // A symlink is removed itself; its target is never touched.
  if (unlinkat(directory.get(), target.leaf.c_str(), 0) != 0) {
    return errno == ENOENT ? absent() : error_from_errno(errno);
  }
  metadata_.delete_file(storage, resolved->sandbox_path);
  return FileError::kNone;
}

// Keys here are paths relative to uploads/ (plain string prefix, as S3 does). Outputs
// are never touched: the Files API deletes only uploaded files by prefix.
size_t FileStore::remove_prefix(const std::string& storage, const ContainerPaths& paths,
                                const std::string& key_prefix) {
  sync(storage, paths);
  size_t removed = 0;
  for (const auto& record : metadata_.files_of(storage)) {
    auto key = below_mount(record.path, kUploadsMount);
    if (!key || !starts_with(*key, key_prefix)) continue;
    if (remove(storage, paths, record.path) == FileError::kNone) ++removed;
  }
  return removed;
}

std::string FileStore::detect_mime(std::string_view filename, std::string_view head) {
  std::string_view extension_type = type_for_extension(filename);
  // libmagic spends ~200 us on a text file only to say text/plain or guess a language,
  // and for text the extension would win anyway; binary formats are quick for it.
  if (is_textual(extension_type) && looks_like_text(head)) return std::string(extension_type);
  thread_local MagicCookie magic;
  std::string magic_type = magic.type_of(head);
  if (!extension_type.empty() && extension_should_decide(magic_type, extension_type)) {
    return std::string(extension_type);
  }
  if (magic_type.empty() || magic_type == "inode/x-empty" || magic_type == "application/x-empty") {
    return "application/octet-stream";
  }
  return magic_type;
}

}  // namespace sandboxd::store
