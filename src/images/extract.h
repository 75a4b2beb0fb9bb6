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

// Splits an archive path into clean components ("./a//b/" -> a, b; a leading "/" is
// dropped, as GNU tar does). False when it has a ".." component (refused).
bool clean_path(const std::string& path, std::vector<std::string>& parts);

// Removes `name` under `dir_fd` and, for a directory, everything below it, without
// following symlinks. A missing name is not an error.
void remove_tree(int dir_fd, const std::string& name);

// Sum of the sizes of the regular files under a directory (hardlinked files counted
// once), without following symlinks.
uint64_t tree_size(const std::string& dir);

}  // namespace sandboxd::images
