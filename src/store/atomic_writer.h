// Writing one file body atomically: to a temporary file beside the target, fsynced,
// renamed over the target on commit, so readers see the old or the new version, never a
// mix, and a failed or abandoned write leaves the previous version intact. MD5, size and
// MIME type are computed while the body streams through.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "base/unique_fd.h"
#include "store/file_io.h"
#include "store/metadata.h"

namespace sandboxd::store {

class FileWriter {
 public:
  virtual ~FileWriter() = default;
  // Appends bytes. Fails with kNoSpace (the volume is full) or kIo.
  virtual FileResult<void> write(const char* data, size_t size) = 0;
  // fsync, rename, fsync the directory; returns the record (path, size, etag, mime,
  // mtime, created_at = now; storage left empty). The caller stores it in the metadata.
  virtual FileResult<FileRecord> commit() = 0;
  // Drops the temporary file. Called by the destructor if neither commit nor abort ran.
  virtual void abort() = 0;
};

// Starts writing `leaf` in `directory` (opened beneath the mount by the caller), owned
// by uid:gid once committed. The temporary file is an O_TMPFILE where the file system
// has them, else a named one starting with kTempPrefix (base/temp_files.h).
FileResult<std::unique_ptr<FileWriter>> begin_atomic_write(UniqueFd directory, std::string leaf,
                                                           std::string sandbox_path, uid_t uid, gid_t gid);

}  // namespace sandboxd::store
