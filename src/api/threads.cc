// Workspace thread file endpoints (docs/http-api.md): the container is the thread id.
// Downloads follow the organisation's settings: generated files (outputs/) need
// workspace.downloads.generatedResources, uploaded files need uploadedResources.

#include <boost/json.hpp>

#include "api/file_transfer.h"
#include "api/routes.h"
#include "base/blocking.h"

namespace sandboxd::api {

using service::ContainerFiles;
using service::DownloadRule;
namespace {

// The thread's container, opened (made when `create`) and ready.
asio::awaitable<Result<std::shared_ptr<Container>>> thread_container(ApiContext& api, RequestContext& ctx,
                                                                     bool create) {
  ContainerFiles files(api);
  auto container = co_await files.open_ready(ctx.owner, ctx.params["thread_id"], create);
  if (container) api.containers.lifecycle().touch(**container);
  co_return container;
}

asio::awaitable<Result<Response>> upload_file(ApiContext& api, RequestContext& ctx) {
  auto container = co_await thread_container(api, ctx, /*create=*/true);
  co_return co_await upload_response(api, ctx, std::move(container), std::nullopt);
}

asio::awaitable<Result<Response>> put_file(ApiContext& api, RequestContext& ctx) {
  auto container = co_await thread_container(api, ctx, /*create=*/true);
  co_return co_await upload_response(api, ctx, std::move(container), ctx.params["path"]);
}

asio::awaitable<Result<Response>> download_file(ApiContext& api, RequestContext& ctx) {
  auto path = ctx.query_value("path");
  if (!path || path->empty())
    co_return ApiError::invalid_request("The 'path' query parameter (a sandbox path) is required");
  auto container = co_await thread_container(api, ctx, /*create=*/false);
  if (!container) co_return container.error();
  auto resolved = resolve_sandbox_path((*container)->paths, *path);
  if (!resolved)
    co_return ApiError::invalid_request("Path '" + path->substr(0, 300) +
                                        "' does not match any session mount");
  // The organisation's settings (the same rule as the Files API's for a thread's files).
  const DownloadRule rule = DownloadRule::for_thread(*api.config());
  if (!rule.allows(resolved->sandbox_path)) co_return rule.refusal(resolved->sandbox_path);
  Container& c = **container;
  auto stat = [&api, &c, &resolved] {
    return api.files.stat_file(c.storage, c.paths, resolved->sandbox_path);
  };
  auto record = co_await run_blocking(std::move(stat));  // hashes a changed body
  if (!record) co_return ApiError::not_found("File not found: " + resolved->sandbox_path);
  co_return send_content(api, ctx, **container, *record, ctx.query_value("disposition") == "inline");
}

}  // namespace

void install_thread_routes(server::HttpServer& http, ApiContext& api) {
  const std::string base = "/api/v1/app/thread/{thread_id}";
  // A thread's container has the thread's id.
  const server::RouteOptions in_thread{.container = server::ContainerScope::path_parameter("thread_id")};
  http.route(http::verb::post, base + "/upload-file", "threads.upload_file", with_api(api, upload_file),
             in_thread);
  http.route(http::verb::put, base + "/put-file/{path+}", "threads.put_file", with_api(api, put_file),
             in_thread);
  http.route(http::verb::get, base + "/download-file", "threads.download_file", with_api(api, download_file),
             in_thread);
}

}  // namespace sandboxd::api
