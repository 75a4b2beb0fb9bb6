#include "base/sandbox_paths.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace sandboxd {
namespace {

bool below(std::string_view path, std::string_view mount) {
  return path == mount ||
         (path.size() > mount.size() && path.substr(0, mount.size()) == mount && path[mount.size()] == '/');
}

}  // namespace

std::optional<ResolvedPath> resolve_sandbox_path(const ContainerPaths& paths, std::string_view path) {
  if (path.find('\0') != std::string_view::npos) return std::nullopt;
  std::string absolute = path.empty() || path[0] != '/'
                             ? std::string(kWorkspaceMount) + "/" + std::string(path)
                             : std::string(path);
  std::vector<std::string_view> parts;
  std::string_view rest = absolute;
  while (!rest.empty()) {
    auto slash = rest.find('/');
    std::string_view part = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  std::string normal;
  for (auto part : parts) normal.append("/").append(part);
  if (normal.empty()) normal = "/";

  struct Candidate {
    std::string_view mount;
    Mount kind;
    const std::string* host;
    bool read_only;
  };
  const Candidate candidates[] = {{kWorkspaceMount, Mount::kWorkspace, &paths.workspace, false},
                                  {kUploadsMount, Mount::kUploads, &paths.uploads, true},
                                  {kOutputsMount, Mount::kOutputs, &paths.outputs, false},
                                  {kSkillsMount, Mount::kSkills, &paths.skills, true}};
  for (const auto& c : candidates) {
    if (c.host->empty() || !below(normal, c.mount)) continue;
    ResolvedPath out;
    out.mount = c.kind;
    out.host_root = *c.host;
    out.relative = normal.size() > c.mount.size() ? normal.substr(c.mount.size() + 1) : "";
    out.sandbox_path = normal;
    out.read_only = c.read_only;
    return out;
  }
  return std::nullopt;
}

int open_beneath(int root_fd, const std::string& relative, int flags, mode_t mode) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const char* name = relative.empty() ? "." : relative.c_str();
  for (;;) {
    long fd = syscall(SYS_openat2, root_fd, name, &how, sizeof how);
    if (fd >= 0) return static_cast<int>(fd);
    if (errno == EINTR || errno == EAGAIN) continue;
    return -errno;
  }
}

int make_parents_beneath(int root_fd, const std::string& relative, uid_t uid, gid_t gid) {
  size_t pos = 0;
  while ((pos = relative.find('/', pos)) != std::string::npos) {
    std::string parent = relative.substr(0, pos++);
    int dir = open_beneath(root_fd, parent, O_PATH | O_DIRECTORY);
    if (dir >= 0) {
      close(dir);
      continue;
    }
    if (dir != -ENOENT) return dir;
    // Create the last component inside its (already verified) parent.
    auto slash = parent.rfind('/');
    std::string base = slash == std::string::npos ? "" : parent.substr(0, slash);
    std::string leaf = slash == std::string::npos ? parent : parent.substr(slash + 1);
    int base_fd = open_beneath(root_fd, base, O_PATH | O_DIRECTORY);
    if (base_fd < 0) return base_fd;
    int rc = mkdirat(base_fd, leaf.c_str(), 0755);
    int err = errno;
    if (rc == 0) fchownat(base_fd, leaf.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW);
    close(base_fd);
    if (rc != 0 && err != EEXIST) return -err;
  }
  return 0;
}

}  // namespace sandboxd
