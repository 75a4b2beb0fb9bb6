// A streaming tar reader: POSIX ustar with GNU long names and links ('L', 'K') and pax
// extended headers ('x' for one entry, 'g' for all that follow: path, linkpath, size).
// It only parses; what an entry may do to a file system is the extractor's business.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "images/stream.h"

namespace sandboxd::images {

enum class EntryType {
  kFile,
  kHardlink,
  kSymlink,
  kCharDevice,
  kBlockDevice,
  kDirectory,
  kFifo,
  kUnsupported
};

struct TarEntry {
  std::string path;         // as in the archive (not cleaned)
  std::string link_target;  // hardlinks and symlinks
  EntryType type = EntryType::kFile;
  char typeflag = '0';  // the raw flag, for messages about unsupported entries
  uint32_t mode = 0;    // permission bits and setuid/setgid/sticky, as stored
  uint64_t size = 0;    // bytes of data that follow (files only)
  int64_t mtime = 0;
};

class TarReader {
 public:
  // `what` names the archive in messages ("layer 1", "the image tarball").
  TarReader(Source& source, std::string what);

  // The next entry; false at the end of the archive. Its data must be read (read())
  // or is skipped by the next call. Throws ImageError on a corrupt or truncated archive.
  bool next(TarEntry& entry);
  // Reads the current entry's data; 0 at its end.
  size_t read(char* buf, size_t n);

  // The longest path or link target accepted from a GNU or pax record.
  static constexpr size_t kMaxLongName = 64 * 1024;

 private:
  void skip_rest_of_entry();
  std::string read_record_data(uint64_t size, const char* kind);
  void read_block(char* block, bool at_header);
  static void apply_pax(const std::string& records, std::map<std::string, std::string>& into,
                        const std::string& what);

  Source& source_;
  std::string what_;
  uint64_t remaining_ = 0;  // data bytes of the current entry not yet read
  uint64_t padding_ = 0;    // zero bytes up to the next 512-byte block
  bool ended_ = false;
  uint64_t entries_ = 0;
  std::map<std::string, std::string> global_pax_;
};

}  // namespace sandboxd::images
