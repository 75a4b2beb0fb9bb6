// The Workspace: thread chat (thread_chat.cc) and the web page that uses it (web.cc).
#pragma once

#include <memory>
#include <string>

#include "api/routes.h"
#include "store/database.h"

namespace sandboxd::api {

// Threads, their messages (the tool loop with the thread as the container), artifacts,
// and GET /api/v1/app/features. The threads are kept in the metadata database.
void install_thread_chat_routes(server::HttpServer& http, ApiContext& api,
                                std::shared_ptr<store::db::Database> database);

// The web page at `/` and its files at /assets/..., read from server.webRoot (or, when
// unset, the first of <binary dir>/../share/sandboxd/web, <binary dir>/../web and the
// source tree's web/ that holds an index.html). Unauthenticated: the page signs in
// with a token itself.
void install_web_routes(server::HttpServer& http, ApiContext& api);

}  // namespace sandboxd::api
