#include "service/sandbox_credentials.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cerrno>
#include <charconv>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "base/hex.h"
#include "base/ids.h"

namespace sandboxd::service {

std::string new_api_secret() { return random_hex(64); }

namespace {

std::string derive_scoped_token(const Container& container, int depth) {
  // Bound to the owner, the container and the depth, under a secret of this container
  // object: a container deleted and made again under the same id gets a new secret.
  const std::string message = container.owner + '\n' + container.id + '\n' + std::to_string(depth);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), container.api_secret.data(), static_cast<int>(container.api_secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &length);
  return std::string(kScopedTokenPrefix) + std::to_string(depth) + "-" + hex_encode(mac, length);
}

}  // namespace

std::string scoped_token(const Container& container, int depth) {
  if (depth != 1) return derive_scoped_token(container, depth);
  // Depth 1 is what every command of a direct call gets: its HMAC is kept by secret
  // (each container's own) instead of computed for every command. Bounded: past the
  // bound the kept ones go and are derived again as they are used.
  static constexpr size_t kKept = 4096;
  static std::mutex mutex;
  static std::unordered_map<std::string, std::string> by_secret;
  {
    std::lock_guard lock(mutex);
    if (auto it = by_secret.find(container.api_secret); it != by_secret.end()) return it->second;
  }
  std::string token = derive_scoped_token(container, 1);
  std::lock_guard lock(mutex);
  if (by_secret.size() >= kKept) by_secret.clear();
  by_secret.emplace(container.api_secret, token);
  return token;
}

std::vector<std::string> sandbox_env(const ops::Config& config, const Container& container, int depth) {
  std::string model = "default";
  if (auto it = config.model_names.find("default"); it != config.model_names.end()) model = it->second;
  // The SDKs append /v1/messages to the base URL: that is sandboxd's messages endpoint.
  std::vector<std::string> env{std::string("ANTHROPIC_BASE_URL=http://") + ops::kApiHostName + "/api/gpt",
                               "ANTHROPIC_AUTH_TOKEN=" + scoped_token(container, depth + 1),
                               "ANTHROPIC_MODEL=" + model};
  if (!config.egress_policy().closed()) {
    const std::string proxy =
        "http://" + std::string(kEgressProxyAddress) + ":" + std::to_string(kEgressProxyPort);
    // Names the sandbox reaches directly: the proxy would refuse them (they are no
    // outside destinations), so tools must not send them there.
    std::string direct = std::string("localhost,127.0.0.1,") + ops::kApiHostName + ",.svc,.cluster.local";
    for (const auto& service : config.internal_services) direct += "," + service.name;
    for (const char* name : {"HTTP_PROXY=", "HTTPS_PROXY=", "http_proxy=", "https_proxy="})
      env.push_back(name + proxy);
    env.push_back("NO_PROXY=" + direct);
    env.push_back("no_proxy=" + direct);
  }
  return env;
}

int scoped_token_depth(std::string_view token) {
  if (!token.starts_with(kScopedTokenPrefix)) return -1;
  token.remove_prefix(kScopedTokenPrefix.size());
  int depth = -1;
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), depth);
  if (ec != std::errc() || end == token.data() + token.size() || *end != '-' || depth < 1 || depth > 100)
    return -1;
  return depth;
}

}  // namespace sandboxd::service
