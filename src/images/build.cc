#include "images/build.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstring>
#include <fstream>

#include "images/extract.h"
#include "runtime/syscall_error.h"

namespace sandboxd::images {

const std::vector<std::string> kDataSciencePackages = {
    "python3", "python3-pandas", "python3-numpy", "python3-scipy", "python3-sklearn", "python3-statsmodels",
    "python3-matplotlib", "python3-seaborn", "python3-openpyxl", "python3-xlsxwriter", "python3-xlrd",
    "python3-pil", "python3-docx", "python3-pypdf", "python3-reportlab", "python3-img2pdf", "img2pdf",
    "python3-sympy", "python3-mpmath", "python3-tqdm", "python3-dateutil", "python3-tz", "python3-joblib",
    "python3-pdfkit", "unzip", "p7zip-full", "bc", "ripgrep", "fd-find", "sqlite3", "curl", "ca-certificates",
    "unrar-free",
    "bash-static",  // sandboxes run it for /bin/bash (no dynamic linking per command)
    // The persistent Python (code_execution): IPython's kernel, and matplotlib's inline
    // backend for figures as PNG.
    "python3-ipykernel", "python3-matplotlib-inline", "fonts-dejavu-core"};

const std::vector<std::string> kNotInDebian = {"pyarrow",
                                               "python-pptx",
                                               "pdfplumber",
                                               "pypdfium2",
                                               "pdf2image",
                                               "tabula-py",
                                               "unrar (non-free; unrar-free is installed instead)"};

namespace {

using runtime::SyscallError;

std::string join(const std::vector<std::string>& words, const char* sep) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : sep) + w;
  return out;
}

