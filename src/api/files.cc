// Files API (docs/http-api.md, "Work with files"): upload (multipart), put at a key,
// list, metadata, HEAD, content, delete one, delete by prefix. Every call names its
// container with scope_id.

#include <boost/json.hpp>

#include "api/api_calls.h"
#include "api/file_transfer.h"
#include "api/routes.h"
#include "server/header_values.h"
#include "store/keys.h"

namespace sandboxd::api {

using service::ContainerFiles;
using service::DownloadRule;
namespace {

// The request's container (scope_id), opened (made when `create`) and ready.
asio::awaitable<Result<std::shared_ptr<Container>>> scoped_container(ApiContext& api, RequestContext& ctx,
                                                                     bool create) {
  auto scope = ctx.query_value("scope_id");
  if (!scope || scope->empty())
    co_return ApiError::invalid_request("The 'scope_id' query parameter (the container id) is required");
  ContainerFiles files(api);
  auto container = co_await files.open_ready(ctx.owner, *scope, create);
  if (container) api.containers.lifecycle().touch(**container);
  co_return container;
}

asio::awaitable<Result<std::shared_ptr<Container>>> scoped_ready_container(ApiContext& api,
                                                                           RequestContext& ctx) {
  return scoped_container(api, ctx, /*create=*/false);
}

std::string leaf_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

asio::awaitable<Result<Response>> upload(ApiContext& api, RequestContext& ctx) {
  auto container = co_await scoped_container(api, ctx, /*create=*/true);
  co_return co_await upload_response(api, ctx, std::move(container), std::nullopt);
}

asio::awaitable<Result<Response>> put(ApiContext& api, RequestContext& ctx) {
  auto container = co_await scoped_container(api, ctx, /*create=*/true);
  co_return co_await upload_response(api, ctx, std::move(container), ctx.params["key"]);
}

asio::awaitable<Result<Response>> list(ApiContext& api, RequestContext& ctx) {
  auto container = co_await scoped_ready_container(api, ctx);
  if (!container) co_return container.error();
  auto requested = page_limit(ctx);
  if (!requested) co_return requested.error();
  FileListQuery query{ctx.query_value("prefix").value_or(""), *requested, ctx.query_value("after_id"),
                      ctx.query_value("before_id")};
  auto page = co_await list_files_page(api, **container, query);
  if (!page) co_return page.error();
  co_return json_ok(*page);
}

asio::awaitable<Result<Response>> metadata(ApiContext& api, RequestContext& ctx) {
  auto container = co_await scoped_ready_container(api, ctx);
  if (!container) co_return container.error();
  auto record = co_await find_file(api, **container, ctx.params["file_id"]);
  if (!record) co_return record.error();
  ContainerFiles files(api);
  const DownloadRule rule = co_await files.download_rule(**container);
  co_return json_ok(file_object((*container)->id, *record, rule));
}

asio::awaitable<Result<Response>> head(ApiContext& api, RequestContext& ctx) {
  auto container = co_await scoped_ready_container(api, ctx);
  if (!container) co_return container.error();
  auto record = co_await find_file(api, **container, ctx.params["file_id"]);
  if (!record) co_return record.error();
  ContainerFiles files(api);
  const DownloadRule rule = co_await files.download_rule(**container);
  auto object = file_object((*container)->id, *record, rule);
  server::StringResponse res{http::status::ok, 11};
  // Values from the file (its name above all: code in the sandbox chose it) pass through
  // header_text: percent-encoded, the exact bytes recoverable, never a raw CR or LF.
  using server::header_text;
  res.set("X-File-Id", header_text(std::string(object["id"].as_string())));
  res.set("X-File-Filename", header_text(leaf_name(record->path)));
  res.set("X-File-Mime-Type", header_text(std::string(object["mime_type"].as_string())));
  res.set("X-File-Size-Bytes", std::to_string(record->size));
  res.set("X-File-Created-At", header_text(std::string(object["created_at"].as_string())));
  res.set("X-File-Downloadable", object["downloadable"].as_bool() ? "true" : "false");
  res.set("X-File-Etag", header_text(record->etag));
  co_return Response(std::move(res));
}

asio::awaitable<Result<Response>> content(ApiContext& api, RequestContext& ctx) {
  auto container = co_await scoped_ready_container(api, ctx);
  if (!container) co_return container.error();
  auto record = co_await find_file(api, **container, ctx.params["file_id"]);
  if (!record) co_return record.error();
  // A chat thread's files follow the organisation's download settings here too: the
  // same container is reached through the thread's download-file.
  ContainerFiles files(api);
  const DownloadRule rule = co_await files.download_rule(**container);
  if (!rule.allows(record->path)) co_return rule.refusal(record->path);
  co_return send_content(api, ctx, **container, *record, ctx.query_value("disposition") == "inline");
}

asio::awaitable<Result<Response>> remove_one(ApiContext& api, RequestContext& ctx) {
  auto container = co_await scoped_ready_container(api, ctx);
  if (!container) co_return container.error();
  auto deleted = co_await delete_file(api, **container, ctx.params["file_id"]);
  if (!deleted) co_return deleted.error();
  co_return json_ok(*deleted);
}

asio::awaitable<Result<Response>> remove_prefix(ApiContext& api, RequestContext& ctx) {
  auto container = co_await scoped_ready_container(api, ctx);
  if (!container) co_return container.error();
  auto prefix = ctx.query_value("prefix");
  if (!prefix || prefix->empty())
    co_return ApiError::invalid_request("The 'prefix' query parameter is required to delete files by prefix");
  ContainerFiles files(api);
  const size_t count = co_await files.remove_prefix(**container, *prefix);
  co_return json_ok(
      boost::json::object{{"prefix", *prefix}, {"deleted_count", count}, {"type", "prefix_deleted"}});
}

}  // namespace

asio::awaitable<Result<store::FileRecord>> find_file(ApiContext& api, Container& container,
                                                     const std::string& id) {
  ContainerFiles files(api);
  co_return co_await files.find(container, id);
}

asio::awaitable<Result<boost::json::object>> list_files_page(ApiContext& api, Container& c,
                                                             const FileListQuery& query) {
  ContainerFiles files(api);
  auto page = co_await files.list(c, query);
  if (!page) co_return page.error();
  boost::json::array data;
  const DownloadRule rule = co_await files.download_rule(c);
  for (const auto& record : page->files) data.push_back(file_object(c.id, record, rule));
  boost::json::object out{{"data", std::move(data)}, {"has_more", page->has_more}};
  out["first_id"] = page->files.empty()
                        ? boost::json::value(nullptr)
                        : boost::json::value(store::file_id_for_path(page->files.front().path));
  out["last_id"] = page->files.empty() ? boost::json::value(nullptr)
                                       : boost::json::value(store::file_id_for_path(page->files.back().path));
  co_return out;
}

asio::awaitable<Result<boost::json::object>> delete_file(ApiContext& api, Container& c,
                                                         const std::string& id) {
  ContainerFiles files(api);
  if (auto removed = co_await files.remove(c, id); !removed) co_return removed.error();
  co_return boost::json::object{{"id", id}, {"type", "file_deleted"}};
}

void install_file_routes(server::HttpServer& http, ApiContext& api) {
  const std::string base = "/api/gpt/v1/files";
  const server::RouteOptions in_scope{.container = server::ContainerScope::query_parameter("scope_id")};
  http.route(http::verb::post, base, "files.upload", with_api(api, upload), in_scope);
  http.route(http::verb::get, base, "files.list", with_api(api, list), in_scope);
  http.route(http::verb::delete_, base, "files.delete_prefix", with_api(api, remove_prefix), in_scope);
  http.route(http::verb::put, base + "/{key+}", "files.put", with_api(api, put), in_scope);
  http.route(http::verb::get, base + "/{file_id}", "files.get", with_api(api, metadata), in_scope);
  http.route(http::verb::head, base + "/{file_id}", "files.head", with_api(api, head), in_scope);
  http.route(http::verb::delete_, base + "/{file_id}", "files.delete", with_api(api, remove_one), in_scope);
  http.route(http::verb::get, base + "/{file_id}/content", "files.content", with_api(api, content), in_scope);
}

}  // namespace sandboxd::api
