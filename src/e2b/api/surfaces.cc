#include "e2b/api/surfaces.h"

#include "e2b/api/common.h"

namespace sandboxd::e2b {

void install_surfaces(server::HttpServer& http, ApiContext& api,
                      std::vector<std::pair<std::string, std::string>> tokens) {
  // E2B's SDKs present the owner's token in headers of their own (see e2b/api/common.h).
  http.accept_credential_header(std::string(kAccessTokenHeader));
  http.accept_credential_header(std::string(kTrafficTokenHeader));
  install_control_plane_routes(http, api);
  install_envd_routes(http, api, std::move(tokens));
  install_interpreter_routes(http, api);
  install_port_routes(http, api);
}

}  // namespace sandboxd::e2b
