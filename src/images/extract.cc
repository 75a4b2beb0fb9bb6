#include "images/extract.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "base/unique_fd.h"
#include "runtime/syscall_error.h"

namespace sandboxd::images {
namespace {

using runtime::SyscallError;

// Resolution rules for every lookup below the image root: symlinks are followed as if
// the root were "/" (absolute targets and ".." stop at the root), /proc magic links are
// refused, and no mount point is crossed.
constexpr uint64_t kResolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;

// openat2(root, rel, O_PATH|O_DIRECTORY) inside the root; -1 with errno on failure.
int open_dir_in_root(int root_fd, const std::string& rel) {
  open_how how{};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = kResolve;
  for (int attempt = 0;; ++attempt) {
    long fd = syscall(SYS_openat2, root_fd, rel.empty() ? "." : rel.c_str(), &how, sizeof how);
    // EAGAIN: a concurrent rename somewhere in the tree; the kernel asks for a retry.
    if (fd >= 0 || errno != EAGAIN || attempt == 8) return static_cast<int>(fd);
  }
}

std::string describe_openat2(const std::string& rel) {
  return "openat2(IMAGE_ROOT, \"" + rel +
         "\", O_PATH|O_DIRECTORY, RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV)";
}

// Components of a symlink's target as the image sees it: relative to the link's folder
// (`base`), ".." stopping at the root as it does under RESOLVE_IN_ROOT.
std::vector<std::string> resolve_link_text(const std::vector<std::string>& base, const std::string& text) {
  std::vector<std::string> out = text.empty() || text[0] == '/' ? std::vector<std::string>{} : base;
  split_path(text, DotDot::kClampAtRoot, out);
  return out;
}

// The directory made of the first `count` components, created (0755) where missing. A
// symlink on the way whose target is missing gets its target made, inside the root, as
// `mkdir -p` through it would in the image (`depth` stops symlink loops).
UniqueFd open_parent(int root_fd, const std::vector<std::string>& parts, size_t count, bool create,
                     int depth = 0) {
  std::string rel = join_path(parts, count);
  int fd = open_dir_in_root(root_fd, rel);
  if (fd < 0 && errno == ENOENT && create && count > 0) {
    UniqueFd up = open_parent(root_fd, parts, count - 1, true, depth);
    const std::string& name = parts[count - 1];
    if (mkdirat(up.get(), name.c_str(), 0755) != 0) {
      if (errno != EEXIST)
        throw SyscallError("mkdirat(IMAGE_ROOT/" + join_path(parts, count - 1) + ", \"" + name + "\", 0755)",
                           errno);
      char link[PATH_MAX];
      ssize_t n = readlinkat(up.get(), name.c_str(), link, sizeof link - 1);
      if (n > 0 && depth < 40) {
        std::vector<std::string> base(parts.begin(), parts.begin() + static_cast<long>(count) - 1);
        auto target = resolve_link_text(base, std::string(link, static_cast<size_t>(n)));
        open_parent(root_fd, target, target.size(), true, depth + 1);
      }
    }
    fd = open_dir_in_root(root_fd, rel);
  }
  if (fd < 0) throw SyscallError(describe_openat2(rel), errno);
  return UniqueFd(fd);
}

bool lstat_at(int dir_fd, const std::string& name, struct stat& st) {
  if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return true;
  if (errno == ENOENT) return false;
  throw SyscallError("fstatat(" + name + ", AT_SYMLINK_NOFOLLOW)", errno);
}

std::vector<std::string> list_names(int dir_fd, const std::string& what) {
  int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw SyscallError("openat(" + what + ", \".\", O_RDONLY|O_DIRECTORY)", errno);
  DIR* dir = fdopendir(fd);
  if (!dir) {
    int err = errno;
    close(fd);
    throw SyscallError("fdopendir(" + what + ")", err);
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  closedir(dir);
  return names;
}

const char* type_name(const TarEntry& entry) {
  switch (entry.type) {
    case EntryType::kCharDevice:
      return "a character device";
    case EntryType::kBlockDevice:
      return "a block device";
    case EntryType::kFifo:
      return "a FIFO";
    default:
      return "an unsupported entry type";
  }
}

}  // namespace

void ExtractReport::skip(const std::string& path, const std::string& reason) {
  ++skipped_count;
  if (skipped.size() < kMaxSkippedListed) skipped.push_back(path + ": " + reason);
}

bool split_path(const std::string& path, DotDot dot_dot, std::vector<std::string>& parts) {
  const size_t floor = parts.size();  // kFailAboveRoot: not above where the path starts
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    std::string part = path.substr(pos, slash - pos);
    pos = slash + 1;
    if (part.empty() || part == ".") continue;
    if (part != "..") {
      parts.push_back(std::move(part));
      continue;
    }
    if (dot_dot == DotDot::kRefuse) return false;
    if (parts.size() > (dot_dot == DotDot::kFailAboveRoot ? floor : 0))
      parts.pop_back();
    else if (dot_dot == DotDot::kFailAboveRoot)
      return false;
  }
  return true;
}

bool clean_path(const std::string& path, std::vector<std::string>& parts) {
  parts.clear();
  return split_path(path, DotDot::kRefuse, parts);
}

std::string join_path(const std::vector<std::string>& parts, size_t count) {
  std::string out;
  for (size_t i = 0; i < std::min(count, parts.size()); ++i) out += (i ? "/" : "") + parts[i];
  return out;
}

void remove_tree(int dir_fd, const std::string& name) {
  struct stat st;
  if (!lstat_at(dir_fd, name, st)) return;
  if (S_ISDIR(st.st_mode)) {
    // Never across a mount point (a chroot's /proc or /dev a killed build left behind):
    // what is below it is not the image's to delete.
    struct stat parent;
    if (fstat(dir_fd, &parent) != 0) throw SyscallError("fstat(parent of " + name + ")", errno);
    if (parent.st_dev != st.st_dev)
      throw ImageError(name + " is a mount point; unmount it before removing the tree it is in");
    UniqueFd sub(openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (sub.get() < 0) throw SyscallError("openat(" + name + ", O_DIRECTORY|O_NOFOLLOW)", errno);
    for (const auto& child : list_names(sub.get(), name)) remove_tree(sub.get(), child);
    if (unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
      throw SyscallError("unlinkat(" + name + ", AT_REMOVEDIR)", errno);
    return;
  }
  if (unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT)
    throw SyscallError("unlinkat(" + name + ")", errno);
}

namespace {
void add_sizes(int dir_fd, const std::string& what, std::set<std::pair<dev_t, ino_t>>& seen,
               uint64_t& total) {
  for (const auto& name : list_names(dir_fd, what)) {
    struct stat st;
    if (!lstat_at(dir_fd, name, st)) continue;
    if (S_ISREG(st.st_mode)) {
      if (st.st_nlink > 1 && !seen.insert({st.st_dev, st.st_ino}).second) continue;
      total += static_cast<uint64_t>(st.st_size);
    } else if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub.get() >= 0) add_sizes(sub.get(), name, seen, total);
    }
  }
}
}  // namespace

uint64_t tree_size(const std::string& dir) {
  UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) throw SyscallError("open(" + dir + ", O_DIRECTORY)", errno);
  std::set<std::pair<dev_t, ino_t>> seen;
  uint64_t total = 0;
  add_sizes(fd.get(), dir, seen, total);
  return total;
}

