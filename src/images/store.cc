#include "images/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/ids.h"
#include "images/extract.h"
#include "runtime/login_profile.h"
#include "runtime/spec.h"
#include "runtime/syscall_error.h"

namespace sandboxd::images {
namespace {

using runtime::SyscallError;

constexpr const char* kStagingPrefix = ".staging-";

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// One component of a name: [a-z0-9] then [a-z0-9._-]*, never "." or "..".
bool valid_component(const std::string& c) {
  if (c.empty() || !is_lower_alnum(c[0])) return false;
  return std::all_of(c.begin(), c.end(),
                     [](char ch) { return is_lower_alnum(ch) || ch == '.' || ch == '_' || ch == '-'; });
}

void check_name(const std::string& name) {
  if (name.empty() || name.size() > 200)
    throw ImageError("image name \"" + name + "\" must be 1-200 characters");
  size_t pos = 0;
  bool first = true;
  while (pos <= name.size()) {
    size_t slash = name.find('/', pos);
    if (slash == std::string::npos) slash = name.size();
    std::string component = name.substr(pos, slash - pos);
    // A registry with a port ("registry.local:5000/x") in the first of several parts.
    if (first && slash != name.size()) {
      if (auto colon = component.find(':'); colon != std::string::npos) {
        std::string port = component.substr(colon + 1);
        if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit))
          throw ImageError("image name \"" + name + "\": \"" + component + "\" is not HOST:PORT");
        component.resize(colon);
      }
    }
    if (!valid_component(component))
      throw ImageError(
          "image name \"" + name + "\": \"" + component +
          "\" is not a valid component (lower-case letters, digits, '.', '_', '-'; starting with a "
          "letter or digit)");
    first = false;
    pos = slash + 1;
  }
}

