#include "store/file_walk.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <string_view>

#include "base/sandbox_paths.h"
#include "base/temp_files.h"
#include "base/unique_fd.h"

namespace sandboxd::store {
namespace {

constexpr int kMaxWalkDepth = 128;

// Listed with getdents64 straight into a buffer of its own: one open and two reads for
// an empty folder, where fdopendir adds a dup, an fstat and two fcntls. The walk runs
// after every command (the file index), so its system calls are per command.
constexpr size_t kListingBuffer = 16 * 1024;

void walk(int directory, const std::string& sandbox_dir, int depth, const FileVisitor& visit,
          FolderObserver* folders) {
  if (folders) folders->entering(directory);
  std::unique_ptr<char[]> listing(new char[kListingBuffer]);
  for (;;) {
    const ssize_t got = ::getdents64(directory, listing.get(), kListingBuffer);
    if (got <= 0) {
      if (got < 0 && folders) folders->left_out();  // a listing cut short
      return;
    }
    for (ssize_t at = 0; at < got;) {
      const auto* entry = reinterpret_cast<const dirent64*>(listing.get() + at);
      at += entry->d_reclen;
      std::string_view name = entry->d_name;
      if (name == "." || name == "..") continue;
      struct stat st;
      if (fstatat(directory, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      std::string sandbox_path = sandbox_dir + "/" + entry->d_name;
      if (S_ISDIR(st.st_mode)) {
        UniqueFd child;
        if (depth < kMaxWalkDepth)
          child = UniqueFd(open_beneath(directory, entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
        if (child.valid())
          walk(child.get(), sandbox_path, depth + 1, visit, folders);
        else if (folders)
          folders->left_out();
      } else if (S_ISREG(st.st_mode) && !is_temp_name(name)) {
        visit(directory, entry->d_name, sandbox_path, st);
      }
    }
  }
}

}  // namespace

void walk_regular_files(int directory, const std::string& sandbox_dir, const FileVisitor& visit,
                        FolderObserver* folders) {
  walk(directory, sandbox_dir, 0, visit, folders);
}

}  // namespace sandboxd::store
