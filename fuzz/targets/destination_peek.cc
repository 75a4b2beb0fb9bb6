// The egress path's first look at a sandbox's connection (server/destination_peek.h):
// whatever the bytes, the readers stay inside them, and a host they find is a clean
// name (lower-case letters, digits, '-', '_' and '.', no port), as the policy compares.
// A prefix of the input never finds a different host than the whole of it.
#include <cstdlib>
#include <string>

#include "server/destination_peek.h"

using namespace sandboxd;

static void check(const server::PeekedDestination& found) {
  if (found.state != server::PeekedDestination::State::Found) return;
  if (found.host.empty() || found.host.size() > 253) abort();
  for (char ch : found.host)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.'))
      abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto tls = server::tls_server_name(input);
  const auto http = server::http_host(input);
  check(tls);
  check(http);
  // What was decided on a prefix stays decided: more bytes change no found host.
  const auto tls_prefix = server::tls_server_name(input.substr(0, size / 2));
  if (tls_prefix.state == server::PeekedDestination::State::Found && tls.host != tls_prefix.host) abort();
  return 0;
}
