#include "store/file_io.h"

#include <cerrno>
#include <stdexcept>

namespace sandboxd::store {

std::ostream& operator<<(std::ostream& out, FileError error) {
  switch (error) {
    case FileError::kNotFound:
      return out << "not found";
    case FileError::kNotAFile:
      return out << "not a file";
    case FileError::kOutsideMounts:
      return out << "outside the mounts";
    case FileError::kNoSpace:
      return out << "no space";
    case FileError::kTooLarge:
      return out << "too large";
    case FileError::kIo:
      return out << "I/O error";
  }
  return out << "unknown file error";
}

FileError error_from_errno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return FileError::kNotFound;
    case EISDIR:
      return FileError::kNotAFile;
    case EXDEV:  // RESOLVE_BENEATH: a symlink or ".." led outside the mount
    case ELOOP:  // RESOLVE_NO_MAGICLINKS, or a symlink where none may be
      return FileError::kOutsideMounts;
    case ENOSPC:
    case EDQUOT:
      return FileError::kNoSpace;
    case EFBIG:
      return FileError::kTooLarge;
    default:
      return FileError::kIo;
  }
}

void throw_exception_from_error(FileError error, const boost::source_location&) {
  throw std::logic_error("FileResult::value() on an error (" + std::to_string(static_cast<int>(error)) + ")");
}

}  // namespace sandboxd::store
