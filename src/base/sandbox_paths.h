// Where a sandbox path lives on the host. The text editor and the Files API work on the
// host side of the container's mounts, whether or not the sandbox runs; they must never
// be led outside a mount by `..` or by a symlink that code in the sandbox made.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

namespace sandboxd {

inline constexpr std::string_view kWorkspaceMount = "/home/agent/workspace";
inline constexpr std::string_view kUploadsMount = "/mnt/user-data/uploads";
inline constexpr std::string_view kOutputsMount = "/mnt/user-data/outputs";
inline constexpr std::string_view kSkillsMount = "/mnt/skills";

// Host directories backing a container's session mounts.
struct ContainerPaths {
  std::string workspace;  // /home/agent/workspace (rw)
  std::string uploads;    // /mnt/user-data/uploads (ro inside the sandbox)
  std::string outputs;    // /mnt/user-data/outputs (rw)
  std::string skills;     // /mnt/skills (ro); may be empty
};

enum class Mount { kWorkspace, kUploads, kOutputs, kSkills };

struct ResolvedPath {
  Mount mount;
  std::string host_root;     // the mount's host directory
  std::string relative;      // normalised path below it ("" = the mount itself)
  std::string sandbox_path;  // normalised absolute sandbox path
  bool read_only;            // read-only for code in the sandbox (uploads, skills)
};

// Resolves a sandbox path lexically: relative paths are taken from the workspace, "."
// and ".." are folded, empty segments dropped. Returns nullopt when the result is not
// inside one of the session mounts (or the path holds a NUL).
std::optional<ResolvedPath> resolve_sandbox_path(const ContainerPaths& paths, std::string_view path);

// openat2(root_fd, relative, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS): symlinks are
// followed only while they stay below root_fd. Returns an fd or -errno.
int open_beneath(int root_fd, const std::string& relative, int flags, mode_t mode = 0);

// Creates the missing parent folders of `relative` below root_fd (never through a
// symlink that leaves it), owned by uid:gid. Returns 0 or -errno.
int make_parents_beneath(int root_fd, const std::string& relative, uid_t uid, gid_t gid);

}  // namespace sandboxd
