// Applies image layers (tar streams) onto a root directory, safely against hostile
// archives: every path is resolved inside the root with openat2(RESOLVE_IN_ROOT), so a
// symlink from an earlier entry or layer ("/etc", "../../..") is followed as the image
// would see it, never out to the host; entries with ".." are refused; device nodes and
// FIFOs are skipped; setuid, setgid and sticky bits are dropped from files; everything
// is owned by the extracting user (root), whatever uids the archive names; hardlinks
// reach only files already in the image. Whiteouts (".wh.NAME", ".wh..wh..opq") delete
// what lower layers put there.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "images/tar_reader.h"

namespace sandboxd::images {

struct ExtractReport {
  uint64_t files = 0, directories = 0, symlinks = 0, hardlinks = 0, whiteouts = 0, bytes = 0;
  uint64_t skipped_count = 0;
  std::vector<std::string> skipped;  // "PATH: reason", the first kMaxSkippedListed
  static constexpr size_t kMaxSkippedListed = 200;
  void skip(const std::string& path, const std::string& reason);
};

class LayerExtractor {
 public:
  // `root_fd`: the image root, an open directory (not owned). `what` names the layer.
  LayerExtractor(int root_fd, ExtractReport& report, std::string what);
  // Reads the whole archive and applies it. Throws ImageError or SyscallError.
  void apply(TarReader& tar);

 private:
  void apply_entry(TarReader& tar, const TarEntry& entry);
  void write_file(TarReader& tar, int parent_fd, const std::string& name, const TarEntry& entry,
                  const std::string& rel);
  int root_fd_;
  ExtractReport& report_;
  std::string what_;
  std::set<std::string> written_;  // paths this layer made: an opaque marker keeps them
};

// What ".." does when a path is split into components.
enum class DotDot {
  kRefuse,         // an entry's own path: ".." is refused outright
  kClampAtRoot,    // a symlink's target as the image sees it: ".." stops at the root
  kFailAboveRoot,  // a member named by another: ".." climbs, but not above the start
};
// Appends the components of `path` to `parts` ("./a//b/" -> a, b; a leading "/" adds
// nothing, as GNU tar drops it), applying `dot_dot`. False when that refuses the path.
bool split_path(const std::string& path, DotDot dot_dot, std::vector<std::string>& parts);
// split_path(path, kRefuse) into an emptied `parts`.
bool clean_path(const std::string& path, std::vector<std::string>& parts);
// The first `count` components joined with '/' (all of them by default).
std::string join_path(const std::vector<std::string>& parts, size_t count = std::string::npos);

// Removes `name` under `dir_fd` and, for a directory, everything below it, without
// following symlinks. A missing name is not an error.
void remove_tree(int dir_fd, const std::string& name);

// Sum of the sizes of the regular files under a directory (hardlinked files counted
// once), without following symlinks.
uint64_t tree_size(const std::string& dir);

}  // namespace sandboxd::images
