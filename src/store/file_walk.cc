#include "store/file_walk.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <string_view>

#include "base/sandbox_paths.h"
#include "base/temp_files.h"
#include "base/unique_fd.h"

namespace sandboxd::store {
namespace {

constexpr int kMaxWalkDepth = 128;

void walk(int directory, const std::string& sandbox_dir, int depth, const FileVisitor& visit) {
  int listing_fd = fcntl(directory, F_DUPFD_CLOEXEC, 0);
  if (listing_fd < 0) return;
  DIR* listing = fdopendir(listing_fd);
  if (!listing) {
    ::close(listing_fd);
    return;
  }
  while (dirent* entry = readdir(listing)) {
    std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (fstatat(directory, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    std::string sandbox_path = sandbox_dir + "/" + entry->d_name;
    if (S_ISDIR(st.st_mode)) {
      if (depth >= kMaxWalkDepth) continue;
      UniqueFd child(open_beneath(directory, entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
      if (child.valid()) walk(child.get(), sandbox_path, depth + 1, visit);
    } else if (S_ISREG(st.st_mode) && !is_temp_name(name)) {
      visit(directory, entry->d_name, sandbox_path, st);
    }
  }
  closedir(listing);
}

}  // namespace

void walk_regular_files(int directory, const std::string& sandbox_dir, const FileVisitor& visit) {
  walk(directory, sandbox_dir, 0, visit);
}

}  // namespace sandboxd::store
