#include "api/surfaces.h"

#include "api/thread_chat.h"

namespace sandboxd::api {

void install_surfaces(server::HttpServer& http, ApiContext& api,
                      std::shared_ptr<store::db::Database> threads_database) {
  install_ops_routes(http, api);
  install_container_routes(http, api);
  install_file_routes(http, api);
  install_thread_routes(http, api);
  install_thread_chat_routes(http, api, std::move(threads_database));
  install_web_routes(http, api);
  install_messages_routes(http, api);
  install_admin_routes(http, api);
  install_skill_routes(http, api);
  install_mcp_routes(http, api);
}

}  // namespace sandboxd::api
