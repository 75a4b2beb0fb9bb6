// A container's files seen from outside its sandbox, for clients that manage them by
// path (E2B's filesystem service): stat, list (to a depth), make a folder, move, remove.
// Every call works on the host side of the container's mounts, whether or not its
// sandbox runs, and every lookup goes through openat2 beneath the mount's root
// (base/sandbox_paths.h), so a symlink that code made never leads outside the mount.
// Blocking (disk work): callers run these on the blocking pool.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/sandbox_paths.h"

namespace sandboxd::service {

struct FileEntry {
  enum class Type { kFile, kDirectory, kSymlink, kOther };
  std::string name;  // the last segment
  std::string path;  // the sandbox path
  Type type = Type::kOther;
  uint64_t size = 0;
  uint32_t mode = 0;        // the permission bits
  std::string permissions;  // as ls shows them: "-rw-r--r--"
  int64_t mtime_ns = 0;
  std::optional<std::string> symlink_target;
  // The user metadata of a file or folder (E2B's): its extended attributes named
  // kMetadataAttributePrefix + key, by key.
  std::map<std::string, std::string> metadata;
};

// The extended-attribute namespace of user metadata, as envd keeps it.
inline constexpr std::string_view kMetadataAttributePrefix = "user.e2b.";

// At most this many entries in one listing (a deeper or larger tree is a 400).
inline constexpr size_t kMaxListedEntries = 10000;

// 404 when missing; 400 outside the container's mounts. A symlink is described itself
// (not what it points to).
Result<FileEntry> stat_entry(const ContainerPaths& paths, const std::string& sandbox_path);
// The entries below a folder, to `depth` levels (1: its own entries); symlinks are
// listed, never followed.
Result<std::vector<FileEntry>> list_entries(const ContainerPaths& paths, const std::string& sandbox_path,
                                            int depth);
// Makes the folder and any missing parents (owned by uid:gid); 409 when it exists.
Result<FileEntry> make_directory(const ContainerPaths& paths, const std::string& sandbox_path, uid_t uid,
                                 gid_t gid);
// Renames within one mount (the parents of the destination are made); 400 across mounts.
Result<FileEntry> move_entry(const ContainerPaths& paths, const std::string& from, const std::string& to,
                             uid_t uid, gid_t gid);
// Removes a file, a symlink or a whole folder.
Result<void> remove_entry(const ContainerPaths& paths, const std::string& sandbox_path);

}  // namespace sandboxd::service
