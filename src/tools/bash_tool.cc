#include "tools/bash_tool.h"

#include <boost/json.hpp>

namespace sandboxd::tools {

std::variant<BashInput, std::string> parse_bash_input(const boost::json::object& input) {
  BashInput out;
  for (const auto& [key, value] : input) {
    if (key == "command") {
      if (!value.is_string()) return std::string("'command' must be a string");
      out.command = std::string(value.as_string());
      // A shell command is a C string: a NUL cannot be passed on, only cut it short.
      if (out.command.find('\0') != std::string::npos) return std::string("'command' must not contain NUL characters");
    } else if (key == "timeout") {
      if (value.is_int64() && value.as_int64() > 0 && value.as_int64() <= 86400)
        out.timeout_sec = static_cast<int>(value.as_int64());
      else if (value.is_uint64() && value.as_uint64() > 0 && value.as_uint64() <= 86400)
        out.timeout_sec = static_cast<int>(value.as_uint64());
      else
        return std::string("'timeout' must be an integer number of seconds between 1 and 86400");
    } else if (key == "restart") {
      if (!value.is_bool()) return std::string("'restart' must be a boolean");
      out.restart = value.as_bool();
    } else {
      return "unknown parameter '" + std::string(key) + "'";
    }
  }
  if (!input.contains("command") && !out.restart) return std::string("'command' is required");
  return out;
}

boost::json::object bash_result(const runtime::ExecResult& result) {
  return boost::json::object{{"type", "bash_code_execution_result"},
                             {"stdout", to_valid_utf8(result.stdout_text)},
                             {"stderr", to_valid_utf8(result.stderr_text)},
                             {"return_code", result.return_code}};
}

boost::json::object tool_error(std::string_view block_type, std::string_view error_code,
                               std::string_view explanation, bool include_detail) {
  boost::json::object error{{"type", block_type}, {"error_code", error_code}};
  if (include_detail) error["detail"] = boost::json::object{{"code", error_code}, {"explanation", explanation}};
  return error;
}

std::string to_valid_utf8(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  const auto* s = reinterpret_cast<const unsigned char*>(in.data());
  size_t i = 0, n = in.size();
  while (i < n) {
    unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) ok = (s[i + k] & 0xC0) == 0x80;
    if (ok && len > 1) {
      // Reject overlong forms, surrogates and code points past U+10FFFF.
      uint32_t cp = len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
      for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
      ok = !((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
             (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF);
    }
    if (!ok) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(in.substr(i, len));
    i += len;
  }
  return out;
}

}  // namespace sandboxd::tools
