// The network options of a container (E2B's allowInternetAccess and network.allowOut /
// denyOut, ops/sandbox_egress.h): a property of the container, set by its E2B sandbox's
// create and updateNetwork, read by the sandbox's resolver and egress listeners
// (api/sandbox_network.h) for each new lookup and connection, so a change applies to the
// next one.
//
// Durable with the container: they are a column of its row in the metadata database
// (store::ContainerRecord::egress, SQLite or PostgreSQL), written before they take
// effect and read back whenever the container is opened (ContainerLifecycle::load), so they
// hold across a stop (E2B's pause), a restart of the server and a move of the container
// to another replica, and go with the container when it is deleted. The container's row
// rather than E2B's sandbox record: the row is what every opener of a container reads
// (the E2B record is read on E2B's calls only), its lifetime is the container's, and the
// network code that enforces them sees only the container.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ops/sandbox_egress.h"
#include "service/container.h"

namespace sandboxd::service {

// Null when the container has none (the operator's policy alone applies).
std::shared_ptr<const ops::SandboxEgress> egress_options(const Container& container);
// In memory only (null clears them): the caller has stored them with the container.
void set_egress_options(Container& container, std::shared_ptr<const ops::SandboxEgress> options);

// The options as the container's row keeps them (JSON: {"allowOut":[...],"denyOut":[...],
// "allowInternetAccess":bool}); "" for none.
std::string encode_egress_options(const ops::SandboxEgress* options);
// Back from the row. The entries were checked against the operator's policy when they
// were given; they are not checked again here (the policy in force is checked on every
// lookup and connection anyway, so a narrower policy since still wins). Null for "" and
// for what cannot be read (logged: a row no sandboxd wrote).
std::shared_ptr<const ops::SandboxEgress> decode_egress_options(std::string_view text);

}  // namespace sandboxd::service
