// Every random name and secret the server makes comes from here: ids it hands out
// (requests, messages, containers, skills, tool calls, sessions), names of temporary
// files and bucket objects, and what guards access (tokens, a container's token secret).
// All of it is drawn from getrandom(2), so one function serves names that must not
// collide across the replicas of a cluster and secrets that must not be guessed alike.
// The characters are uniform over the alphabet (no modulo bias).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sandboxd {

// Fills `size` bytes from the kernel's CSPRNG. Throws std::system_error only on a
// kernel without getrandom(2): nothing can go on without it.
void random_bytes(void* out, size_t size);

// A number uniform in [0, bound); bound > 0.
uint64_t random_below(uint64_t bound);

// `length` characters drawn from `alphabet` (at most 256 characters).
std::string random_chars(std::string_view alphabet, size_t length);

// `length` characters of [0-9a-f].
std::string random_hex(size_t length);

// `length` characters of [0-9A-Za-z].
std::string random_alnum(size_t length);

// `length` characters of [0-9a-z].
std::string random_base36(size_t length);

// "req_" + 24 characters of [0-9A-Za-z].
std::string new_request_id();

}  // namespace sandboxd
