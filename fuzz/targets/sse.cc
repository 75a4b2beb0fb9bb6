// Server-sent events from the upstream, fed in pieces whose sizes the input chooses.
#include <string>

#include "model/sse.h"

using namespace sandboxd::model;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  size_t piece = data[0] % 32 + 1;
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  size_t events = 0;
  SseParser parser([&](const SseEvent& event) { events += event.event.size() + event.data.size(); });
  while (!body.empty()) {
    size_t n = std::min(piece, body.size());
    parser.feed(body.substr(0, n));
    body.remove_prefix(n);
  }
  (void)parser.pending_bytes();
  return 0;
}
