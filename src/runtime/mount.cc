#include "runtime/mount.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/fd_passing.h"
#include "runtime/host_etc.h"
#include "runtime/login_profile.h"
#include "runtime/syscall_error.h"
#include "runtime/trust_bundle.h"
#include "runtime/user.h"

namespace sandboxd::runtime {
namespace {

// Where the staging tmpfs goes before the first pivot_root, as in bubblewrap. Sources
// are then reached under /oldroot and the sandbox is assembled under /newroot.
constexpr const char* kBase = "/tmp";

std::string flag_names(unsigned long flags) {
  std::string out;
  auto add = [&](unsigned long bit, const char* name) {
    if (flags & bit) out += out.empty() ? name : std::string("|") + name;
  };
  add(MS_BIND, "MS_BIND");
  add(MS_REC, "MS_REC");
  add(MS_REMOUNT, "MS_REMOUNT");
  add(MS_RDONLY, "MS_RDONLY");
  add(MS_NOSUID, "MS_NOSUID");
  add(MS_NODEV, "MS_NODEV");
  add(MS_NOEXEC, "MS_NOEXEC");
  add(MS_PRIVATE, "MS_PRIVATE");
  return out.empty() ? "0" : out;
}

void do_mount(const char* source, const std::string& target, const char* fstype, unsigned long flags,
              const std::string& data = "") {
  if (mount(source, target.c_str(), fstype, flags, data.empty() ? nullptr : data.c_str()) != 0)
    throw SyscallError(std::string("mount(") + (source ? source : "NULL") + ", " + target + ", " +
                           (fstype ? fstype : "NULL") + ", " + flag_names(flags) + ", \"" + data + "\")",
                       errno);
}

void mkdir_p(const std::string& path, mode_t mode = 0755) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string part = path.substr(0, pos);
    if (mkdir(part.c_str(), mode) != 0 && errno != EEXIST) throw SyscallError("mkdir(" + part + ")", errno);
  }
}

void make_file(const std::string& path, const std::string& content = "", mode_t mode = 0644) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) throw SyscallError("open(" + path + ", O_CREAT)", errno);
  if (!content.empty() && write(fd, content.data(), content.size()) != ssize_t(content.size())) {
    int err = errno;
    close(fd);
    throw SyscallError("write(" + path + ")", err);
  }
  close(fd);
}

void make_symlink(const std::string& target, const std::string& path) {
  if (symlink(target.c_str(), path.c_str()) != 0 && errno != EEXIST)
    throw SyscallError("symlink(" + target + ", " + path + ")", errno);
}

std::string parent_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Applies per-mount attributes to a mount and every mount below it. mount_setattr does
// it in one call (Linux 5.12); older kernels get the classic remount of each submount.
void set_attributes(const std::string& target, bool read_only, bool allow_dev, bool no_exec) {
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_NOSUID | (read_only ? MOUNT_ATTR_RDONLY : 0) |
                  (allow_dev ? 0 : MOUNT_ATTR_NODEV) | (no_exec ? MOUNT_ATTR_NOEXEC : 0);
  if (syscall(SYS_mount_setattr, AT_FDCWD, target.c_str(), AT_RECURSIVE, &attr, sizeof attr) == 0) return;
  if (errno != ENOSYS) throw SyscallError("mount_setattr(" + target + ", AT_RECURSIVE)", errno);
  unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID | (read_only ? MS_RDONLY : 0) |
                        (allow_dev ? 0 : MS_NODEV) | (no_exec ? MS_NOEXEC : 0);
  std::vector<std::string> targets{target};
  if (FILE* info = std::fopen("/proc/self/mountinfo", "re")) {
    char line[4096];
    while (std::fgets(line, sizeof line, info)) {
      char mount_point[4096];
      if (std::sscanf(line, "%*s %*s %*s %*s %4095s", mount_point) != 1) continue;
      std::string mp = mount_point;
      if (mp.size() > target.size() && mp.compare(0, target.size(), target) == 0 && mp[target.size()] == '/')
        targets.push_back(mp);
    }
    std::fclose(info);
  }
  for (const auto& t : targets) do_mount(nullptr, t, nullptr, flags);
}

