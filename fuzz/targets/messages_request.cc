// A /v1/messages request body: validation, then what is built from a valid one (the
// upstream body and the translated history).
#include <boost/json.hpp>
#include <string>

#include "model/messages_request.h"

using namespace sandboxd;

static bool any_container_id(std::string_view id) { return !id.empty() && id.size() <= 64; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  boost::system::error_code ec;
  auto value = boost::json::parse(std::string_view(reinterpret_cast<const char*>(data), size), ec);
  if (ec || !value.is_object()) return 0;
  auto request = model::parse_messages_request(value.as_object(), any_container_id);
  if (!request) return 0;
  auto upstream = model::upstream_body(*request, "upstream-model", request->stream);
  (void)boost::json::serialize(upstream);
  return 0;
}
