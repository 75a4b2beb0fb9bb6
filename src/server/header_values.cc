#include "server/header_values.h"

namespace sandboxd::server {
namespace {

constexpr char kHex[] = "0123456789ABCDEF";

void percent_encode(std::string& out, unsigned char c) {
  out.push_back('%');
  out.push_back(kHex[c >> 4]);
  out.push_back(kHex[c & 15]);
}

// RFC 5987 attr-char: the bytes that may stand for themselves in filename*.
bool attr_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '!' || c == '#' ||
         c == '$' || c == '&' || c == '+' || c == '-' || c == '.' || c == '^' || c == '_' || c == '`' ||
         c == '|' || c == '~';
}

// RFC 9110 token characters (field names).
bool token_char(unsigned char c) { return attr_char(c) || c == '\'' || c == '*'; }

}  // namespace

std::string header_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '%')
      out.push_back(static_cast<char>(c));
    else
      percent_encode(out, c);
  }
  return out;
}

std::string content_disposition(bool inline_disposition, std::string_view filename) {
  std::string ascii, encoded;
  for (unsigned char c : filename) {
    ascii.push_back(c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '%' ? static_cast<char>(c) : '_');
    if (attr_char(c))
      encoded.push_back(static_cast<char>(c));
    else
      percent_encode(encoded, c);
  }
  return std::string(inline_disposition ? "inline" : "attachment") + "; filename=\"" + ascii +
         "\"; filename*=UTF-8''" + encoded;
}

bool safe_header_value(std::string_view value) {
  for (unsigned char c : value)
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  return true;
}

bool safe_header_name(std::string_view name) {
  if (name.empty()) return false;
  for (unsigned char c : name)
    if (!token_char(c)) return false;
  return true;
}

std::optional<std::string> unsafe_header_field(const boost::beast::http::fields& fields) {
  for (const auto& field : fields) {
    std::string_view name(field.name_string().data(), field.name_string().size());
    std::string_view value(field.value().data(), field.value().size());
    if (!safe_header_name(name) || !safe_header_value(value)) return header_text(name.substr(0, 64));
  }
  return std::nullopt;
}

}  // namespace sandboxd::server
