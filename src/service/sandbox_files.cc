#include "service/sandbox_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <algorithm>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"

namespace sandboxd::service {
namespace {

// How deep a removal descends (a tree deeper than this is refused, not recursed into
// without bound).
constexpr int kMaxRemoveDepth = 512;

struct Located {
  ResolvedPath resolved;
  UniqueFd root;
};

ApiError not_found(const std::string& path) {
  return ApiError::not_found("No such file or directory: " + path);
}

Result<Located> locate(const ContainerPaths& paths, const std::string& sandbox_path, bool write) {
  auto resolved = resolve_sandbox_path(paths, sandbox_path);
  if (!resolved || resolved->host_root.empty())
    return ApiError::invalid_request("'" + sandbox_path.substr(0, 512) +
                                     "' is outside the sandbox's persistent folders (/home/user, "
                                     "/mnt/user-data/outputs, /mnt/user-data/uploads)");
  if (write && resolved->read_only)
    return ApiError::permission("'" + resolved->sandbox_path + "' is read-only in the sandbox");
  int root = ::open(resolved->host_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return ApiError::internal();
  return Located{std::move(*resolved), UniqueFd(root)};
}

struct Split {
  std::string parent, leaf;
};
Split split(const std::string& relative) {
  const size_t slash = relative.rfind('/');
  if (slash == std::string::npos) return {"", relative};
  return {relative.substr(0, slash), relative.substr(slash + 1)};
}

ApiError from_errno(int err, const std::string& path) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
    case EXDEV:  // a symlink on the way leads outside the mount: nothing there for us
    case ELOOP:
      return not_found(path);
    case EEXIST:
    case ENOTEMPTY:
      return ApiError::conflict("'" + path + "' exists already");
    case ENOSPC:
    case EDQUOT:
      return ApiError::insufficient_storage("The sandbox's disk is full");
    case EACCES:
    case EPERM:
    case EROFS:
      return ApiError::permission("Permission denied: " + path);
    case EISDIR:
      return ApiError::invalid_request("'" + path + "' is a directory");
    default:
      return ApiError::internal();
  }
}

std::string permissions_of(mode_t mode) {
  std::string out = S_ISDIR(mode) ? "d" : S_ISLNK(mode) ? "l" : "-";
  const char* letters = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) out += (mode & (0400 >> i)) ? letters[i] : '-';
  return out;
}

std::string join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

// A link's target as an absolute path in the sandbox, as envd reports it: a relative
// target taken from the link's folder, "." and ".." worked out by name. (Only the text
// is worked on, nothing is followed: the target may be anywhere, and is not opened.)
std::string absolute_target(const std::string& link_path, const std::string& target) {
  std::string joined = target;
  if (!target.starts_with('/')) {
    const size_t slash = link_path.rfind('/');
    joined = (slash == std::string::npos || slash == 0 ? std::string() : link_path.substr(0, slash)) + "/" +
             target;
  }
  std::vector<std::string> parts;
  size_t at = 0;
  while (at <= joined.size()) {
    const size_t next = std::min(joined.find('/', at), joined.size());
    const std::string part = joined.substr(at, next - at);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    at = next + 1;
  }
  std::string out;
  for (const auto& part : parts) out += "/" + part;
  return out.empty() ? "/" : out;
}

// The user metadata of the entry `leaf` in `dirfd` (`dirfd` itself when `leaf` is
// empty). Read through an O_PATH descriptor of the entry, opened without following a
// symlink, by its /proc/self/fd name, which names that inode itself: nothing is looked
// up by path again, so a rename under the call cannot lead it elsewhere. What cannot
// be read (a file system without user attributes, an entry gone meanwhile) is none.
std::map<std::string, std::string> metadata_of(int dirfd, const char* leaf) {
  std::map<std::string, std::string> metadata;
  UniqueFd opened;
  int fd = dirfd;
  if (*leaf) {
    opened = UniqueFd(openat(dirfd, leaf, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!opened.valid()) return metadata;
    fd = opened.get();
  }
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  // (Sizes first: most entries have no attributes, one call each.)
  const ssize_t size = listxattr(proc.c_str(), nullptr, 0);
  if (size <= 0) return metadata;
  std::string names(static_cast<size_t>(size), '\0');
  const ssize_t listed = listxattr(proc.c_str(), names.data(), names.size());
  if (listed <= 0) return metadata;
  names.resize(static_cast<size_t>(listed));
  for (size_t at = 0; at < names.size();) {
    const size_t end = std::min(names.find('\0', at), names.size());
    const std::string name = names.substr(at, end - at);
    at = end + 1;
    if (!name.starts_with(kMetadataAttributePrefix) || name.size() == kMetadataAttributePrefix.size())
      continue;
    const ssize_t value_size = getxattr(proc.c_str(), name.c_str(), nullptr, 0);
    if (value_size < 0) continue;
    std::string value(static_cast<size_t>(value_size), '\0');
    const ssize_t n = getxattr(proc.c_str(), name.c_str(), value.data(), value.size());
    if (n < 0) continue;
    value.resize(static_cast<size_t>(n));
    metadata[name.substr(kMetadataAttributePrefix.size())] = std::move(value);
  }
  return metadata;
}

FileEntry entry_of(const struct stat& st, std::string name, std::string path, int dirfd, const char* leaf) {
  FileEntry entry;
  entry.name = std::move(name);
  entry.path = std::move(path);
  entry.type = S_ISREG(st.st_mode)   ? FileEntry::Type::kFile
               : S_ISDIR(st.st_mode) ? FileEntry::Type::kDirectory
               : S_ISLNK(st.st_mode) ? FileEntry::Type::kSymlink
                                     : FileEntry::Type::kOther;
  entry.size = static_cast<uint64_t>(st.st_size);
  entry.mode = st.st_mode & 07777;
  entry.permissions = permissions_of(st.st_mode);
  entry.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    const ssize_t n = readlinkat(dirfd, leaf, target, sizeof target);
    if (n >= 0)
      entry.symlink_target = absolute_target(entry.path, std::string(target, static_cast<size_t>(n)));
  }
  if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) entry.metadata = metadata_of(dirfd, leaf);
  return entry;
}

