#include "e2b/api/connect_envelope.h"

#include <boost/json.hpp>
#include <string>

namespace sandboxd::e2b::connect_rpc {

namespace json = boost::json;

Result<json::object> parse_message(std::string_view text) {
  boost::system::error_code ec;
  json::value value = json::parse(text, ec);
  if (ec) return ApiError::invalid_request("The request message is not valid JSON: " + ec.message());
  if (!value.is_object()) return ApiError::invalid_request("The request message must be a JSON object");
  return std::move(value.as_object());
}

Result<json::object> parse_envelope(std::string_view body) {
  if (body.size() < 5) return ApiError::invalid_request("The request is not an enveloped Connect message");
  const uint8_t flags = static_cast<uint8_t>(body[0]);
  const uint32_t length =
      (uint32_t{static_cast<uint8_t>(body[1])} << 24) | (uint32_t{static_cast<uint8_t>(body[2])} << 16) |
      (uint32_t{static_cast<uint8_t>(body[3])} << 8) | uint32_t{static_cast<uint8_t>(body[4])};
  if (flags & kCompressedFlag) return ApiError::invalid_request("Compressed messages are not accepted");
  if (flags & ~kCompressedFlag)
    return ApiError::invalid_request("The request's envelope has unknown flags (" + std::to_string(flags) +
                                     ")");
  if (length != body.size() - 5)
    return ApiError::invalid_request("The request's envelope says " + std::to_string(length) + " bytes but " +
                                     std::to_string(body.size() - 5) + " follow (one message is expected)");
  return parse_message(body.substr(5));
}

}  // namespace sandboxd::e2b::connect_rpc
