// UTF-8 checks shared by everything that turns bytes from outside (command output, file
// contents, file names made in a sandbox) into JSON text, which must be valid UTF-8.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sandboxd {

// Length of the well-formed UTF-8 sequence that starts at text[i], or 0 if the bytes
// there are not one (stray continuation, overlong form, surrogate, beyond U+10FFFF, or
// cut short by the end of `text`).
size_t utf8_sequence_length(std::string_view text, size_t i);

// The text with every byte that does not start a well-formed sequence replaced by
// U+FFFD (one per byte, as the contract's "bytes that are not valid UTF-8 reach JSON as
// U+FFFD"). Valid input comes back unchanged.
std::string to_valid_utf8(std::string_view text);

// True when every byte belongs to a well-formed sequence.
bool is_valid_utf8(std::string_view text);

}  // namespace sandboxd
