// The walk over a container's files that sync (file_store) and the bucket's flush
// (cluster/container_durability) share. Symlinks are never followed: entries are lstat'ed
// and sub-folders are opened beneath their parent (openat2 RESOLVE_BENEATH) with
// O_NOFOLLOW, so a link that code in the sandbox swaps in after the lstat fails to open
// instead of leading out of the container.
#pragma once

#include <sys/stat.h>

#include <functional>
#include <string>

namespace sandboxd::store {

// `directory` is the folder the file is in (an fd valid during the call), `name` the
// entry in it, `sandbox_path` the path the sandbox sees.
using FileVisitor = std::function<void(int directory, const char* name, const std::string& sandbox_path,
                                       const struct stat& st)>;

// Told of each folder the walk reads, before it reads its entries (so that a watch put on
// it then sees what changes after, and the read sees what was there before), and of
// each folder the walk leaves out.
class FolderObserver {
 public:
  virtual ~FolderObserver() = default;
  virtual void entering(int folder) = 0;  // an fd of the folder, valid during the call
  virtual void left_out() = 0;            // too deep, or it could not be opened
};

// Visits every regular file below `directory` (an fd this function does not own, opened
// for reading: its listing is read through it, so its offset ends at its end),
// leaving out temporary files of writes in progress (base/temp_files.h). Trees deeper
// than 128 levels are left unlisted rather than holding one fd per level without bound.
// `folders`, when set, is told of every folder, `directory` first.
void walk_regular_files(int directory, const std::string& sandbox_dir, const FileVisitor& visit,
                        FolderObserver* folders = nullptr);

}  // namespace sandboxd::store