// Runs a program with this process's stdout/stderr (its progress is the user's), in a
// child with a mount namespace of its own, so that whatever it mounts (debootstrap
// mounts /proc and /sys in its target) vanishes with it, even when it is killed. With
// `chroot_dir`, the child enters it with /proc and /dev mounted (what dpkg maintainer
// scripts expect). Throws when it does not exit 0.
void run(const std::vector<std::string>& argv, const std::string& chroot_dir = "") {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) throw SyscallError("fork()", errno);
  if (pid == 0) {
    auto fail = [](const std::string& call) {
      std::fprintf(stderr, "sandboxd image build: %s: %s\n", call.c_str(), std::strerror(errno));
      _exit(127);
    };
    if (unshare(CLONE_NEWNS) != 0) fail("unshare(CLONE_NEWNS)");
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail("mount(/, MS_REC|MS_PRIVATE)");
    if (!chroot_dir.empty()) {
      std::string proc = chroot_dir + "/proc", dev = chroot_dir + "/dev";
      mkdir(proc.c_str(), 0555);
      mkdir(dev.c_str(), 0755);
      if (mount("proc", proc.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
        fail("mount(proc, " + proc + ")");
      if (mount("/dev", dev.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
        fail("mount(/dev, " + dev + ", MS_BIND)");
      if (chroot(chroot_dir.c_str()) != 0) fail("chroot(" + chroot_dir + ")");
      if (chdir("/") != 0) fail("chdir(/)");
    }
    const char* env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive",
                         "LC_ALL=C.UTF-8", "HOME=/root", nullptr};
    execve(args[0], args.data(), const_cast<char**>(env));
    fail(std::string("execve(") + args[0] + ")");
  }
  int status = 0;
  if (runtime::retry_eintr([&] { return waitpid(pid, &status, 0); }) < 0)
    throw SyscallError("waitpid()", errno);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw ImageError(join(argv, " ") + (chroot_dir.empty() ? "" : " (in the chroot)") + " failed (" +
                     (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                        : "signal " + std::to_string(WTERMSIG(status))) +
                     ")");
}

void write_file(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  if (chmod(path.c_str(), mode) != 0) throw SyscallError("chmod(" + path + ")", errno);
}

uint64_t sanitize_dir(int dir_fd, const std::string& where) {
  uint64_t changed = 0;
  int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw SyscallError("openat(" + where + ")", errno);
  DIR* dir = fdopendir(fd);
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  for (const auto& name : names) {
    struct stat st;
    if (fstatat(dirfd(dir), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
      if (unlinkat(dirfd(dir), name.c_str(), 0) != 0)
        throw SyscallError("unlinkat(" + where + "/" + name + ")", errno);
      ++changed;
    } else if (S_ISREG(st.st_mode) && (st.st_mode & (S_ISUID | S_ISGID))) {
      // A regular file found by lstat in a tree only this process writes: fchmodat
      // cannot be misled through a symlink here.
      if (fchmodat(dirfd(dir), name.c_str(), st.st_mode & 0777, 0) != 0)
        throw SyscallError("fchmodat(" + where + "/" + name + ")", errno);
      ++changed;
    } else if (S_ISDIR(st.st_mode)) {
      int sub = openat(dirfd(dir), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) throw SyscallError("openat(" + where + "/" + name + ")", errno);
      try {
        changed += sanitize_dir(sub, where + "/" + name);
      } catch (...) {
        close(sub);
        closedir(dir);
        throw;
      }
      close(sub);
    }
  }
  closedir(dir);
  return changed;
}

}  // namespace

uint64_t sanitize_tree(const std::string& root) {
  int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw SyscallError("open(" + root + ", O_DIRECTORY)", errno);
  uint64_t changed = 0;
  try {
    changed = sanitize_dir(fd, root);
  } catch (...) {
    close(fd);
    throw;
  }
  close(fd);
  return changed;
}

ImageInfo build_image(ImageStore& store, const BuildOptions& options) {
  FILE* out = options.progress;
  auto say = [&](const std::string& line) {
    std::fprintf(out, "==> %s\n", line.c_str());
    std::fflush(out);
  };
  if (access("/usr/sbin/debootstrap", X_OK) != 0)
    throw ImageError("debootstrap is not installed (apt-get install debootstrap; scripts/setup.sh does)");
  std::vector<std::string> packages = options.minimal ? std::vector<std::string>{} : kDataSciencePackages;
  for (const auto& p : options.packages)
    if (std::find(packages.begin(), packages.end(), p) == packages.end()) packages.push_back(p);
  for (const auto& p : packages)
    if (p.empty() || p.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.+-") != std::string::npos)
      throw ImageError("\"" + p + "\" is not a Debian package name");

  auto staging = store.stage();
  const std::string root = staging->rootfs();
  say("[1/4] debootstrap --variant=minbase " + options.suite + " from " + options.mirror + " into " + root);
  run({"/usr/sbin/debootstrap", "--variant=minbase", options.suite, root, options.mirror});

  if (!packages.empty()) {
    say("[2/4] apt-get install " + std::to_string(packages.size()) + " package(s): " + join(packages, " "));
    // No service may start inside the chroot (policy-rc.d), and no documentation.
    write_file(root + "/usr/sbin/policy-rc.d", "#!/bin/sh\nexit 101\n", 0755);
    write_file(root + "/etc/dpkg/dpkg.cfg.d/01-sandboxd-nodoc",
               "path-exclude /usr/share/doc/*\npath-include /usr/share/doc/*/copyright\npath-exclude "
               "/usr/share/man/*\n"
               "path-exclude /usr/share/info/*\n",
               0644);
    run({"/usr/bin/apt-get", "-q", "update"}, root);
    std::vector<std::string> install = {"/usr/bin/apt-get", "-q",     "-y", "--no-install-recommends", "-o",
                                        "Dpkg::Use-Pty=0",  "install"};
    install.insert(install.end(), packages.begin(), packages.end());
    run(install, root);
    run({"/usr/bin/apt-get", "clean"}, root);
    unlink((root + "/usr/sbin/policy-rc.d").c_str());
  } else {
    say("[2/4] no packages to install");
  }

  say("[3/4] cleaning: apt lists, device nodes, setuid/setgid bits");
  for (const char* dir : {"/var/lib/apt/lists", "/var/cache/apt/archives", "/var/log"}) {
    int fd = open((root + dir).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    DIR* d = fdopendir(fd);
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && n != "partial" && n != "lock") names.push_back(n);
    }
    for (const auto& n : names) remove_tree(dirfd(d), n);
    closedir(d);
  }
  uint64_t changed = sanitize_tree(root);
  std::fprintf(out, "    %lu device nodes removed or setuid/setgid bits cleared\n", (unsigned long)changed);

  auto installed = installed_packages(root);
  say("[4/4] recording " + std::to_string(installed.size()) +
      " installed packages and installing the image as " + options.ref.str());
  boost::json::object manifest;
  // Built images have no registry digest: theirs is that of what is installed.
  manifest["digest"] = "sha256:" + sha256_hex(options.suite + "\n" + join(installed, "\n"));
  manifest["digest_of"] = "the suite and the installed package list";
  manifest["source"] = "debootstrap --variant=minbase " + options.suite + " " + options.mirror;
  manifest["format"] = "debootstrap";
  boost::json::array requested, all, missing;
  for (const auto& p : packages) requested.emplace_back(p);
  for (const auto& p : installed) all.emplace_back(p);
  if (!options.minimal)
    for (const auto& p : kNotInDebian) missing.emplace_back(p);
  manifest["requested_packages"] = std::move(requested);
  manifest["packages"] = std::move(all);
  manifest["not_in_debian"] = std::move(missing);
  return staging->commit(options.ref, std::move(manifest));
}

}  // namespace sandboxd::images
