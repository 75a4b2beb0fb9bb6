// Files API (SPEC §3.3) — pending the store module.
#include "api/routes.h"

namespace sandboxd::api {
void register_file_routes(server::HttpServer&, ApiContext&) {}
}  // namespace sandboxd::api
