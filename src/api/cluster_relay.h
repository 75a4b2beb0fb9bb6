// Cluster mode's request routing (docs/storage.md): a request for a container (its route
// says where the request names it: server::ContainerScope) that another live replica
// serves is relayed to that replica (server/http_relay.h); any other is
// served here, under this replica's lease. A write refused by the fence (this replica
// lost the container while it was paused or cut off) answers 503 with Retry-After and
// this replica forgets the lease, so the client's retry reaches the new holder.
#pragma once

#include <boost/json/object.hpp>
#include <map>

#include "api/routes.h"
#include "cluster/container_leases.h"

namespace sandboxd::api {

void install_cluster_routing(server::HttpServer& http, ApiContext& api, cluster::ContainerLeases& leases);

// A replica asking the holder to describe a container for a listing marks its request
// so: the holder answers as for a GET but the container's expiry does not roll (a
// listing is no use of the container).
inline constexpr std::string_view kDescribeOnlyHeader = "Sandboxd-Describe-Only";

// containers.list in cluster mode: the containers of `records` that another live
// replica holds, described by their holders (their live state and usage), by id. One
// that cannot be asked is left out (the caller describes it from the index).
asio::awaitable<std::map<std::string, boost::json::object>> describe_held_elsewhere(
    ApiContext& api, RequestContext& ctx, const std::vector<store::ContainerRecord>& records);

}  // namespace sandboxd::api
