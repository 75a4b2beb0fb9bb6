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

std::string new_request_id() {
  // Every request gets one: its random bytes come from a thread's pool refilled a few
  // kilobytes at a time, not from a getrandom call per request.
  static constexpr std::string_view kAlphabet =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  static constexpr size_t kLimit = 256 - 256 % kAlphabet.size();
  thread_local unsigned char pool[4096];
  thread_local size_t used = sizeof pool;
  std::string id = "req_";
  id.reserve(4 + 24);
  while (id.size() < 4 + 24) {
    if (used == sizeof pool) {
      random_bytes(pool, sizeof pool);
      used = 0;
    }
    const unsigned char byte = pool[used++];
    if (byte < kLimit) id.push_back(kAlphabet[byte % kAlphabet.size()]);
  }
  return id;
}

}  // namespace sandboxd
