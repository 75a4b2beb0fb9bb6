// Standard base64 (RFC 4648 §4, with padding): file bodies inside JSON messages (MCP's
// blob contents and upload arguments). File ids use base64url instead (store/keys.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sandboxd {

std::string base64_encode(std::string_view bytes);
// nullopt for anything but canonical padded base64 (no whitespace, no missing padding).
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace sandboxd
