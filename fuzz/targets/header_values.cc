// Header values from data the server did not choose: whatever the bytes, the encoders'
// output may be sent as a field value, and the text repair always yields UTF-8.
#include <cstdlib>
#include <string>

#include "base/utf8.h"
#include "server/header_values.h"

using namespace sandboxd;

static bool valid_utf8(const std::string& s) { return to_valid_utf8(s) == s; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  if (!server::safe_header_value(server::header_text(input))) abort();
  if (!server::safe_header_value(server::content_disposition(size % 2 == 0, input))) abort();
  std::string repaired = to_valid_utf8(input);
  if (!valid_utf8(repaired)) abort();  // repair is idempotent: its output is valid
  return 0;
}
