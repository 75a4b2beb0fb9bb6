#include "server/auth.h"

#include <openssl/evp.h>

#include <algorithm>

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
  // The first of the server's credential headers that the request has (one pass over
  // its fields, not a lookup of each name): x-api-key, then those a surface added for its
  // SDKs (HttpServer::accept_credential_header); a bearer Authorization last.
  const auto names = ctx.credential_headers.first(
      std::min(ctx.credential_headers.size(), HttpServer::kMaxCredentialHeaders));
  // Of each name its first field counts, as a lookup would find it (and an empty one
  // counts as absent).
  std::string_view found[HttpServer::kMaxCredentialHeaders];
  bool seen[HttpServer::kMaxCredentialHeaders] = {};
  std::string_view authorization;
  bool authorization_seen = false;
  for (const auto& field : ctx.header()) {
    const std::string_view value(field.value().data(), field.value().size());
    if (field.name() == http::field::authorization) {
      if (!authorization_seen) authorization = value;
      authorization_seen = true;
      continue;
    }
    const std::string_view name(field.name_string().data(), field.name_string().size());
    for (size_t i = 0; i < names.size(); ++i)
      if (!seen[i] && beast::iequals(name, names[i])) {
        found[i] = value;
        seen[i] = true;
      }
  }
  for (size_t i = 0; i < names.size(); ++i)
    if (!found[i].empty()) return found[i];
  if (authorization.size() > 7 && beast::iequals(authorization.substr(0, 7), "Bearer "))
    return authorization.substr(7);
  return {};
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
