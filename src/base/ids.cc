#include "base/ids.h"

#include <random>
#include <string_view>

namespace sandboxd {

namespace {

std::string random_of(std::string_view alphabet, size_t length) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string out;
  out.reserve(length);
  for (size_t i = 0; i < length; ++i) out.push_back(alphabet[rng() % alphabet.size()]);
  return out;
}

}  // namespace

std::string random_alnum(size_t length) {
  return random_of("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", length);
}

std::string random_hex(size_t length) { return random_of("0123456789abcdef", length); }

std::string new_request_id() { return "req_" + random_alnum(24); }

}  // namespace sandboxd
