// The MIME type of a file body, from its name and first bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sandboxd::store {

// How many leading bytes detect_mime looks at.
inline constexpr size_t kMimeHeadBytes = 4096;

// The MIME type: libmagic on the first bytes, refined by the file name's extension
// when libmagic only says text/plain or application/octet-stream.
std::string detect_mime(std::string_view filename, std::string_view head);

}  // namespace sandboxd::store
