// File bodies on disk, under a container's host directories (ContainerPaths), and the
// index of them in the metadata. Every open below a mount's root goes through openat2
// (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS, base/sandbox_paths.h open_beneath), sync's
// walk included, so a symlink that code in the sandbox made never leads outside the
// container. MIME detection is store/mime.h, the atomic writer store/atomic_writer.h.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/sandbox_paths.h"
#include "store/atomic_writer.h"
#include "store/file_io.h"
#include "store/metadata.h"
#include "store/tree_changes.h"

namespace sandboxd::store {

struct OpenedFile {
  int fd = -1;  // owned by the caller
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

// What one sync reports besides updating the index: the outputs/ files whose ctime is
// at or after `since_ns` (CLOCK_REALTIME ns), i.e. those created, written, renamed into
// place or otherwise changed since then, as sandbox paths in walk order, at most `limit`.
struct OutputChanges {
  int64_t since_ns = 0;
  size_t limit = 1000;
  // Files a previous command was told it changed, by the change time it was told for.
  // File times and a command's start come from the kernel's coarse clock, so a file
  // that the command before wrote in the same tick as this one started has a ctime at
  // `since_ns`; it is this command's only if it changed again since.
  std::unordered_map<std::string, int64_t> reported_before;
  std::vector<std::string> paths;
  std::unordered_map<std::string, int64_t> reported_now;  // paths, by their ctime
  bool truncated = false;                                 // more changed files than `limit`
};

class FileStore {
 public:
  // Files written here belong to uid:gid (the agent's host ids), so the sandbox sees
  // them as agent's.
  FileStore(Metadata& metadata, uid_t uid, gid_t gid);

  // Where sync's walks put their watches (store/tree_changes.h); none by default.
  void set_tree_changes(TreeChanges* changes) { tree_changes_ = changes; }
  TreeChanges* tree_changes() const { return tree_changes_; }

  // Starts writing `sandbox_path` (under uploads or outputs; with `workspace_too`, under
  // the workspace as well, for clients that manage a sandbox's files by path). Creates
  // parent folders. kOutsideMounts, kNotAFile (a folder or a symlink is in the way),
  // kNoSpace, kIo.
  FileResult<std::unique_ptr<FileWriter>> begin_write(const ContainerPaths& paths,
                                                      const std::string& sandbox_path,
                                                      bool workspace_too = false);

  // Opens a regular file for reading. kNotFound, kNotAFile (a directory, a device, a
  // symlink leaving the mount), kOutsideMounts.
  FileResult<OpenedFile> open_for_read(const ContainerPaths& paths, const std::string& sandbox_path);

  // Brings the metadata in line with the disk for one container: files that code wrote
  // under uploads/ and outputs/ get a record (created_at = now, when first seen),
  // changed ones (size or mtime) get a new etag and size, vanished ones are dropped.
  // Reads whole new bodies (MD5): disk work, never on an I/O thread (base/blocking.h).
  // With `changes`, the same walk also collects the outputs changed since a moment
  // (ctime is the kernel's, set on every write, rename or chmod and never settable from
  // user space, unlike mtime: `cp -p`, `touch -d` and `mv` are all seen). A tree that
  // TreeChanges tracks gets its watches from this walk.
  void sync(const std::string& storage, const ContainerPaths& paths, OutputChanges* changes = nullptr);

  // The record of one file (any mount, workspace included), synced with the disk
  // first; nullopt when the file does not exist.
  std::optional<FileRecord> stat_file(const std::string& storage, const ContainerPaths& paths,
                                      const std::string& sandbox_path);

  // Deletes one file (any mount). kNotFound when absent.
  FileResult<void> remove(const std::string& storage, const ContainerPaths& paths,
                          const std::string& sandbox_path);
  // Deletes every upload whose key starts with `key_prefix`; returns the count (and,
  // with `removed_paths`, the sandbox path of each file it deleted).
  size_t remove_prefix(const std::string& storage, const ContainerPaths& paths, const std::string& key_prefix,
                       std::vector<std::string>* removed_paths = nullptr);

 private:
  Metadata& metadata_;
  TreeChanges* tree_changes_ = nullptr;
  uid_t uid_;
  gid_t gid_;
};

}  // namespace sandboxd::store
