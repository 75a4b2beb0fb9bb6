// File bodies on disk, under a container's host directories (ContainerPaths).
// Every open goes through openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), so a
// symlink that code in the sandbox made never leads outside the container.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/metadata.h"
#include "base/sandbox_paths.h"

namespace sandboxd::store {

// Named temporary files (used when the file system lacks O_TMPFILE, and briefly while
// an O_TMPFILE body is linked in) start with this; sync never records them, and the
// start-up check removes those a crash left.

// The outcome of a file operation that can fail for expected reasons.
enum class FileError { kNone, kNotFound, kNotAFile, kOutsideMounts, kNoSpace, kTooLarge, kIo };

// Writes one file body atomically: to a temporary file beside the target, fsynced,
// renamed over the target on commit (a failed or abandoned write leaves the previous
// version intact). MD5 and size are computed while streaming.
class FileWriter {
 public:
  virtual ~FileWriter() = default;
  // Appends bytes. Returns kNone, kNoSpace (the volume is full) or kIo.
  virtual FileError write(const char* data, size_t size) = 0;
  // fsync, rename, fsync the directory; fills the record (size, etag, mime,
  // created_at = now). The caller stores it in the metadata.
  virtual FileError commit(FileRecord& record) = 0;
  // Drops the temporary file. Called by the destructor if neither commit nor abort ran.
  virtual void abort() = 0;
};

struct OpenedFile {
  int fd = -1;  // owned by the caller
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

class FileStore {
 public:
  // Files written here belong to uid:gid (the agent's host ids), so the sandbox sees
  // them as agent's.
  FileStore(Metadata& metadata, uid_t uid, gid_t gid);

  // Starts writing `sandbox_path` (under uploads or outputs). Creates parent folders.
  std::unique_ptr<FileWriter> begin_write(const ContainerPaths& paths, const std::string& sandbox_path,
                                          FileError& error);

  // Opens a regular file for reading. kNotFound, kNotAFile (a directory, a device, a
  // symlink leaving the mount), kOutsideMounts.
  FileError open_for_read(const ContainerPaths& paths, const std::string& sandbox_path, OpenedFile& out);

  // Brings the metadata in line with the disk for one container: files that code wrote
  // under uploads/ and outputs/ get a record (created_at = now, when first seen),
  // changed ones (size or mtime) get a new etag and size, vanished ones are dropped.
  void sync(const std::string& storage, const ContainerPaths& paths);

  // The record of one file (any mount, workspace included), synced with the disk
  // first; nullopt when the file does not exist.
  std::optional<FileRecord> stat_file(const std::string& storage, const ContainerPaths& paths,
                                      const std::string& sandbox_path);

  // Deletes one file (any mount). kNotFound when absent.
  FileError remove(const std::string& storage, const ContainerPaths& paths, const std::string& sandbox_path);
  // Deletes every upload whose key starts with `key_prefix`; returns the count.
  size_t remove_prefix(const std::string& storage, const ContainerPaths& paths, const std::string& key_prefix);

  // The MIME type: libmagic on the first bytes, refined by the file name's extension
  // when libmagic only says text/plain or application/octet-stream.
  static std::string detect_mime(std::string_view filename, std::string_view head);

 private:
  Metadata& metadata_;
  uid_t uid_;
  gid_t gid_;
};

}  // namespace sandboxd::store
