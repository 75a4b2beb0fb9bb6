// A sandbox's network as the container service sees it. What a sandbox can reach is
// served by a surface (api/sandbox_network.h: the API as sandboxd.internal, the
// allow-listed services); the service only plans each sandbox's listeners, hands a
// started sandbox over to be served, and tells it which container it serves now.
#pragma once

#include <boost/asio/awaitable.hpp>

#include <memory>
#include <string>

#include "runtime/runtime.h"
#include "runtime/sandbox.h"

namespace sandboxd::service {

struct Container;

// One running sandbox's listeners, served until the sandbox stops. A pre-started
// sandbox is bound to its container when claimed.
class NetworkLink {
 public:
  virtual ~NetworkLink() = default;
  virtual void bind(const std::shared_ptr<Container>& container) = 0;
};

class SandboxNetworking {
 public:
  virtual ~SandboxNetworking() = default;
  // The /etc/hosts lines and listeners every sandbox is started with.
  virtual void plan(runtime::SandboxOptions& options) const = 0;
  // The resolver a sandbox started now is given (plan()'s nameserver; empty: none).
  virtual std::string nameserver() const = 0;
  // Takes the started sandbox's listeners and serves them until it stops. Completes once
  // everything the sandbox may reach is listening (its resolver and its peers' listeners
  // included), so its first command never finds a name or an address missing that a
  // later one would find.
  virtual boost::asio::awaitable<std::shared_ptr<NetworkLink>> attach(
      const std::shared_ptr<runtime::Sandbox>& sandbox) = 0;
};

}  // namespace sandboxd::service
