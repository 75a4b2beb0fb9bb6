// Writing one file body atomically: to a temporary file beside the target, fsynced,
// renamed over the target on commit, so readers see the old or the new version, never a
// mix, and a failed or abandoned write leaves the previous version intact. MD5, size and
// MIME type are computed while the body streams through: hashing and writing each run on
// a thread of their own (store/body_pipeline.h), overlapping each other and the reads.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/unique_fd.h"
#include "store/file_io.h"
#include "store/metadata.h"

namespace sandboxd::store {

class FileWriter {
 public:
  virtual ~FileWriter() = default;
  // Appends bytes (copied), blocking while the body's buffers are all in flight. Fails
  // with kNoSpace (the volume is full) or kIo, possibly a few MiB after the bytes that
  // did not fit (writing runs behind).
  virtual FileResult<void> write(const char* data, size_t size) = 0;
  // The same without copying and without blocking, for an I/O thread that reads the
  // body straight into the writer's buffers: lend() is where the next bytes go (empty
  // while every buffer is in flight), fill(n) takes n bytes of it. when_room calls
  // `ready` once `bytes` (up to a buffer, 1 MiB) can be written without blocking: at
  // once if they can, else later from another thread. room() is that count now.
  virtual std::span<char> lend() = 0;
  virtual FileResult<void> fill(size_t size) = 0;
  virtual size_t room() = 0;
  virtual void when_room(size_t bytes, std::function<void()> ready) = 0;
  // Waits for the body's last bytes to be hashed and written, then fsync, rename, fsync
  // the directory (blocking: an I/O thread runs it through run_blocking); returns the record (path, size,
  // etag, mime, mtime, created_at = now; storage left empty). The caller stores it in the metadata.
  virtual FileResult<FileRecord> commit() = 0;
  // Drops the temporary file. Called by the destructor if neither commit nor abort ran.
  virtual void abort() = 0;
  // Extended attributes (full names, e.g. "user.e2b.k") the file gets at commit, before
  // it takes its name: set on the new inode, so they replace the previous version's
  // with the body, in the same rename.
  virtual void set_extended_attributes(std::vector<std::pair<std::string, std::string>> attributes) = 0;
};

// Starts writing `leaf` in `directory` (opened beneath the mount by the caller), owned
// by uid:gid once committed. The temporary file is an O_TMPFILE where the file system
// has them, else a named one starting with kTempPrefix (base/temp_files.h).
FileResult<std::unique_ptr<FileWriter>> begin_atomic_write(UniqueFd directory, std::string leaf,
                                                           std::string sandbox_path, uid_t uid, gid_t gid);

}  // namespace sandboxd::store
