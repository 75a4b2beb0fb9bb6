// The one prefix of every temporary file the server writes into a container's folders
// (uploads being received, editor writes before their rename). Listings and file
// discovery skip these names and the start-up check removes them, so a write cut by a
// crash never shows up as a user's file.
#pragma once

#include <string_view>

namespace sandboxd {

inline constexpr std::string_view kTempPrefix = ".sandboxd-tmp-";

inline bool is_temp_name(std::string_view name) { return name.starts_with(kTempPrefix); }

}  // namespace sandboxd
