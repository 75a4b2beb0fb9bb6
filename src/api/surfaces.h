// Every API surface on one server: each installs its own routes (a route says where its
// request names its container: server::ContainerScope, which cluster routing reads).
#pragma once

#include <memory>

#include "api/routes.h"
#include "store/database.h"

namespace sandboxd::api {

// The core's surfaces: the ops endpoints (/health, /ready, /metrics), the HTTP API
// (containers, files, /messages, admin, Skills), the Workspace (threads and its page)
// and MCP. The threads are kept in `threads_database`. (E2B's API is a library of its
// own, which the composition root installs beside these: e2b/api/surfaces.h.)
void install_surfaces(server::HttpServer& http, ApiContext& api,
                      std::shared_ptr<store::db::Database> threads_database);

}  // namespace sandboxd::api
