#include "base/ids.h"

#include <random>

namespace sandboxd {

std::string random_alnum(size_t length) {
  static constexpr char kAlphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string out;
  out.reserve(length);
  for (size_t i = 0; i < length; ++i) out.push_back(kAlphabet[rng() % 62]);
  return out;
}

std::string new_request_id() { return "req_" + random_alnum(24); }

}  // namespace sandboxd
