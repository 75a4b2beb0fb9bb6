#include "runtime/trust_bundle.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdexcept>
#include <string_view>

#include "runtime/syscall_error.h"

namespace sandboxd::runtime {
namespace {

// A system bundle is some 200 KiB; past this it is not one.
constexpr off_t kMaxSystemBundle = 16 << 20;

// The PEM CERTIFICATE blocks of `text`, each on lines of its own. Nothing else of a file
// is copied: whatever else a bundle holds (a key put there by mistake) stays out.
std::string certificate_blocks(std::string_view text) {
  static constexpr std::string_view kBegin = "-----BEGIN CERTIFICATE-----",
                                    kEnd = "-----END CERTIFICATE-----";
  std::string out;
  for (size_t at = text.find(kBegin); at != std::string_view::npos; at = text.find(kBegin, at)) {
    const size_t end = text.find(kEnd, at + kBegin.size());
    if (end == std::string_view::npos) break;
    out.append(text.substr(at, end + kEnd.size() - at));
    out += '\n';
    at = end + kEnd.size();
  }
  return out;
}

std::string read_system_bundle(const std::string& root) {
  if (!plain_file_beneath(root, kSystemBundle)) return "";
  const std::string path = (root == "/" ? "" : root) + kSystemBundle;
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw SyscallError("open(" + path + ", O_NOFOLLOW)", errno);
  std::string text;
  struct stat st {};
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= kMaxSystemBundle) {
    text.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = retry_eintr([&] { return read(fd, text.data() + done, text.size() - done); });
      if (n < 0) {
        const int err = errno;
        close(fd);
        throw SyscallError("read(" + path + ")", err);
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    text.resize(done);
  }
  close(fd);
  return certificate_blocks(text);
}

// `dir`/`name` replaced whole: a reader (a sandbox starting) sees the old file or the new.
void replace_file(const std::string& dir, const std::string& name, const std::string& content) {
  const std::string path = dir + "/" + name, temporary = dir + "/." + name + ".new";
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw SyscallError("open(" + temporary + ", O_CREAT)", errno);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = retry_eintr([&] { return write(fd, content.data() + done, content.size() - done); });
    if (n < 0) {
      const int err = errno;
      close(fd);
      throw SyscallError("write(" + temporary + ")", err);
    }
    done += static_cast<size_t>(n);
  }
  // Readable by everyone whatever the umask: the sandbox's user reads it.
  if (fchmod(fd, 0644) != 0) {
    const int err = errno;
    close(fd);
    throw SyscallError("fchmod(" + temporary + ", 0644)", err);
  }
  close(fd);
  check(rename(temporary.c_str(), path.c_str()), "rename(" + temporary + ", " + path + ")");
}

}  // namespace

bool plain_file_beneath(const std::string& root, const std::string& path) {
  const std::string base = root == "/" ? "" : root;
  struct stat st {};
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1))
    if (lstat((base + path.substr(0, slash)).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  return lstat((base + path).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void write_trust_folder(const std::string& dir, const std::string& system_root, const std::string& ca_pem) {
  const std::string ca = certificate_blocks(ca_pem);
  if (ca.empty()) throw std::runtime_error("the egress CA's certificate holds no PEM certificate");
  const std::string system = read_system_bundle(system_root.empty() ? "/" : system_root);
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw SyscallError("mkdir(" + dir + ")", errno);
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) throw SyscallError("lstat(" + dir + ")", errno);
  if (!S_ISDIR(st.st_mode)) throw std::runtime_error(dir + " is not a folder");
  // Traversable by the sandboxes' launchers, which reach it as no owner of it.
  check(chmod(dir.c_str(), 0755), "chmod(" + dir + ", 0755)");
  replace_file(dir, kTrustCaName, ca);
  replace_file(dir, kTrustBundleName, system + ca);
}

}  // namespace sandboxd::runtime
