// Random identifiers the service hands out (request ids, message ids). Not secrets:
// anything that guards access (tokens, container secrets) uses getrandom() instead.
#pragma once

#include <string>

namespace sandboxd {

// "req_" + 24 characters of [0-9A-Za-z].
std::string new_request_id();

// `length` characters of [0-9A-Za-z] from a per-thread generator.
std::string random_alnum(size_t length);

// `length` characters of [0-9a-f] from the same generator.
std::string random_hex(size_t length);

}  // namespace sandboxd
