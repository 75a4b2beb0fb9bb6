// File keys and ids of the Files API (docs/http-api.md).
//   key "data/q3.xlsx"      -> sandbox path /mnt/user-data/uploads/data/q3.xlsx
//   key "outputs/chart.png" -> sandbox path /mnt/user-data/outputs/chart.png
//   file id = base64url (no padding) of the sandbox path.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sandboxd::store {

inline constexpr size_t kMaxKeyLength = 1024;
inline constexpr size_t kMaxSegmentLength = 255;

// Checks a client-supplied key (already percent-decoded once by the HTTP layer).
// Returns an empty string when valid, otherwise the reason, phrased for a 400 message:
// absolute keys, ".." or "." segments (also when still percent-encoded), a trailing
// "/", empty segments, NUL/control characters, keys over kMaxKeyLength or segments
// over kMaxSegmentLength.
std::string validate_key(std::string_view key);

// The sandbox path a valid key maps to.
std::string sandbox_path_for_key(std::string_view key);

// The key of a sandbox path under uploads ("data/q3.xlsx") or outputs
// ("outputs/chart.png"); other paths (workspace) have no key: nullopt.
std::optional<std::string> key_for_sandbox_path(std::string_view sandbox_path);

std::string file_id_for_path(std::string_view sandbox_path);
// Decodes an id; nullopt when it is not base64url or not an absolute path.
std::optional<std::string> path_for_file_id(std::string_view id);

std::string base64url_encode(std::string_view bytes);
std::optional<std::string> base64url_decode(std::string_view text);

}  // namespace sandboxd::store
