// Header values made from data the server did not choose (file names, paths, ids, mime
// types, upstream values, error text). Two lines of defence against response header
// injection: handlers pass such data through these encoders, and the transport refuses
// to send any response whose header still holds a byte that could end a field line
// (HttpServer::session: a 500 without detail, the offending header logged). Beast 1.81
// itself writes a field value as given, CR and LF included: this is the only check.
#pragma once

#include <boost/beast/http/fields.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace sandboxd::server {

// The text as one safe header value: printable ASCII stays, '%' and every other byte
// (controls, DEL, bytes >= 0x80) become %XX. Reversible by percent-decoding, so a
// client recovers the exact bytes (X-File-Filename).
std::string header_text(std::string_view text);

// Content-Disposition for a file name (RFC 6266): an ASCII fallback in filename="..."
// (unsafe bytes become '_') and the exact bytes percent-encoded in filename*=UTF-8''.
std::string content_disposition(bool inline_disposition, std::string_view filename);

// True when `value` may be sent as a field value: no CR, LF, NUL or other control
// byte (horizontal tab allowed, RFC 9110 §5.5).
bool safe_header_value(std::string_view value);
bool safe_header_name(std::string_view name);

// The first field of `fields` that must not be sent, as "name" for the log; nullopt
// when every field is safe.
std::optional<std::string> unsafe_header_field(const boost::beast::http::fields& fields);

}  // namespace sandboxd::server
