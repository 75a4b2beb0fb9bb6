// Workspace thread file endpoints (SPEC §3.4) — pending the store module.
#include "api/routes.h"

namespace sandboxd::api {
void register_thread_routes(server::HttpServer&, ApiContext&) {}
}  // namespace sandboxd::api
