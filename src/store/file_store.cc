#include "store/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <functional>
#include <unordered_map>
#include <utility>

#include "base/unique_fd.h"
#include "store/file_walk.h"
#include "store/md5.h"
#include "store/mime.h"

namespace sandboxd::store {
namespace {

constexpr size_t kReadChunkBytes = 64 * 1024;

int64_t now_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && text.substr(0, prefix.size()) == prefix;
}

// The part of `path` strictly below `mount`, or nullopt.
std::optional<std::string_view> below_mount(std::string_view path, std::string_view mount) {
  if (path.size() <= mount.size() + 1 || !starts_with(path, mount) || path[mount.size()] != '/')
    return std::nullopt;
  return path.substr(mount.size() + 1);
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
std::optional<FileRecord> describe_open_file(int fd, const std::string& storage,
                                             const std::string& sandbox_path) {
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
  record.mime = detect_mime(leaf_name(sandbox_path), content.head);
  return record;
}

bool unchanged(const FileRecord& record, const struct stat& st) {
  return record.size == static_cast<uint64_t>(st.st_size) && record.mtime_ns == mtime_ns_of(st);
}

bool is_regular_file_beneath(int root, const std::string& relative) {
  UniqueFd fd(open_beneath(root, relative, O_PATH | O_NOFOLLOW));
  struct stat st;
  return fd.valid() && fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

// --- FileStore ----------------------------------------------------------------------

FileStore::FileStore(Metadata& metadata, uid_t uid, gid_t gid) : metadata_(metadata), uid_(uid), gid_(gid) {}

FileResult<std::unique_ptr<FileWriter>> FileStore::begin_write(const ContainerPaths& paths,
                                                               const std::string& sandbox_path,
                                                               bool workspace_too) {
  auto resolved = resolve_sandbox_path(paths, sandbox_path);
  if (!resolved || (resolved->mount != Mount::kUploads && resolved->mount != Mount::kOutputs &&
                    !(workspace_too && resolved->mount == Mount::kWorkspace))) {
    return FileError::kOutsideMounts;
  }
  if (resolved->relative.empty()) return FileError::kNotAFile;
  UniqueFd root = open_directory(resolved->host_root, O_PATH);
  if (!root.valid()) return FileError::kIo;
  // ENOTDIR: a path component is a file where a folder is needed.
  auto failure = [](int err) { return err == ENOTDIR ? FileError::kNotAFile : error_from_errno(err); };
  if (int rc = make_parents_beneath(root.get(), resolved->relative, uid_, gid_); rc < 0) return failure(-rc);

  SplitPath target = split_relative(resolved->relative);
  int directory_fd = open_beneath(root.get(), target.parent, O_RDONLY | O_DIRECTORY);
  if (directory_fd < 0) return failure(-directory_fd);
  UniqueFd directory(directory_fd);

  // Only regular files are created or replaced: never a folder, and never a symlink
  // (whatever it points to), so nothing is written through a link code made.
  struct stat st;
  if (fstatat(directory.get(), target.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st.st_mode)) return FileError::kNotAFile;
  } else if (errno != ENOENT) {
    return failure(errno);
  }
  return begin_atomic_write(std::move(directory), std::move(target.leaf), resolved->sandbox_path, uid_, gid_);
}

FileResult<OpenedFile> FileStore::open_for_read(const ContainerPaths& paths,
                                                const std::string& sandbox_path) {
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
  OpenedFile out;
  out.fd = file.release();
  out.size = static_cast<uint64_t>(st.st_size);
  out.mtime_ns = mtime_ns_of(st);
  return out;
}

// One pass over uploads/ and outputs/: unchanged files (same size and mtime) cost one
// lstat, only new or changed ones are read. A mount whose host directory cannot be
// opened is skipped entirely, so its records survive a volume that is not mounted.
void FileStore::sync(const std::string& storage, const ContainerPaths& paths, OutputChanges* changes) {
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
  auto watching = tree_changes_ ? tree_changes_->begin_walk(storage) : nullptr;
  for (const auto& [mount, host] : mounts) {
    if (host->empty()) continue;
    UniqueFd root = open_directory(*host, O_RDONLY);
    if (!root.valid()) {
      if (watching) watching->left_out();
      std::erase_if(unseen, [mount = mount](const auto& entry) { return below_mount(entry.first, mount); });
      continue;
    }
    const bool outputs = mount == kOutputsMount;
    walk_regular_files(
        root.get(), std::string(mount),
        [&](int directory, const char* name, const std::string& path, const struct stat& st) {
          // Written through another of its links, it changes without an event here.
          if (watching && st.st_nlink > 1) watching->uncertain();
          const int64_t ctime_ns =
              static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
          if (changes && outputs && ctime_ns >= changes->since_ns) {
            auto before = changes->reported_before.find(path);
            if (before == changes->reported_before.end() || before->second != ctime_ns) {
              if (changes->paths.size() < changes->limit) {
                changes->paths.push_back(path);
                changes->reported_now[path] = ctime_ns;
              } else {
                changes->truncated = true;
              }
            }
          }
          auto known = unseen.find(path);
          if (known != unseen.end() && unchanged(known->second, st)) {
            unseen.erase(known);
            return;
          }
          UniqueFd file(open_beneath(directory, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
          auto record = file.valid() ? describe_open_file(file.get(), storage, path) : std::nullopt;
          if (!record) return;  // vanished or unreadable: dropped below if it had a row
          record->created_at = known != unseen.end() ? known->second.created_at : now;
          metadata_.put_file(*record, false);
          if (known != unseen.end()) unseen.erase(known);
        },
        watching.get());
  }
  if (watching) tree_changes_->end_walk(*watching);

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

FileResult<void> FileStore::remove(const std::string& storage, const ContainerPaths& paths,
                                   const std::string& sandbox_path) {
  auto resolved = resolve_sandbox_path(paths, sandbox_path);
  // Skills are shared, read-only content, never one container's to delete.
  if (!resolved || resolved->mount == Mount::kSkills) return FileError::kOutsideMounts;
  if (resolved->relative.empty()) return FileError::kNotAFile;
  UniqueFd root = open_directory(resolved->host_root, O_PATH);
  if (!root.valid()) return FileError::kNotFound;

  SplitPath target = split_relative(resolved->relative);
  auto absent = [&]() -> FileResult<void> {
    metadata_.delete_file(storage, resolved->sandbox_path);
    return FileError::kNotFound;
  };
  int directory_fd = open_beneath(root.get(), target.parent, O_PATH | O_DIRECTORY);
  if (directory_fd < 0) {
    if (directory_fd == -ENOENT || directory_fd == -ENOTDIR) return absent();
    return error_from_errno(-directory_fd);
  }
  UniqueFd directory(directory_fd);
  struct stat st;
  if (fstatat(directory.get(), target.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return absent();
    return error_from_errno(errno);
  }
  if (S_ISDIR(st.st_mode)) return FileError::kNotAFile;
  // A symlink is removed itself; its target is never touched.
  if (unlinkat(directory.get(), target.leaf.c_str(), 0) != 0) {
    if (errno == ENOENT) return absent();
    return error_from_errno(errno);
  }
  metadata_.delete_file(storage, resolved->sandbox_path);
  return {};
}

// Keys here are paths relative to uploads/ (plain string prefix, as S3 does). Outputs
// are never touched: the Files API deletes only uploaded files by prefix.
size_t FileStore::remove_prefix(const std::string& storage, const ContainerPaths& paths,
                                const std::string& key_prefix, std::vector<std::string>* removed_paths) {
  sync(storage, paths);
  size_t removed = 0;
  for (const auto& record : metadata_.files_of(storage)) {
    auto key = below_mount(record.path, kUploadsMount);
    if (!key || !starts_with(*key, key_prefix)) continue;
    if (!remove(storage, paths, record.path)) continue;
    ++removed;
    if (removed_paths) removed_paths->push_back(record.path);
  }
  return removed;
}

}  // namespace sandboxd::store