void check_tag(const std::string& tag) {
  bool ok = !tag.empty() && tag.size() <= 128 && tag[0] != '.' && tag[0] != '-' &&
            std::all_of(tag.begin(), tag.end(), [](char c) {
              return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
            });
  if (!ok)
    throw ImageError("image tag \"" + tag +
                     "\" is not valid ([A-Za-z0-9_.-], at most 128, not starting with '.' or '-')");
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text_durably(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw SyscallError("open(" + path + ", O_WRONLY|O_CREAT|O_TRUNC)", errno);
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && fsync(fd) == 0;
  int err = errno;
  close(fd);
  if (!ok) throw SyscallError("write(" + path + ")", err);
}

void remove_path(const std::string& path) {
  auto slash = path.rfind('/');
  std::string parent = path.substr(0, slash), name = path.substr(slash + 1);
  int fd = open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw SyscallError("open(" + parent + ", O_DIRECTORY)", errno);
  try {
    remove_tree(fd, name);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
}

std::string random_suffix() { return random_base36(8); }

// The image's /etc/profile without the `id -u` subshell each login shell would run
// (runtime/login_profile.h), written aside and renamed over it. A profile that is not a
// regular file, or has no such subshell, stays as it is.
void rewrite_login_profile(int etc_fd, const std::string& etc) {
  int fd = openat(etc_fd, "profile", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  unsigned mode = 0644;
  auto rewritten = runtime::rewritten_profile(fd, mode);
  close(fd);
  if (!rewritten) return;
  constexpr const char* kAside = ".profile.sandboxd";
  unlinkat(etc_fd, kAside, 0);
  int out = openat(etc_fd, kAside, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (out < 0) throw SyscallError("openat(" + etc + "/" + kAside + ", O_CREAT|O_EXCL)", errno);
  const bool written =
      write(out, rewritten->data(), rewritten->size()) == static_cast<ssize_t>(rewritten->size());
  const int err = errno;
  close(out);
  if (!written) throw SyscallError("write(" + etc + "/" + kAside + ")", err);
  if (renameat(etc_fd, kAside, etc_fd, "profile") != 0)
    throw SyscallError("renameat(" + etc + "/" + kAside + ", profile)", errno);
}

// What every image gets before it is installed:
// - a regular file at each /etc name that sandboxes generate or hide
//   (runtime::kGeneratedEtc), replacing a symlink or anything else there: a sandbox never
//   sees these files of the image, and with them it binds the image's /etc whole (see
//   mount.cc);
// - /var/tmp -> /tmp, as on the host image: the image is read-only in a sandbox, /tmp is
//   the sandbox's own tmpfs;
// - an /etc/profile whose login shells run no `id -u` (rewrite_login_profile).
void prepare_for_sandboxes(const std::string& rootfs) {
  const std::string var = rootfs + "/var";
  struct stat var_st;
  if (lstat(var.c_str(), &var_st) == 0 && S_ISDIR(var_st.st_mode)) {
    int var_fd = open(var.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (var_fd < 0) throw SyscallError("open(" + var + ", O_DIRECTORY|O_NOFOLLOW)", errno);
    remove_tree(var_fd, "tmp");
    int rc = symlinkat("/tmp", var_fd, "tmp");
    int err = errno;
    close(var_fd);
    if (rc != 0) throw SyscallError("symlinkat(/tmp, " + var + "/tmp)", err);
  }
  const std::string etc = rootfs + "/etc";
  struct stat st;
  if (lstat(etc.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    if (mkdir(etc.c_str(), 0755) != 0) throw SyscallError("mkdir(" + etc + ", 0755)", errno);
  }
  int etc_fd = open(etc.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (etc_fd < 0) throw SyscallError("open(" + etc + ", O_DIRECTORY|O_NOFOLLOW)", errno);
  for (const char* name : runtime::kGeneratedEtc) {
    // Password hashes are of no use in a sandbox: emptied, so that nothing needs to be
    // bound over them either.
    bool secret = std::strcmp(name, "shadow") == 0 || std::strcmp(name, "gshadow") == 0;
    if (fstatat(etc_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        (!secret || st.st_size == 0))
      continue;
    remove_tree(etc_fd, name);
    int fd = openat(etc_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
      int err = errno;
      close(etc_fd);
      throw SyscallError("openat(" + etc + "/" + name + ", O_CREAT|O_EXCL)", err);
    }
    close(fd);
  }
  try {
    rewrite_login_profile(etc_fd, etc);
  } catch (...) {
    close(etc_fd);
    throw;
  }
  close(etc_fd);
}

}  // namespace

ImageRef parse_ref(const std::string& text, const std::string& default_tag) {
  ImageRef ref{text, default_tag};
  auto colon = text.rfind(':');
  if (colon != std::string::npos && text.find('/', colon) == std::string::npos) {
    ref.name = text.substr(0, colon);
    ref.tag = text.substr(colon + 1);
  }
  if (ref.name.find('@') != std::string::npos)
    throw ImageError("image \"" + text +
                     "\": references by digest (@sha256:...) are not supported; use NAME:TAG");
  return make_ref(ref.name, ref.tag);
}

ImageRef make_ref(const std::string& name, const std::string& tag) {
  check_name(name);
  check_tag(tag);
  return ImageRef{name, tag};
}

std::vector<std::string> installed_packages(const std::string& rootfs) {
  std::vector<std::string> packages;
  std::ifstream in(rootfs + "/var/lib/dpkg/status");
  std::string line, package, version, status;
  auto flush = [&] {
    if (!package.empty() && status == "install ok installed") packages.push_back(package + "=" + version);
    package.clear();
    version.clear();
    status.clear();
  };
  while (std::getline(in, line)) {
    if (line.empty())
      flush();
    else if (line.rfind("Package: ", 0) == 0)
      package = line.substr(9);
    else if (line.rfind("Version: ", 0) == 0)
      version = line.substr(9);
    else if (line.rfind("Status: ", 0) == 0)
      status = line.substr(8);
  }
  flush();
  std::sort(packages.begin(), packages.end());
  return packages;
}

std::string utc_now_rfc3339() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string human_size(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return buf;
}

ImageStore::ImageStore(const std::string& data_dir) : images_dir_(data_dir + "/images") {
  std::filesystem::create_directories(data_dir);
  if (mkdir(images_dir_.c_str(), 0755) != 0 && errno != EEXIST)
    throw SyscallError("mkdir(" + images_dir_ + ", 0755)", errno);
}

std::string ImageStore::dir_for(const ImageRef& ref) const {
  // Injective and flat: '/' and the port's ':' cannot be in a file name, '@' is in
  // neither names nor tags.
  std::string name = ref.name;
  std::replace(name.begin(), name.end(), '/', '+');
  std::replace(name.begin(), name.end(), ':', '=');
  return images_dir_ + "/" + name + "@" + ref.tag;
}

std::optional<ImageInfo> ImageStore::read(const std::string& dir) const {
  std::string text = read_text(dir + "/manifest.json");
  boost::system::error_code ec;
  auto value = boost::json::parse(text, ec);
  if (ec || !value.is_object()) return std::nullopt;
  auto& m = value.as_object();
  auto str = [&](const char* key) {
    auto* v = m.if_contains(key);
    return v && v->is_string() ? std::string(v->as_string()) : std::string();
  };
  ImageInfo info;
  info.ref = ImageRef{str("name"), str("tag")};
  info.dir = dir;
  info.rootfs = dir + "/rootfs";
  info.digest = str("digest");
  info.created = str("created");
  if (auto* v = m.if_contains("size"); v && v->is_number()) info.size = v->to_number<uint64_t>();
  info.manifest = std::move(m);
  return info;
}

std::vector<ImageInfo> ImageStore::list() const {
  std::vector<ImageInfo> images;
  DIR* dir = opendir(images_dir_.c_str());
  if (!dir) throw SyscallError("opendir(" + images_dir_ + ")", errno);
  while (dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;  // ".", "..", staging directories
    if (auto info = read(images_dir_ + "/" + name)) images.push_back(std::move(*info));
  }
  closedir(dir);
  std::sort(images.begin(), images.end(),
            [](const ImageInfo& a, const ImageInfo& b) { return a.ref.str() < b.ref.str(); });
  return images;
}

std::optional<ImageInfo> ImageStore::find(const ImageRef& ref) const {
  auto info = read(dir_for(ref));
  if (!info || info->ref.name != ref.name || info->ref.tag != ref.tag) return std::nullopt;
  struct stat st;
  if (stat(info->rootfs.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return std::nullopt;
  return info;
}

bool ImageStore::remove(const ImageRef& ref) {
  std::string dir = dir_for(ref);
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) return false;
  // Renamed away first: the image is gone at once, even if removing its files is slow
  // or interrupted (a staging name is cleaned up by the next import).
  std::string doomed =
      images_dir_ + "/" + kStagingPrefix + std::to_string(getpid()) + "-rm-" + random_suffix();
  if (rename(dir.c_str(), doomed.c_str()) != 0)
    throw SyscallError("rename(" + dir + ", " + doomed + ")", errno);
  remove_path(doomed);
  return true;
}

std::unique_ptr<ImageStore::Staging> ImageStore::stage() {
  // Staging directories are named after the process making them; one whose process is
  // gone is what an interrupted import or build left.
  if (DIR* dir = opendir(images_dir_.c_str())) {
    std::vector<std::string> stale;
    while (dirent* e = readdir(dir)) {
      std::string name = e->d_name;
      if (name.rfind(kStagingPrefix, 0) != 0) continue;
      pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + std::strlen(kStagingPrefix)));
      if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(name);
    }
    closedir(dir);
    for (const auto& name : stale) remove_path(images_dir_ + "/" + name);
  }
  std::string dir = images_dir_ + "/" + kStagingPrefix + std::to_string(getpid()) + "-" + random_suffix();
  if (mkdir(dir.c_str(), 0700) != 0) throw SyscallError("mkdir(" + dir + ", 0700)", errno);
  auto staging = std::make_unique<Staging>(*this, dir);
  // The image's root is what sandboxes see as "/": readable by everyone, like a
  // distribution's root; the staging directory itself stays private until renamed.
  std::string rootfs = staging->rootfs();
  if (mkdir(rootfs.c_str(), 0755) != 0) throw SyscallError("mkdir(" + rootfs + ", 0755)", errno);
  if (chmod(rootfs.c_str(), 0755) != 0) throw SyscallError("chmod(" + rootfs + ", 0755)", errno);
  return staging;
}

ImageStore::Staging::Staging(ImageStore& store, std::string dir) : store_(store), dir_(std::move(dir)) {}

ImageStore::Staging::~Staging() {
  if (committed_) return;
  try {
    remove_path(dir_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sandboxd: could not remove %s: %s\n", dir_.c_str(), e.what());
  }
}

ImageInfo ImageStore::Staging::commit(const ImageRef& ref, boost::json::object manifest) {
  // Whatever else the staging directory held (downloaded blobs) goes first.
  {
    int fd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw SyscallError("open(" + dir_ + ")", errno);
    DIR* d = fdopendir(fd);
    std::vector<std::string> extra;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != ".." && name != "rootfs") extra.push_back(name);
    }
    for (const auto& name : extra) remove_tree(dirfd(d), name);
    closedir(d);
  }
  prepare_for_sandboxes(rootfs());
  manifest["name"] = ref.name;
  manifest["tag"] = ref.tag;
  manifest["size"] = tree_size(rootfs());
  manifest["created"] = utc_now_rfc3339();
  write_text_durably(dir_ + "/manifest.json", boost::json::serialize(manifest) + "\n");
  if (chmod(dir_.c_str(), 0755) != 0) throw SyscallError("chmod(" + dir_ + ", 0755)", errno);
  std::string target = store_.dir_for(ref);
  if (rename(dir_.c_str(), target.c_str()) != 0) {
    if (errno != ENOTEMPTY && errno != EEXIST)
      throw SyscallError("rename(" + dir_ + ", " + target + ")", errno);
    // An image of that name and tag exists: swap the two atomically, then remove the
    // old one (now at the staging name).
    if (renameat2(AT_FDCWD, dir_.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
      throw SyscallError("renameat2(" + dir_ + ", " + target + ", RENAME_EXCHANGE)", errno);
    committed_ = true;
    remove_path(dir_);
  }
  committed_ = true;
  auto info = store_.read(target);
  if (!info) throw ImageError("the manifest just written to " + target + " cannot be read back");
  return *info;
}

ImageSelection select_image(const std::string& data_dir, const std::string& repository,
                            const std::string& tag, bool builtin_default) {
  ImageSelection selection;
  const std::string named = repository + ":" + tag;
  ImageRef ref;
  try {
    ref = make_ref(repository, tag);
  } catch (const ImageError& e) {
    selection.problem = "image " + named + " cannot be used: " + e.what();
    return selection;
  }
  // Only looked up where it can be: a data directory that does not exist yet has no images.
  struct stat st;
  std::optional<ImageInfo> found;
  if (stat((data_dir + "/images").c_str(), &st) == 0) found = ImageStore(data_dir).find(ref);
  if (found) {
    selection.rootfs = found->rootfs;
    selection.label = named + " (" + found->digest + ")";
  } else if (builtin_default) {
    selection.label = "the host's (" + named + " is not installed)";
  } else {
    selection.problem = "image " + named + " is not installed; see `sandboxd image ls`";
  }
  return selection;
}

}  // namespace sandboxd::images
