#include "server/auth.h"

#include <openssl/evp.h>

#include "base/hex.h"

namespace sandboxd::server {

std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr);
  return hex_encode(digest, length);
}

TokenAuth::TokenAuth(const std::vector<std::pair<std::string, std::string>>& tokens) {
  for (const auto& [token, owner] : tokens) owners_by_digest_[sha256_hex(token)] = owner;
}

std::string_view presented_token(const RequestContext& ctx) {
  std::string_view token = ctx.header_value("x-api-key");
  // E2B's SDKs present their access token so on every call to a sandbox (api/e2b_common.h).
  if (token.empty()) token = ctx.header_value("x-access-token");
  // The code interpreter's context calls carry only the traffic token (the same one).
  if (token.empty()) token = ctx.header_value("e2b-traffic-access-token");
  if (token.empty()) {
    std::string_view authorization = ctx.header_value(http::field::authorization);
    if (authorization.size() > 7 && beast::iequals(authorization.substr(0, 7), "Bearer "))
      token = authorization.substr(7);
  }
  return token;
}

Result<void> TokenAuth::authenticate(RequestContext& ctx) const {
  std::string_view token = presented_token(ctx);
  if (token.empty())
    return ApiError::authentication(
        "Missing API token: send 'Authorization: Bearer <token>' or 'x-api-key: <token>'");
  if (ctx.connection)
    if (const std::string* owner = ctx.connection->remembered_owner(token)) {
      ctx.owner = *owner;
      return {};
    }
  auto it = owners_by_digest_.find(sha256_hex(token));
  if (it == owners_by_digest_.end()) return ApiError::authentication("Invalid API token");
  ctx.owner = it->second;
  if (ctx.connection) ctx.connection->remember_token(token, it->second);
  return {};
}

}  // namespace sandboxd::server
