// Files API (docs/http-api.md, "Work with files"): upload (multipart), put at a key,
// list, metadata, HEAD, content, delete one, delete by prefix. Every call names its
// container with scope_id.

#include <boost/json.hpp>

#include "api/api_calls.h"
#include "api/file_transfer.h"
#include "api/routes.h"
#include "base/blocking.h"
#include "cluster/container_durability.h"
#include "server/header_values.h"
#include "service/discovery.h"
#include "service/store_call.h"
#include "store/keys.h"

namespace sandboxd::api {
namespace {

asio::awaitable<Result<std::shared_ptr<Container>>> scoped_container(ApiContext& api, RequestContext& ctx,
                                                                     bool create) {
  auto scope = ctx.query_value("scope_id");
  if (!scope || scope->empty())
    co_return ApiError::invalid_request("The 'scope_id' query parameter (the container id) is required");
  auto container = co_await api.containers.async_open(ctx.owner, *scope, create);
  if (container) api.containers.touch(**container);
  co_return container;
}

// The request's container, ready for use (restored from the bucket when need be).
asio::awaitable<Result<std::shared_ptr<Container>>> scoped_ready_container(ApiContext& api,
                                                                           RequestContext& ctx) {
  auto container = co_await scoped_container(api, ctx, /*create=*/false);
  co_return co_await ready_container(api, std::move(container));
}

std::string leaf_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

Result<std::string> path_of_id(const std::string& id) {
  auto path = store::path_for_file_id(id);
  if (!path) return ApiError::invalid_request("Invalid file id: " + id.substr(0, 200));
  return *path;
}

asio::awaitable<Result<Response>> upload(ApiContext& api, RequestContext& ctx) {
  auto container = co_await scoped_container(api, ctx, /*create=*/true);
  co_return co_await upload_response(api, ctx, std::move(container), std::nullopt);
}

asio::awaitable<Result<Response>> put(ApiContext& api, RequestContext& ctx) {
  auto container = co_await scoped_container(api, ctx, /*create=*/true);
  co_return co_await upload_response(api, ctx, std::move(container), ctx.params["key"]);
}

// The sandbox-path prefixes that a key prefix selects, in uploads and outputs.
std::vector<std::string> path_prefixes_for(const std::string& key_prefix) {
  const std::string uploads = std::string(kUploadsMount) + "/";
  const std::string outputs = std::string(kOutputsMount) + "/";
  const std::string outputs_key = "outputs/";
  std::vector<std::string> prefixes{uploads + key_prefix};
  if (key_prefix.rfind(outputs_key, 0) == 0)
    prefixes.push_back(outputs + key_prefix.substr(outputs_key.size()));
  else if (outputs_key.rfind(key_prefix, 0) == 0)
    prefixes.push_back(outputs);
  return prefixes;
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
  const DownloadRule rule = co_await download_rule(api, **container);
  co_return json_ok(file_object((*container)->id, *record, rule));
}

asio::awaitable<Result<Response>> head(ApiContext& api, RequestContext& ctx) {
  auto container = co_await scoped_ready_container(api, ctx);
  if (!container) co_return container.error();
  auto record = co_await find_file(api, **container, ctx.params["file_id"]);
  if (!record) co_return record.error();
  const DownloadRule rule = co_await download_rule(api, **container);
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
  const DownloadRule rule = co_await download_rule(api, **container);
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
  Container& c = **container;
  std::vector<std::string> removed;
  auto remove = [&api, &c, &prefix, &removed] {
    return api.files.remove_prefix(c.storage, c.paths, *prefix, &removed);
  };
  size_t count = co_await run_blocking(std::move(remove));
  if (api.durability && count > 0) {  // out of the bucket's manifest before the answer
    api.durability->note_change(c);
    auto forget = [&api, &c, &removed] { api.durability->forget_files(c, removed); };
    co_await run_blocking(std::move(forget));
  }
  co_return json_ok(
      boost::json::object{{"prefix", *prefix}, {"deleted_count", count}, {"type", "prefix_deleted"}});
}

}  // namespace

// A changed body is hashed anew, on the blocking pool.
asio::awaitable<Result<store::FileRecord>> find_file(ApiContext& api, Container& container,
                                                     const std::string& id) {
  auto path = path_of_id(id);
  if (!path) co_return path.error();
  if (!resolve_sandbox_path(container.paths, *path)) co_return ApiError::not_found("File not found: " + id);
  auto stat = [&api, &container, &path] {
    return api.files.stat_file(container.storage, container.paths, *path);
  };
  auto record = co_await run_blocking(std::move(stat));
  if (!record) co_return ApiError::not_found("File not found: " + id);
  co_return *record;
}

asio::awaitable<Result<boost::json::object>> list_files_page(ApiContext& api, Container& c,
                                                             const FileListQuery& query) {
  for (unsigned char ch : query.prefix)
    if (ch < 0x20 || ch == 0x7f)
      co_return ApiError::invalid_request("'prefix' must not contain control characters");
  std::optional<std::string> after, before;
  if (query.after_id) {
    auto path = path_of_id(*query.after_id);
    if (!path) co_return path.error();
    after = *path;
  }
  if (query.before_id) {
    auto path = path_of_id(*query.before_id);
    if (!path) co_return path.error();
    before = *path;
  }
  co_await before_listing(api, c);  // files that code wrote appear here
  const auto prefixes = path_prefixes_for(query.prefix);
  // From memory when the container's records are held (no round trip, no thread hop);
  // otherwise where a round trip may wait.
  auto page = api.containers.metadata().cached_list_files(c.storage, prefixes, query.limit, after, before);
  if (!page) {
    auto list = [&api, &c, &query, &after, &before, &prefixes] {
      return api.containers.metadata().list_files(c.storage, prefixes, query.limit, after, before);
    };
    page = co_await store_call(api, std::move(list));
  }
  boost::json::array data;
  const DownloadRule rule = co_await download_rule(api, c);
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
  auto path = path_of_id(id);
  if (!path) co_return path.error();
  if (!resolve_sandbox_path(c.paths, *path)) co_return ApiError::not_found("File not found: " + id);
  auto remove = [&api, &c, &path] { return api.files.remove(c.storage, c.paths, *path); };
  auto removed = co_await store_call(api, std::move(remove));
  const bool gone = removed || removed.error() == store::FileError::kNotFound;
  if (api.durability && gone) {  // out of the bucket's manifest before the answer
    api.durability->note_change(c);
    auto forget = [&api, &c, &path] { api.durability->forget_files(c, {*path}); };
    co_await run_blocking(std::move(forget));
  }
  if (!removed && removed.error() == store::FileError::kNotFound)
    co_return ApiError::not_found("File not found: " + id);
  if (!removed) co_return file_error(removed.error(), *path);
  co_return boost::json::object{{"id", id}, {"type", "file_deleted"}};
}

void register_file_routes(server::HttpServer& http, ApiContext& api) {
  const std::string base = "/api/gpt/v1/files";
  http.route(http::verb::post, base, "files.upload", with_api(api, upload));
  http.route(http::verb::get, base, "files.list", with_api(api, list));
  http.route(http::verb::delete_, base, "files.delete_prefix", with_api(api, remove_prefix));
  http.route(http::verb::put, base + "/{key+}", "files.put", with_api(api, put));
  http.route(http::verb::get, base + "/{file_id}", "files.get", with_api(api, metadata));
  http.route(http::verb::head, base + "/{file_id}", "files.head", with_api(api, head));
  http.route(http::verb::delete_, base + "/{file_id}", "files.delete", with_api(api, remove_one));
  http.route(http::verb::get, base + "/{file_id}/content", "files.content", with_api(api, content));
}

}  // namespace sandboxd::api
