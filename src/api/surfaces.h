// Every API surface on one server: each installs its own routes (a route says where its
// request names its container: server::ContainerScope, which cluster routing reads).
#pragma once

#include <memory>

#include "api/routes.h"
#include "store/database.h"

namespace sandboxd::api {

// The ops endpoints (/health, /ready, /metrics), the HTTP API (containers, files,
// /messages, admin, Skills), the Workspace (threads and its page), MCP and E2B's API
// (its control plane, envd, the code interpreter, the sandboxes' ports). The threads
// are kept in `threads_database`.
void install_surfaces(server::HttpServer& http, ApiContext& api,
                      std::shared_ptr<store::db::Database> threads_database);

}  // namespace sandboxd::api
