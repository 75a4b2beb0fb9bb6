// The vocabulary of the code that reads and writes file bodies (FileStore, the atomic
// writer): the expected failures, as values, and the small helpers both need.
#pragma once

#include <sys/stat.h>

#include <boost/system/result.hpp>
#include <cstdint>
#include <ostream>

namespace sandboxd::store {

// Why a file operation failed for an expected reason. The file service turns each into
// the documented status (service/container_files.h, file_error(); a surface with a
// wording of its own, E2B's, passes it).
enum class FileError { kNotFound, kNotAFile, kOutsideMounts, kNoSpace, kTooLarge, kIo };

std::ostream& operator<<(std::ostream& out, FileError error);

// A value or the FileError saying why there is none.
template <typename T>
using FileResult = boost::system::result<T, FileError>;

// The usual meaning of an errno for callers; operations adjust the cases where their
// header documents something else.
FileError error_from_errno(int err);

inline int64_t mtime_ns_of(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

// Lets FileResult<T>::value() throw; callers test has_value()/error() instead.
[[noreturn]] void throw_exception_from_error(FileError error, const boost::source_location& loc);

}  // namespace sandboxd::store
