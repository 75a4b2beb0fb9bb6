// A Connect-RPC server-streaming request: the 5-byte envelope (flags, big-endian
// length) and the JSON message it frames (e2b/api/connect_envelope.h).
#include <boost/json.hpp>
#include <string>

#include "e2b/api/connect_envelope.h"

using namespace sandboxd::e2b;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto message = connect_rpc::parse_envelope(body);
  // Accepted only when the header's length is exactly what follows, with no flag set.
  if (message) {
    if (size < 5 || data[0] != 0) __builtin_trap();
    const uint32_t length =
        (uint32_t{data[1]} << 24) | (uint32_t{data[2]} << 16) | (uint32_t{data[3]} << 8) | data[4];
    if (length != size - 5) __builtin_trap();
    (void)boost::json::serialize(*message);
  }
  return 0;
}
