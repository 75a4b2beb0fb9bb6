// The request target: origin-form parsing and query parameters as the server does them
// (HttpServer::dispatch), then the route table with the project's route shapes.
#include <boost/url/parse.hpp>
#include <map>
#include <string>

#include "server/router.h"

using namespace sandboxd::server;

static const Router& routes() {
  static Router router = [] {
    Router r;
    const std::string files = "/api/gpt/v1/files";
    r.add(http::verb::post, files, "files.upload");
    r.add(http::verb::get, files, "files.list");
    r.add(http::verb::put, files + "/{key+}", "files.put");
    r.add(http::verb::get, files + "/{file_id}", "files.get");
    r.add(http::verb::head, files + "/{file_id}", "files.head");
    r.add(http::verb::get, files + "/{file_id}/content", "files.content");
    r.add(http::verb::post, "/api/gpt/v1/containers", "containers.create");
    r.add(http::verb::get, "/api/gpt/v1/containers/{id}", "containers.get");
    r.add(http::verb::post, "/api/gpt/v1/containers/{id}/tools/{tool}", "containers.tool");
    r.add(http::verb::post, "/v1/messages", "messages");
    r.add(http::verb::get, "/health", "health");
    return r;
  }();
  return router;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const http::verb kVerbs[] = {http::verb::get, http::verb::head, http::verb::post, http::verb::put,
                                      http::verb::delete_};
  http::verb method = kVerbs[data[0] % 5];
  std::string_view target(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto parsed = boost::urls::parse_origin_form(target);
  if (!parsed) return 0;
  std::map<std::string, std::string> query;
  for (auto param : parsed->params()) query[std::string(param.key)] = std::string(param.value);
  std::string path(parsed->encoded_path());
  RouteMatch match = routes().match(method, path);
  if (match.kind == RouteMatch::Kind::kFound) (void)routes().name(match.route);
  std::string decoded;
  (void)percent_decode(target, decoded);
  return 0;
}
