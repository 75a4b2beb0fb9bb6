// API tokens: `Authorization: Bearer <token>` or `x-api-key: <token>` (what the
// Anthropic SDKs send). A token names its owner; everything is scoped to the owner.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "server/http_server.h"

namespace sandboxd::server {

class TokenAuth {
 public:
  // (token, owner) pairs.
  explicit TokenAuth(const std::vector<std::pair<std::string, std::string>>& tokens);
  // Sets ctx.owner, or answers 401.
  Result<void> authenticate(RequestContext& ctx) const;

 private:
  // Keyed by SHA-256 of the token: lookups do not compare secrets byte by byte.
  std::map<std::string, std::string> owners_by_digest_;
};

std::string sha256_hex(std::string_view data);

// The token a request presents (x-api-key, else the first of the other credential
// headers the server accepts, HttpServer::accept_credential_header, else a Bearer
// authorization); empty if none.
std::string_view presented_token(const RequestContext& ctx);

}  // namespace sandboxd::server
