// The credentials code in a sandbox gets to call the model as its owner: a token scoped
// to the container and the nesting depth, derived from a per-container secret that
// never leaves the server (so it cannot be turned into the owner's token), and the
// environment that hands it to the SDKs. The surface that accepts these tokens is
// api/sandbox_network.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ops/config.h"
#include "service/container_service.h"

namespace sandboxd::service {

inline constexpr std::string_view kScopedTokenPrefix = "sbx-scoped-";

// The HTTP proxy the server runs in a sandbox whose egress policy allows something
// (api/sandbox_network.h): CONNECT and absolute http:// requests, each destination
// checked by the policy. Commands get it as HTTP_PROXY and HTTPS_PROXY.
inline constexpr std::string_view kEgressProxyAddress = "127.0.2.3";
inline constexpr uint16_t kEgressProxyPort = 3128;

// 32 random bytes (hex) from the kernel's CSPRNG: a container's token secret.
std::string new_api_secret();

// The token code in `container` gets, for requests of nesting depth `depth`.
std::string scoped_token(const Container& container, int depth);

// The depth a scoped token ("sbx-scoped-<depth>-<hex>") claims, or -1 when it is not
// one (the claim is checked by recomputing the token).
int scoped_token_depth(std::string_view token);

// ANTHROPIC_BASE_URL, ANTHROPIC_AUTH_TOKEN and ANTHROPIC_MODEL for a command run by a
// request of nesting depth `depth` (its own calls are depth + 1); with an egress policy
// that allows something, the proxy's HTTP_PROXY/HTTPS_PROXY (both cases) and NO_PROXY
// for what is reached without it (the API, the services, the cluster's names).
std::vector<std::string> sandbox_env(const ops::Config& config, const Container& container, int depth);

}  // namespace sandboxd::service
