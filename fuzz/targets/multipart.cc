// A multipart/form-data upload: the Content-Type line, then the body fed in pieces whose
// sizes the input also chooses (a boundary or a header split across socket reads).
#include <string>

#include "store/multipart.h"

using sandboxd::store::MultipartParser;
using sandboxd::store::PartHeaders;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  auto newline = input.find('\n');
  if (newline == std::string_view::npos || newline + 1 >= input.size()) return 0;
  auto boundary = MultipartParser::boundary_from_content_type(input.substr(0, newline));
  if (!boundary) return 0;
  std::string_view body = input.substr(newline + 1);
  size_t piece = static_cast<unsigned char>(body[0]) % 64 + 1;
  body.remove_prefix(1);
  size_t parts = 0, bytes = 0;
  MultipartParser parser(
      *boundary,
      [&](const PartHeaders& part) {
        ++parts;
        bytes += part.name.size() + part.filename.value_or("").size();
        return true;
      },
      [&](std::string_view chunk) {
        bytes += chunk.size();
        return true;
      },
      [&]() { return true; });
  while (!body.empty()) {
    size_t n = std::min(piece, body.size());
    if (!parser.feed(body.substr(0, n))) break;
    body.remove_prefix(n);
  }
  (void)parser.finished();
  return 0;
}