LayerExtractor::LayerExtractor(int root_fd, ExtractReport& report, std::string what)
    : root_fd_(root_fd), report_(report), what_(std::move(what)) {}

void LayerExtractor::apply(TarReader& tar) {
  TarEntry entry;
  while (tar.next(entry)) apply_entry(tar, entry);
}

void LayerExtractor::apply_entry(TarReader& tar, const TarEntry& entry) {
  std::vector<std::string> parts;
  if (!clean_path(entry.path, parts)) {
    report_.skip(entry.path, "refused: a \"..\" component");
    return;
  }
  if (parts.empty()) return;  // the root itself ("./"): the image root keeps its own mode
  const std::string rel = join_path(parts, parts.size());
  // Names the kernel cannot take: reported and skipped, decided here rather than by
  // whichever call would fail with ENAMETOOLONG half-way through the entry.
  bool too_long = rel.size() >= PATH_MAX;
  for (const auto& part : parts) too_long = too_long || part.size() > NAME_MAX;
  if (too_long) {
    report_.skip(entry.path.substr(0, 80) + "...",
                 "refused: a name of " + std::to_string(rel.size()) + " characters (the limits are " +
                     std::to_string(NAME_MAX) + " a component, " + std::to_string(PATH_MAX - 1) + " a path)");
    return;
  }
  const std::string& name = parts.back();

  // Whiteouts: markers that delete what lower layers have; never files themselves.
  if (name.rfind(".wh.", 0) == 0) {
    UniqueFd dir = open_parent(root_fd_, parts, parts.size() - 1, /*create=*/true);
    std::string dir_rel = join_path(parts, parts.size() - 1);
    if (name == ".wh..wh..opq") {
      for (const auto& child : list_names(dir.get(), "IMAGE_ROOT/" + dir_rel)) {
        std::string child_rel = dir_rel.empty() ? child : dir_rel + "/" + child;
        if (!written_.count(child_rel)) remove_tree(dir.get(), child);
      }
    } else {
      std::string target = name.substr(4);
      std::string target_rel = dir_rel.empty() ? target : dir_rel + "/" + target;
      if (target.empty() || target == "." || target == "..") {
        report_.skip(entry.path, "refused: a whiteout of \"" + target + "\"");
        return;
      }
      if (!written_.count(target_rel)) remove_tree(dir.get(), target);
    }
    ++report_.whiteouts;
    return;
  }

  switch (entry.type) {
    case EntryType::kCharDevice:
    case EntryType::kBlockDevice:
    case EntryType::kFifo:
    case EntryType::kUnsupported:
      report_.skip(entry.path, std::string("skipped: ") + type_name(entry) + " (type '" +
                                   (entry.typeflag ? std::string(1, entry.typeflag) : "\\0") + "')");
      return;
    default:
      break;
  }

  UniqueFd parent = open_parent(root_fd_, parts, parts.size() - 1, /*create=*/true);
  struct stat existing;
  bool exists = lstat_at(parent.get(), name, existing);
  const std::string where = "IMAGE_ROOT/" + rel;

  if (entry.type == EntryType::kDirectory) {
    if (exists && !S_ISDIR(existing.st_mode)) {
      remove_tree(parent.get(), name);
      exists = false;
    }
    if (!exists && mkdirat(parent.get(), name.c_str(), 0700) != 0)
      throw SyscallError("mkdirat(" + where + ", 0700)", errno);
    UniqueFd dir(openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (dir.get() < 0) throw SyscallError("openat(" + where + ", O_DIRECTORY|O_NOFOLLOW)", errno);
    // Directories keep the sticky bit (/tmp-like folders); setuid and setgid go.
    if (fchmod(dir.get(), entry.mode & 01777) != 0) throw SyscallError("fchmod(" + where + ")", errno);
    written_.insert(rel);
    ++report_.directories;
    return;
  }

  // Everything else replaces what is there (a lower layer's file, link or folder).
  if (exists) remove_tree(parent.get(), name);

  switch (entry.type) {
    case EntryType::kSymlink:
      if (entry.link_target.empty()) {
        report_.skip(entry.path, "skipped: a symlink with an empty target");
        return;
      }
      // Stored as written; it is only ever resolved inside the image (here with
      // RESOLVE_IN_ROOT, in a sandbox against the sandbox's root).
      if (symlinkat(entry.link_target.c_str(), parent.get(), name.c_str()) != 0)
        throw SyscallError("symlinkat(\"" + entry.link_target + "\", " + where + ")", errno);
      ++report_.symlinks;
      break;
    case EntryType::kHardlink: {
      std::vector<std::string> target;
      if (!clean_path(entry.link_target, target) || target.empty()) {
        report_.skip(entry.path, "refused: a hardlink to \"" + entry.link_target + "\"");
        return;
      }
      // The target is looked up inside the image ("/etc/passwd" is the image's), and
      // linkat without AT_SYMLINK_FOLLOW links a symlink itself, never what it names.
      UniqueFd target_dir(open_dir_in_root(root_fd_, join_path(target, target.size() - 1)));
      if (target_dir.get() < 0 ||
          linkat(target_dir.get(), target.back().c_str(), parent.get(), name.c_str(), 0) != 0) {
        report_.skip(entry.path, "skipped: a hardlink to \"" + entry.link_target +
                                     "\", which is not a file in the image (" + std::strerror(errno) + ")");
        return;
      }
      ++report_.hardlinks;
      break;
    }
    default:
      write_file(tar, parent.get(), name, entry, rel);
      break;
  }
  written_.insert(rel);
}

void LayerExtractor::write_file(TarReader& tar, int parent_fd, const std::string& name, const TarEntry& entry,
                                const std::string& rel) {
  const std::string where = "IMAGE_ROOT/" + rel;
  // O_EXCL|O_NOFOLLOW: the name was just cleared; whatever appeared since is not ours
  // to write through.
  UniqueFd file(openat(parent_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (file.get() < 0)
    throw SyscallError("openat(" + where + ", O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW, 0600)", errno);
  char buf[1 << 16];
  while (size_t got = tar.read(buf, sizeof buf)) {
    for (size_t done = 0; done < got;) {
      ssize_t n = runtime::retry_eintr([&] { return write(file.get(), buf + done, got - done); });
      if (n < 0) throw SyscallError("write(" + where + ")", errno);
      done += static_cast<size_t>(n);
    }
  }
  // Permission bits only: setuid, setgid and sticky never survive an import.
  if (fchmod(file.get(), entry.mode & 0777) != 0) throw SyscallError("fchmod(" + where + ")", errno);
  timespec times[2] = {{entry.mtime, 0}, {entry.mtime, 0}};
  futimens(file.get(), times);
  ++report_.files;
  report_.bytes += entry.size;
}

}  // namespace sandboxd::images
