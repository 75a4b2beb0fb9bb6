#include "base/ids.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <system_error>
#include <vector>

#include "base/hex.h"

namespace sandboxd {

void random_bytes(void* out, size_t size) {
  auto* bytes = static_cast<unsigned char*>(out);
  size_t filled = 0;
  while (filled < size) {
    const ssize_t n = ::getrandom(bytes + filled, size - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::system_error(errno, std::generic_category(), "getrandom");
    filled += static_cast<size_t>(n);
  }
}

uint64_t random_below(uint64_t bound) {
  // Values at or past the last whole multiple of `bound` are drawn again: a plain
  // modulo would favour the small numbers.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % bound;
  for (;;) {
    uint64_t value = 0;
    random_bytes(&value, sizeof value);
    if (value < limit) return value % bound;
  }
}

std::string random_chars(std::string_view alphabet, size_t length) {
  // One byte per character; bytes at or past the last whole multiple of the alphabet's
  // size are drawn again so that every character is equally likely.
  const size_t size = alphabet.size();
  const size_t limit = 256 - 256 % size;
  std::string out;
  out.reserve(length);
  unsigned char pool[64];
  while (out.size() < length) {
    const size_t want = std::min(sizeof pool, length - out.size() + length / 4 + 1);
    random_bytes(pool, want);
    for (size_t i = 0; i < want && out.size() < length; ++i)
      if (pool[i] < limit) out.push_back(alphabet[pool[i] % size]);
  }
  return out;
}

std::string random_hex(size_t length) {
  std::vector<unsigned char> bytes((length + 1) / 2);
  random_bytes(bytes.data(), bytes.size());
  std::string hex = hex_encode(bytes.data(), bytes.size());
  hex.resize(length);
  return hex;
}

std::string random_alnum(size_t length) {
  return random_chars("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", length);
}

std::string random_base36(size_t length) {
  return random_chars("0123456789abcdefghijklmnopqrstuvwxyz", length);
}

std::string new_request_id() { return "req_" + random_alnum(24); }

}  // namespace sandboxd
