// The network options of a container (E2B's allowInternetAccess and network.allowOut /
// denyOut, ops/sandbox_egress.h): a property of the container, set by its E2B sandbox's
// create and updateNetwork, read by the sandbox's resolver and egress listeners
// (api/sandbox_network.h) for each new lookup and connection, so a change applies to the
// next one. Kept by the container's storage (which never repeats, unlike an id) while
// the server runs, so they outlast a stop (E2B's pause) and apply to the sandbox the
// next command starts; forgotten when the container is deleted through E2B's kill.
#pragma once

#include <memory>

#include "ops/sandbox_egress.h"
#include "service/container.h"

namespace sandboxd::service {

// Null clears them (the operator's policy alone applies).
void set_egress_options(const Container& container, std::shared_ptr<const ops::SandboxEgress> options);
// Null when the container has none.
std::shared_ptr<const ops::SandboxEgress> egress_options(const Container& container);

}  // namespace sandboxd::service
