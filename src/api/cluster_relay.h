// Cluster mode's request routing (issue 13 §3): a request for a container that another
// live replica serves is relayed to that replica (server/http_relay.h); any other is
// served here, under this replica's lease. A write refused by the fence (this replica
// lost the container while it was paused or cut off) answers 503 with Retry-After and
// this replica forgets the lease, so the client's retry reaches the new holder.
#pragma once

#include "api/container_leases.h"
#include "api/routes.h"

namespace sandboxd::api {

// The container a request is for, when its route is container-scoped ("" otherwise):
// the path's container or thread id, files' scope_id, or /messages' body `container`
// (whose body this reads then, and keeps for the handler).
asio::awaitable<std::string> container_of_request(RequestContext& ctx);

void install_cluster_routing(server::HttpServer& http, ApiContext& api, ContainerLeases& leases);

}  // namespace sandboxd::api