std::string leaf_name(const std::string& sandbox_path) {
  const size_t slash = sandbox_path.rfind('/');
  return slash == std::string::npos ? sandbox_path : sandbox_path.substr(slash + 1);
}

Result<FileEntry> stat_located(Located& at) {
  const auto& r = at.resolved;
  struct stat st;
  if (r.relative.empty()) {
    if (fstat(at.root.get(), &st) != 0) return from_errno(errno, r.sandbox_path);
    return entry_of(st, leaf_name(r.sandbox_path), r.sandbox_path, at.root.get(), "");
  }
  const auto [parent, leaf] = split(r.relative);
  int dir = open_beneath(at.root.get(), parent, O_PATH | O_DIRECTORY);
  if (dir < 0) return from_errno(-dir, r.sandbox_path);
  UniqueFd parent_fd(dir);
  if (fstatat(parent_fd.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return from_errno(errno, r.sandbox_path);
  return entry_of(st, leaf, r.sandbox_path, parent_fd.get(), leaf.c_str());
}

// Lists `dirfd` (owned) into `out`, descending `depth - 1` more levels.
Result<void> list_into(int dirfd, const std::string& dir_path, int depth, std::vector<FileEntry>& out) {
  DIR* dir = fdopendir(dirfd);
  if (!dir) {
    ::close(dirfd);
    return from_errno(errno, dir_path);
  }
  std::vector<std::string> subdirs;
  while (dirent* d = readdir(dir)) {
    if (!std::strcmp(d->d_name, ".") || !std::strcmp(d->d_name, "..")) continue;
    struct stat st;
    if (fstatat(dirfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
    if (out.size() >= kMaxListedEntries) {
      closedir(dir);
      return ApiError::invalid_request("'" + dir_path + "' holds more than " +
                                       std::to_string(kMaxListedEntries) +
                                       " entries at this depth; list a smaller depth or a folder below it");
    }
    out.push_back(entry_of(st, d->d_name, join(dir_path, d->d_name), dirfd, d->d_name));
    if (depth > 1 && S_ISDIR(st.st_mode)) subdirs.emplace_back(d->d_name);
  }
  for (const auto& name : subdirs) {
    const int sub = openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) continue;
    if (auto listed = list_into(sub, join(dir_path, name), depth - 1, out); !listed) {
      closedir(dir);
      return listed.error();
    }
  }
  closedir(dir);
  return {};
}

// Removes `leaf` in `parent` (a folder with everything in it), never following a link.
int remove_at(int parent, const char* leaf, int depth) {
  struct stat st;
  if (fstatat(parent, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno;
  if (!S_ISDIR(st.st_mode)) return unlinkat(parent, leaf, 0) == 0 ? 0 : errno;
  if (depth > kMaxRemoveDepth) return ELOOP;
  const int fd = openat(parent, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno;
  DIR* dir = fdopendir(fd);
  if (!dir) {
    ::close(fd);
    return errno;
  }
  std::vector<std::string> names;
  while (dirent* d = readdir(dir))
    if (std::strcmp(d->d_name, ".") && std::strcmp(d->d_name, "..")) names.emplace_back(d->d_name);
  int failed = 0;
  for (const auto& name : names)
    if (int err = remove_at(fd, name.c_str(), depth + 1); err && err != ENOENT) failed = err;
  closedir(dir);
  if (failed) return failed;
  return unlinkat(parent, leaf, AT_REMOVEDIR) == 0 ? 0 : errno;
}

}  // namespace

Result<FileEntry> stat_entry(const ContainerPaths& paths, const std::string& sandbox_path) {
  auto at = locate(paths, sandbox_path, /*write=*/false);
  if (!at) return at.error();
  return stat_located(*at);
}

Result<std::vector<FileEntry>> list_entries(const ContainerPaths& paths, const std::string& sandbox_path,
                                            int depth) {
  if (depth < 1) return ApiError::invalid_request("'depth' must be at least 1");
  auto at = locate(paths, sandbox_path, /*write=*/false);
  if (!at) return at.error();
  const int dir = open_beneath(at->root.get(), at->resolved.relative, O_RDONLY | O_DIRECTORY);
  if (dir < 0) {
    if (dir == -ENOTDIR)
      return ApiError::invalid_request("'" + at->resolved.sandbox_path + "' is not a directory");
    return from_errno(-dir, at->resolved.sandbox_path);
  }
  std::vector<FileEntry> out;
  if (auto listed = list_into(dir, at->resolved.sandbox_path, depth, out); !listed) return listed.error();
  // As envd lists (a walk in name order): a folder's entries by name, each folder's own
  // entries right after it, so '/' sorts before every other byte.
  auto key = [](char c) { return c == '/' ? 0 : static_cast<unsigned char>(c) + 1; };
  std::sort(out.begin(), out.end(), [&key](const FileEntry& a, const FileEntry& b) {
    return std::lexicographical_compare(a.path.begin(), a.path.end(), b.path.begin(), b.path.end(),
                                        [&key](char x, char y) { return key(x) < key(y); });
  });
  return out;
}

Result<FileEntry> make_directory(const ContainerPaths& paths, const std::string& sandbox_path, uid_t uid,
                                 gid_t gid) {
  auto at = locate(paths, sandbox_path, /*write=*/true);
  if (!at) return at.error();
  const auto& r = at->resolved;
  if (r.relative.empty()) return from_errno(EEXIST, r.sandbox_path);
  if (const int existing = open_beneath(at->root.get(), r.relative, O_PATH); existing >= 0) {
    ::close(existing);
    return from_errno(EEXIST, r.sandbox_path);
  }
  // make_parents_beneath makes every folder before the last '/': the path's own too.
  if (int rc = make_parents_beneath(at->root.get(), r.relative + "/", uid, gid); rc < 0)
    return from_errno(-rc, r.sandbox_path);
  return stat_located(*at);
}

Result<FileEntry> move_entry(const ContainerPaths& paths, const std::string& from, const std::string& to,
                             uid_t uid, gid_t gid) {
  auto source = locate(paths, from, /*write=*/true);
  if (!source) return source.error();
  auto target = locate(paths, to, /*write=*/true);
  if (!target) return target.error();
  if (source->resolved.mount != target->resolved.mount)
    return ApiError::invalid_request("A move stays within one folder of the sandbox: '" +
                                     source->resolved.sandbox_path + "' and '" +
                                     target->resolved.sandbox_path + "' are in different mounts");
  if (source->resolved.relative.empty() || target->resolved.relative.empty())
    return ApiError::invalid_request("A mount's own folder cannot be moved or replaced");
  const auto from_parts = split(source->resolved.relative);
  const auto to_parts = split(target->resolved.relative);
  if (int rc = make_parents_beneath(target->root.get(), target->resolved.relative, uid, gid); rc < 0)
    return from_errno(-rc, target->resolved.sandbox_path);
  const int from_dir = open_beneath(source->root.get(), from_parts.parent, O_PATH | O_DIRECTORY);
  if (from_dir < 0) return from_errno(-from_dir, source->resolved.sandbox_path);
  UniqueFd from_fd(from_dir);
  const int to_dir = open_beneath(target->root.get(), to_parts.parent, O_PATH | O_DIRECTORY);
  if (to_dir < 0) return from_errno(-to_dir, target->resolved.sandbox_path);
  UniqueFd to_fd(to_dir);
  if (renameat(from_fd.get(), from_parts.leaf.c_str(), to_fd.get(), to_parts.leaf.c_str()) != 0)
    return from_errno(errno, errno == ENOENT ? source->resolved.sandbox_path : target->resolved.sandbox_path);
  return stat_located(*target);
}

Result<void> remove_entry(const ContainerPaths& paths, const std::string& sandbox_path) {
  auto at = locate(paths, sandbox_path, /*write=*/true);
  if (!at) return at.error();
  const auto& r = at->resolved;
  if (r.relative.empty()) return ApiError::invalid_request("A mount's own folder cannot be removed");
  const auto [parent, leaf] = split(r.relative);
  // What is not there is removed already: envd answers that with success too.
  const int dir = open_beneath(at->root.get(), parent, O_PATH | O_DIRECTORY);
  if (dir == -ENOENT) return {};
  if (dir < 0) return from_errno(-dir, r.sandbox_path);
  UniqueFd parent_fd(dir);
  if (int err = remove_at(parent_fd.get(), leaf.c_str(), 0); err && err != ENOENT)
    return from_errno(err, r.sandbox_path);
  return {};
}

}  // namespace sandboxd::service
