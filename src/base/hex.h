// Lower-case hex of bytes (digests, tokens).
#pragma once

#include <cstddef>
#include <string>

namespace sandboxd {

inline std::string hex_encode(const unsigned char* bytes, size_t size) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (size_t i = 0; i < size; ++i) {
    out.push_back(kHex[bytes[i] >> 4]);
    out.push_back(kHex[bytes[i] & 15]);
  }
  return out;
}

}  // namespace sandboxd