// Binds a host path (seen under /oldroot) into the new root.
void bind(const std::string& source, const std::string& target, bool read_only, bool allow_dev = false,
          bool no_exec = false) {
  struct stat st;
  if (stat(source.c_str(), &st) != 0) throw SyscallError("stat(" + source + ")", errno);
  if (S_ISDIR(st.st_mode)) {
    mkdir_p(target);
  } else {
    mkdir_p(parent_of(target));
    make_file(target);
  }
  do_mount(source.c_str(), target, nullptr, MS_BIND | MS_REC);
  set_attributes(target, read_only, allow_dev, no_exec);
}

void mount_tmpfs(const std::string& target, const std::string& options, unsigned long flags) {
  mkdir_p(target);
  do_mount("tmpfs", target, "tmpfs", flags, options);
}

// Recreates an entry of the image root: symlinks are copied (never followed, so an
// image's absolute link cannot point the bind at the host), folders and files bound.
void mirror_entry(const std::string& source, const std::string& target) {
  struct stat st;
  if (lstat(source.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw SyscallError("lstat(" + source + ")", errno);
  }
  if (S_ISLNK(st.st_mode)) {
    char link[4096];
    ssize_t n = readlink(source.c_str(), link, sizeof link - 1);
    if (n < 0) throw SyscallError("readlink(" + source + ")", errno);
    link[n] = '\0';
    make_symlink(link, target);
  } else if (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) {
    bind(source, target, /*read_only=*/true);
  }
}

// Top-level entries of an image root that the sandbox builds itself.
constexpr const char* kBuiltTopLevel[] = {"dev", "proc", "sys",  "tmp",  "home",  "mnt",
                                          "run", "etc",  "root", "boot", "media", "lost+found"};

bool in_list(const char* const* begin, const char* const* end, const std::string& name) {
  for (auto it = begin; it != end; ++it)
    if (name == *it) return true;
  return false;
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (!dir) throw SyscallError("opendir(" + path + ")", errno);
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  return names;
}

// The host's /etc/profile as a file of the sandbox's own /etc, without the `id -u`
// subshell each login shell would run (runtime/login_profile.h). False when it is not a
// regular file with one, and it is then bound as it is.
bool copy_login_profile(const std::string& source, const std::string& target) {
  int fd = open(source.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  unsigned mode = 0644;
  auto rewritten = rewritten_profile(fd, mode);
  close(fd);
  if (!rewritten) return false;
  make_file(target, *rewritten, mode);
  return true;
}

void setup_image(const Spec& spec) {
  if (spec.image_root.empty()) {
    for (const char* top : {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"})
      mirror_entry(std::string("/oldroot/") + top, std::string("/newroot/") + top);
    mkdir_p("/newroot/etc");
    for (const char* name : kHostEtcAllowList) {
      const std::string source = std::string("/oldroot/etc/") + name,
                        target = std::string("/newroot/etc/") + name;
      if (std::strcmp(name, "profile") == 0 && copy_login_profile(source, target)) continue;
      mirror_entry(source, target);
    }
    mkdir_p("/newroot/var");
    make_symlink("/tmp", "/newroot/var/tmp");
    return;
  }
  std::string root = "/oldroot" + spec.image_root;
  for (const auto& name : list_dir(root)) {
    if (in_list(std::begin(kBuiltTopLevel), std::end(kBuiltTopLevel), name)) continue;
    mirror_entry(root + "/" + name, "/newroot/" + name);
  }
  mkdir_p("/newroot/etc");  // the generated files go here; the image's /etc comes after
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// An image's /etc, once the generated files are in /newroot/etc. When the image has a
// regular file at every generated name (the image store puts placeholders there), its
// /etc is bound whole and the generated files bound over those names: a dozen mounts,
// where one bind per /etc entry costs some sixty for a Debian image, more than the
// host image's allow-list. Otherwise (a symlink or a missing name, where a bind could
// not go or would follow the link) each entry is bound on its own, as for the host.
void setup_image_etc(const Spec& spec) {
  if (spec.image_root.empty()) return;
  const std::string image_etc = "/oldroot" + spec.image_root + "/etc";
  struct stat st;
  if (stat(image_etc.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
  std::vector<std::string> generated = list_dir("/newroot/etc");
  // The hidden names (not generated: shadow, subuid...) need an empty file over them,
  // unless the image's is empty already (the store empties shadow and gshadow).
  std::vector<std::string> hidden;
  for (const char* name : kGeneratedEtc)
    if (std::find(generated.begin(), generated.end(), name) == generated.end()) hidden.push_back(name);
  bool whole = true;
  for (const auto& name : generated) whole = whole && is_regular_file(image_etc + "/" + name);
  for (const auto& name : hidden) {
    struct stat hidden_st;
    whole = whole && lstat((image_etc + "/" + name).c_str(), &hidden_st) == 0 && S_ISREG(hidden_st.st_mode);
    if (whole && hidden_st.st_size > 0) generated.push_back(name);
  }
  if (!whole) {
    for (const auto& name : list_dir(image_etc)) {
      if (in_list(std::begin(kGeneratedEtc), std::end(kGeneratedEtc), name)) continue;
      if (is_regular_file("/newroot/etc/" + name)) continue;  // generated
      mirror_entry(image_etc + "/" + name, "/newroot/etc/" + name);
    }
    return;
  }
  // The generated files move aside (same tmpfs), the image's /etc takes their place, and
  // each generated file (an empty one for the hidden names: shadow, subuid...) is bound
  // over the image's. The aside folder then goes: the binds keep their files.
  const std::string aside = "/newroot/.sandboxd-etc";
  check(rename("/newroot/etc", aside.c_str()), "rename(/newroot/etc, " + aside + ")");
  for (const auto& name : generated)
    if (!is_regular_file(aside + "/" + name)) make_file(aside + "/" + name);
  mkdir_p("/newroot/etc");
  bind(image_etc, "/newroot/etc", /*read_only=*/true);
  for (const auto& name : generated) {
    const std::string source = aside + "/" + name, target = "/newroot/etc/" + name;
    do_mount(source.c_str(), target, nullptr, MS_BIND);
    set_attributes(target, /*read_only=*/true, /*allow_dev=*/false, /*no_exec=*/false);
    check(unlink(source.c_str()), "unlink(" + source + ")");
  }
  check(rmdir(aside.c_str()), "rmdir(" + aside + ")");
}

void write_etc(const Spec& spec) {
  make_file("/newroot/etc/passwd",
            "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            "agent:x:1000:1000:agent:/home/agent:/bin/bash\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
  make_file("/newroot/etc/group", "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n");
  std::string hosts =
      "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + spec.hostname + "\n";
  for (const auto& entry : spec.hosts_entries) hosts += entry + "\n";
  make_file("/newroot/etc/hosts", hosts);
  make_file("/newroot/etc/hostname", spec.hostname + "\n");
  // Without a nameserver: names resolve through /etc/hosts only, so an unknown name
  // fails at once instead of waiting on a DNS server that cannot be reached. With one
  // (the server answering on the sandbox's own loopback), it answers at once too.
  if (spec.nameserver.empty()) {
    make_file("/newroot/etc/resolv.conf", "# sandboxd: no DNS; known names are in /etc/hosts\n");
  } else {
    make_file("/newroot/etc/resolv.conf",
              "# sandboxd: names the server resolves for this sandbox\nnameserver " + spec.nameserver +
                  "\noptions timeout:2 attempts:2\n");
  }
  make_file("/newroot/etc/nsswitch.conf",
            std::string("passwd: files\ngroup: files\nshadow: files\nhosts: files") +
                (spec.nameserver.empty() ? "" : " dns") +
                "\nnetworks: files\nprotocols: files\nservices: files\n");
}

void setup_proc() {
  mkdir_p("/newroot/proc");
  do_mount("proc", "/newroot/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC);
  // Docker's masked and read-only paths.
  for (const char* file :
       {"kcore", "keys", "timer_list", "sched_debug", "sysrq-trigger", "latency_stats", "kpagecount",
        "kpageflags", "kpagecgroup", "config.gz", "kallsyms", "interrupts"}) {
    std::string target = std::string("/newroot/proc/") + file;
    if (access(target.c_str(), F_OK) != 0) continue;
    do_mount("/oldroot/dev/null", target, nullptr, MS_BIND);
    set_attributes(target, true, true, true);
  }
  for (const char* dir : {"acpi", "scsi", "asound", "driver"}) {
    std::string target = std::string("/newroot/proc/") + dir;
    if (access(target.c_str(), F_OK) != 0) continue;
    do_mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0");
  }
  for (const char* dir : {"bus", "fs", "irq", "sys"}) {
    std::string target = std::string("/newroot/proc/") + dir;
    if (access(target.c_str(), F_OK) != 0) continue;
    do_mount(target.c_str(), target, nullptr, MS_BIND | MS_REC);
    set_attributes(target, true, false, true);
  }
}

void setup_dev(const Spec& spec) {
  mount_tmpfs("/newroot/dev", "mode=0755,size=64k,nr_inodes=64", MS_NOSUID | MS_NOEXEC);
  for (const char* dev : {"null", "zero", "full", "random", "urandom", "tty"})
    bind(std::string("/oldroot/dev/") + dev, std::string("/newroot/dev/") + dev,
         /*read_only=*/false, /*allow_dev=*/true, /*no_exec=*/true);
  mkdir_p("/newroot/dev/pts");
  do_mount("devpts", "/newroot/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
           "newinstance,ptmxmode=0666,mode=0620");
  make_symlink("pts/ptmx", "/newroot/dev/ptmx");
  mount_tmpfs("/newroot/dev/shm", "mode=1777,size=" + std::to_string(spec.shm_size_bytes),
              MS_NOSUID | MS_NODEV | MS_NOEXEC);
  make_symlink("/proc/self/fd", "/newroot/dev/fd");
  make_symlink("/proc/self/fd/0", "/newroot/dev/stdin");
  make_symlink("/proc/self/fd/1", "/newroot/dev/stdout");
  make_symlink("/proc/self/fd/2", "/newroot/dev/stderr");
  do_mount(nullptr, "/newroot/dev", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
           "mode=0755,size=64k,nr_inodes=64");
}

void setup_sys() {
  mkdir_p("/newroot/sys");
  do_mount("sysfs", "/newroot/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
  if (access("/newroot/sys/firmware", F_OK) == 0)
    do_mount("tmpfs", "/newroot/sys/firmware", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
             "size=0");
}

// Attaches a folder the server cloned (open_tree) at `target`: what a bind of its host
// path gives, from a descriptor instead of a path of the host's namespace. It is a
// slave where the sandbox receives the server's later binds on that folder (a
// pre-started sandbox's slot, the skills of each request), private otherwise.
void attach_tree(int tree, const std::string& target, bool read_only, bool receive) {
  mkdir_p(target);
  if (syscall(SYS_move_mount, tree, "", AT_FDCWD, target.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
    throw SyscallError("move_mount(tree, " + target + ", MOVE_MOUNT_F_EMPTY_PATH)", errno);
  do_mount(nullptr, target, nullptr, MS_REC | (receive ? MS_SLAVE : MS_PRIVATE));
  set_attributes(target, read_only, false, false);
}

// A container folder: its tree when the server sent one, else a bind of its host path.
void mount_folder(int tree, const std::string& host_path, const std::string& target, bool read_only,
                  bool receive) {
  if (tree >= 0)
    attach_tree(tree, target, read_only, receive);
  else
    bind("/oldroot" + host_path, target, read_only);
}

void setup_container_mounts(const Spec& spec, const FolderTrees& trees) {
  std::string owner = ",uid=" + std::to_string(spec.host_uid) + ",gid=" + std::to_string(spec.host_gid);
  mount_tmpfs("/newroot/tmp", "mode=1777,size=" + std::to_string(spec.tmp_size_bytes), MS_NOSUID | MS_NODEV);
  mkdir_p("/newroot/home");
  mount_tmpfs("/newroot/home/agent", "mode=0755,size=" + std::to_string(spec.home_size_bytes) + owner,
              MS_NOSUID | MS_NODEV);
  const bool receive = spec.receive_mounts;
  mount_folder(trees.workspace, spec.workspace_dir, "/newroot/home/agent/workspace", /*read_only=*/false,
               receive);
  // E2B's code expects a writable home at /home/user that lasts: the workspace, by a
  // symlink (it follows whatever is mounted on the workspace, a pre-started sandbox's
  // container included).
  make_symlink("agent/workspace", "/newroot/home/user");
  mount_folder(trees.uploads, spec.uploads_dir, "/newroot/mnt/user-data/uploads", /*read_only=*/true,
               receive);
  mount_folder(trees.outputs, spec.outputs_dir, "/newroot/mnt/user-data/outputs", /*read_only=*/false,
               receive);
  if (!spec.skills_dir.empty())
    mount_folder(trees.skills, spec.skills_dir, "/newroot/mnt/skills", /*read_only=*/true, receive);
  else
    mkdir_p("/newroot/mnt/skills");
}

// The certificates the sandbox trusts beyond its system's (trust_bundle.h): the server's
// folder read-only at kTrustDir, and its bundle over the system's own when the image has
// a plain file there (a bind through a link of the image could land anywhere). The
// folder holds certificates only, never a key.
void setup_trust(const Spec& spec) {
  const std::string folder = "/oldroot" + spec.trust_dir;
  bind(folder, std::string("/newroot") + kTrustDir, /*read_only=*/true, /*allow_dev=*/false,
       /*no_exec=*/true);
  if (!plain_file_beneath("/newroot", kSystemBundle)) return;
  const std::string source = folder + "/" + kTrustBundleName,
                    target = std::string("/newroot") + kSystemBundle;
  do_mount(source.c_str(), target, nullptr, MS_BIND);
  set_attributes(target, /*read_only=*/true, /*allow_dev=*/false, /*no_exec=*/true);
}

}  // namespace

void setup_filesystem(const Spec& spec, const FolderTrees& trees) {
  // 1. Nothing we mount may propagate back to the host. A pre-started sandbox is a
  //    slave instead (as bubblewrap makes its sandboxes): it still sends nothing back,
  //    and receives the container binds the server makes on its slot directories.
  do_mount(nullptr, "/", nullptr, MS_REC | (spec.receive_mounts ? MS_SLAVE : MS_PRIVATE));
  // 2. A staging tmpfs becomes the root; the host stays reachable under /oldroot.
  do_mount("tmpfs", kBase, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k,nr_inodes=16");
  check(chdir(kBase), std::string("chdir(") + kBase + ")");
  mkdir_p(std::string(kBase) + "/newroot");
  mkdir_p(std::string(kBase) + "/oldroot");
  check(syscall(SYS_pivot_root, kBase, (std::string(kBase) + "/oldroot").c_str()),
        std::string("pivot_root(") + kBase + ", " + kBase + "/oldroot)");
  check(chdir("/"), "chdir(/)");
  // 3. The sandbox's own root: a small tmpfs made read-only once assembled.
  do_mount("tmpfs", "/newroot", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096");
  setup_image(spec);
  write_etc(spec);
  setup_image_etc(spec);
  setup_proc();
  setup_dev(spec);
  setup_sys();
  setup_container_mounts(spec, trees);
  if (!spec.trust_dir.empty()) setup_trust(spec);
  do_mount(nullptr, "/newroot", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV);
  // 4. Drop the host, then make /newroot the root and detach the staging tmpfs.
  check(umount2("/oldroot", MNT_DETACH), "umount2(/oldroot, MNT_DETACH)");
  check(chdir("/newroot"), "chdir(/newroot)");
  check(syscall(SYS_pivot_root, ".", "."), "pivot_root(., .)");
  check(umount2(".", MNT_DETACH), "umount2(., MNT_DETACH)");
  check(chdir("/"), "chdir(/)");
}

namespace {

// "/a/b" is "/a/b" or below "/a".
bool at_or_below(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir ||
         (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

// /proc/self/mountinfo writes a space, tab, newline or backslash in a path as \ooo.
std::string unescape_mount_point(const char* text) {
  std::string out;
  for (const char* p = text; *p; ++p) {
    if (p[0] == '\\' && p[1] >= '0' && p[1] <= '7' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' &&
        p[3] <= '7') {
      out += static_cast<char>((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
      p += 3;
    } else {
      out += *p;
    }
  }
  return out;
}

// Detaches each mount point, the deepest first (a parent's detach takes its children).
void detach_deepest_first(std::vector<std::string> points) {
  std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  for (const auto& point : points) umount2(point.c_str(), MNT_DETACH);  // (a parent's detach took it already)
}

}  // namespace

std::optional<std::vector<MountEntry>> read_mounts() {
  FILE* info = std::fopen("/proc/self/mountinfo", "re");
  if (!info) return std::nullopt;
  std::vector<MountEntry> mounts;
  char line[8192];
  while (std::fgets(line, sizeof line, info)) {
    // ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS
    char point[4096], source[4096];
    const char* rest = std::strstr(line, " - ");
    if (std::sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1 || !rest ||
        std::sscanf(rest + 3, "%*s %4095s", source) != 1)
      continue;
    mounts.push_back({unescape_mount_point(point), unescape_mount_point(source)});
  }
  std::fclose(info);
  return mounts;
}

bool detach_volume_mounts(const std::string& service_dir, const std::vector<std::string>& needed) {
  const auto mounts = read_mounts();
  if (!mounts) return false;
  std::vector<std::string> detach;
  for (const auto& [point, source] : *mounts) {
    const bool services = !service_dir.empty() && point != service_dir && at_or_below(point, service_dir);
    if (point == "/" || (!services && !source.starts_with("/dev/loop"))) continue;
    bool keep = false;
    for (const auto& path : needed) keep = keep || at_or_below(path, point) || at_or_below(point, path);
    if (!keep) detach.push_back(point);
  }
  detach_deepest_first(std::move(detach));
  return true;
}

int run_mount_template(int argc, char** argv) {
  constexpr int kReportFd = 3;
  auto fail = [&] {
    char byte = 'e';
    return write(kReportFd, &byte, 1) == 1 ? 1 : 2;
  };
  if (argc < 3) return fail();
  const std::string service_dir = std::strcmp(argv[2], "-") == 0 ? "" : argv[2];
  std::vector<std::string> needed{"/proc", "/sys"};
  for (int i = 3; i < argc; ++i) needed.emplace_back(argv[i]);
  // Private: nothing mounted on the host later reaches it (or the sandboxes made from
  // it), and nothing done in it reaches the host.
  if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return fail();
  // A mount is kept when it is "/", holds a needed path (an ancestor) or is part of one
  // (at or below it), and is not the service's own (below its directory): every other
  // is detached, deepest first, so that this namespace pins no one's volume.
  const auto mounts = read_mounts();
  if (!mounts) return fail();
  std::vector<std::string> detach;
  for (const auto& [point, source] : *mounts) {
    if (point == "/") continue;
    bool keep = false;
    for (const auto& path : needed) keep = keep || at_or_below(path, point) || at_or_below(point, path);
    if (!service_dir.empty() && point != service_dir && at_or_below(point, service_dir)) keep = false;
    if (!keep) detach.push_back(point);
  }
  detach_deepest_first(std::move(detach));
  // open_tree(2) is what the sandboxes need of this kernel: checked here, once.
  int probe = static_cast<int>(syscall(SYS_open_tree, AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (probe < 0) return fail();
  close(probe);
  int ns = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (ns < 0) return fail();
  // Entering it takes CAP_SYS_CHROOT besides CAP_SYS_ADMIN (a bounding set without it,
  // as a unit may have, refuses the launchers' setns): tried here, on itself, with the
  // capabilities the launchers will have.
  if (setns(ns, CLONE_NEWNS) != 0) {
    close(ns);
    return fail();
  }
  if (send_byte_with_fd(kReportFd, 'o', ns) != 0) return 1;
  close(ns);
  return 0;
}

}  // namespace sandboxd::runtime
