#include "store/keys.h"

#include <array>
#include <cstdint>

#include "base/sandbox_paths.h"

namespace sandboxd::store {
namespace {

constexpr std::string_view kOutputsKeyPrefix = "outputs/";

// Clients and proxies may percent-decode a key more than once before a later layer
// looks at it, so "." and ".." must be refused in every decoded form. A few rounds
// reach the fixed point of any realistic double/triple encoding.
constexpr int kMaxDecodeRounds = 8;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// One round of percent-decoding; malformed escapes stay as they are.
std::string percent_decode_once(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      int high = hex_value(text[i + 1]);
      int low = hex_value(text[i + 2]);
      if (high >= 0 && low >= 0) {
        out.push_back(static_cast<char>(high * 16 + low));
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

// "" when no segment of `key` is "." or "..", otherwise the reason.
std::string check_dot_segments(std::string_view key) {
  size_t start = 0;
  while (start <= key.size()) {
    size_t slash = key.find('/', start);
    size_t end = slash == std::string_view::npos ? key.size() : slash;
    std::string_view segment = key.substr(start, end - start);
    if (segment == "..") return "key must not contain '..' segments";
    if (segment == ".") return "key must not contain '.' segments";
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return "";
}

// Checks the raw key's segments: empty ones, over-long ones, dot segments.
std::string check_segments(std::string_view key) {
  size_t start = 0;
  for (;;) {
    size_t slash = key.find('/', start);
    size_t end = slash == std::string_view::npos ? key.size() : slash;
    if (end == start) return "key must not contain empty segments";
    if (end - start > kMaxSegmentLength) {
      return "key segment is too long (max " + std::to_string(kMaxSegmentLength) + " bytes)";
    }
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return check_dot_segments(key);
}

std::string check_encoded_dot_segments(std::string_view key) {
  std::string current(key);
  for (int round = 0; round < kMaxDecodeRounds; ++round) {
    std::string decoded = percent_decode_once(current);
    if (decoded == current) break;
    if (auto reason = check_dot_segments(decoded); !reason.empty()) return reason;
    current = std::move(decoded);
  }
  return "";
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && text.substr(0, prefix.size()) == prefix;
}

// The part of `path` below `mount` ("" when `path` is not strictly below it).
std::string_view below_mount(std::string_view path, std::string_view mount) {
  if (path.size() <= mount.size() + 1 || !starts_with(path, mount) || path[mount.size()] != '/') return {};
  return path.substr(mount.size() + 1);
}

constexpr char kBase64UrlAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

constexpr std::array<int8_t, 256> make_base64url_table() {
  std::array<int8_t, 256> table{};
  for (auto& entry : table) entry = -1;
  for (int i = 0; i < 64; ++i)
    table[static_cast<unsigned char>(kBase64UrlAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}

constexpr auto kBase64UrlTable = make_base64url_table();

}  // namespace

std::string validate_key(std::string_view key) {
  if (key.empty()) return "key must not be empty";
  if (key.size() > kMaxKeyLength) return "key is too long (max " + std::to_string(kMaxKeyLength) + " bytes)";
  for (char c : key) {
    if (c == '\0') return "key must not contain NUL characters";
    if (is_control(static_cast<unsigned char>(c))) return "key must not contain control characters";
  }
  if (key.front() == '/') return "key must be relative";
  if (key.back() == '/') return "key must not end with '/'";
  if (auto reason = check_segments(key); !reason.empty()) return reason;
  return check_encoded_dot_segments(key);
}

std::string sandbox_path_for_key(std::string_view key) {
  if (starts_with(key, kOutputsKeyPrefix)) {
    return std::string(kOutputsMount) + "/" + std::string(key.substr(kOutputsKeyPrefix.size()));
  }
  return std::string(kUploadsMount) + "/" + std::string(key);
}

std::optional<std::string> key_for_sandbox_path(std::string_view sandbox_path) {
  if (auto relative = below_mount(sandbox_path, kUploadsMount); !relative.empty()) {
    return std::string(relative);
  }
  if (auto relative = below_mount(sandbox_path, kOutputsMount); !relative.empty()) {
    return std::string(kOutputsKeyPrefix) + std::string(relative);
  }
  return std::nullopt;
}

std::string file_id_for_path(std::string_view sandbox_path) { return base64url_encode(sandbox_path); }

std::optional<std::string> path_for_file_id(std::string_view id) {
  auto path = base64url_decode(id);
  if (!path || path->empty() || path->front() != '/' || path->find('\0') != std::string::npos)
    return std::nullopt;
  return path;
}

std::string base64url_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t group = static_cast<unsigned char>(bytes[i]) << 16 |
                     static_cast<unsigned char>(bytes[i + 1]) << 8 | static_cast<unsigned char>(bytes[i + 2]);
    out.push_back(kBase64UrlAlphabet[(group >> 18) & 63]);
    out.push_back(kBase64UrlAlphabet[(group >> 12) & 63]);
    out.push_back(kBase64UrlAlphabet[(group >> 6) & 63]);
    out.push_back(kBase64UrlAlphabet[group & 63]);
  }
  size_t rest = bytes.size() - i;
  if (rest == 1) {
    uint32_t group = static_cast<unsigned char>(bytes[i]) << 16;
    out.push_back(kBase64UrlAlphabet[(group >> 18) & 63]);
    out.push_back(kBase64UrlAlphabet[(group >> 12) & 63]);
  } else if (rest == 2) {
    uint32_t group = static_cast<unsigned char>(bytes[i]) << 16 | static_cast<unsigned char>(bytes[i + 1])
                                                                      << 8;
    out.push_back(kBase64UrlAlphabet[(group >> 18) & 63]);
    out.push_back(kBase64UrlAlphabet[(group >> 12) & 63]);
    out.push_back(kBase64UrlAlphabet[(group >> 6) & 63]);
  }
  return out;
}

// Strict: no padding, no characters outside the url-safe alphabet, and the unused
// low bits of the last character must be zero, so every byte string has exactly one id.
std::optional<std::string> base64url_decode(std::string_view text) {
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3 + 2);
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    int value = kBase64UrlTable[static_cast<unsigned char>(c)];
    if (value < 0) return std::nullopt;
    buffer = (buffer << 6) | static_cast<uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xff));
    }
  }
  if (bits > 0 && (buffer & ((1u << bits) - 1)) != 0) return std::nullopt;
  return out;
}

}  // namespace sandboxd::store
