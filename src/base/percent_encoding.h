// Percent-encoding (RFC 3986): every byte but the unreserved ones (letters, digits,
// "-._~") as %XX, for a URI path segment or query value built from names that code in a
// sandbox or a client chose. The decoding side is the router's (server/router.h).
#pragma once

#include <string>
#include <string_view>

namespace sandboxd {

// `keep_slash`: "/" stays as it is (a path whose segments are encoded one by one).
std::string percent_encode(std::string_view text, bool keep_slash = false);

}  // namespace sandboxd
