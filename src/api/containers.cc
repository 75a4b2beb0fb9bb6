// Containers and direct execution (docs/http-api.md): create, list, get, stop, delete, and the
// two sub-tool endpoints, whose answer is the tool result's `content` object exactly as
// it appears inside a messages response.

#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <filesystem>

#include "api/api_calls.h"
#include "api/cluster_relay.h"
#include "api/routes.h"
#include "base/blocking.h"
#include "server/http_relay.h"
#include "service/store_call.h"
#include "service/tool_calls.h"

namespace sandboxd::api {
namespace {

namespace fs = std::filesystem;

constexpr size_t kToolBodyLimit = 16u << 20;
constexpr size_t kCreateBodyLimit = 64u << 10;

// The id a creation's body names, when it is a string ("" otherwise: a new id, or the
// handler's 400).
asio::awaitable<std::string> container_named_in_create_body(RequestContext& ctx) {
  return container_named_in_json_body(ctx, kCreateBodyLimit, [](const boost::json::object& body) {
    const auto* named = body.if_contains("id");
    return named && named->is_string() ? std::string(named->as_string()) : std::string();
  });
}

// Bytes and files of a container: its three folders, symlinks not followed.
boost::json::object usage_of(const ContainerPaths& paths) {
  uint64_t bytes = 0, files = 0;
  for (const auto* dir : {&paths.workspace, &paths.uploads, &paths.outputs}) {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(*dir, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec) && !it->is_symlink(ec)) {
        ++files;
        bytes += it->file_size(ec);
      }
    }
  }
  return {{"bytes", bytes}, {"files", files}};
}

asio::awaitable<Result<Response>> create_container(ApiContext& api, RequestContext& ctx) {
  auto body = co_await ctx.read_body(kCreateBodyLimit);
  if (!body) co_return body.error();
  std::string id;
  if (!body->empty()) {
    auto object = parse_json_object(*body);
    if (!object) co_return object.error();
    for (const auto& [key, value] : *object) {
      if (key != "id") co_return ApiError::invalid_request("Unknown field '" + std::string(key) + "'");
      if (!value.is_string()) co_return ApiError::invalid_request("'id' must be a string");
      id = std::string(value.as_string());
    }
  }
  if (id.empty()) id = api.containers.new_id();
  auto container = co_await api.containers.lifecycle().async_open(ctx.owner, id, /*create=*/true);
  if (!container) co_return container.error();
  api.containers.lifecycle().touch(**container);
  auto described = co_await describe_container(api.containers, **container);
  co_return json_ok(described);
}

asio::awaitable<Result<Response>> list_containers(ApiContext& api, RequestContext& ctx) {
  auto page = page_limit(ctx);
  if (!page) co_return page.error();
  auto listed = co_await list_containers_page(api, ctx, *page, ctx.query_value("after_id").value_or(""));
  co_return json_ok(listed);
}

asio::awaitable<Result<Response>> get_container(ApiContext& api, RequestContext& ctx) {
  auto container = co_await api.containers.lifecycle().async_open(ctx.owner, ctx.params["id"], false);
  if (!container) co_return container.error();
  // Another replica's listing asks for the description only (api/cluster_relay.h).
  const bool describe_only =
      !ctx.header_value(server::kRelayedByHeader).empty() && !ctx.header_value(kDescribeOnlyHeader).empty();
  if (!describe_only) api.containers.lifecycle().touch(**container);
  auto described = co_await describe_container(api.containers, **container);
  co_return json_ok(described);
}

asio::awaitable<Result<Response>> stop_container(ApiContext& api, RequestContext& ctx) {
  auto container = co_await api.containers.lifecycle().async_open(ctx.owner, ctx.params["id"], false);
  if (!container) co_return container.error();
  co_await api.containers.lifecycle().stop(*container);
  auto described = co_await describe_container(api.containers, **container);
  co_return json_ok(described);
}

asio::awaitable<Result<Response>> delete_container(ApiContext& api, RequestContext& ctx) {
  auto container = co_await api.containers.lifecycle().async_open(ctx.owner, ctx.params["id"], false);
  if (!container) co_return container.error();
  co_await api.containers.lifecycle().remove(*container);
  co_return json_ok(boost::json::object{{"id", (*container)->id}, {"type", "container_deleted"}});
}

asio::awaitable<Result<Response>> run_tool(ApiContext& api, RequestContext& ctx) {
  const std::string& tool = ctx.params["tool"];
  if (tool != "bash_code_execution" && tool != "text_editor_code_execution" && tool != "code_execution")
    co_return ApiError::not_found("Unknown tool: " + tool);
  auto body = co_await ctx.read_body(kToolBodyLimit);
  if (!body) co_return body.error();
  auto input = parse_json_object(*body);
  if (!input) co_return input.error();
  auto container =
      co_await api.containers.lifecycle().async_open(ctx.owner, ctx.params["id"], /*create=*/true);
  if (!container) co_return container.error();
  // code_execution answers with its rich outputs too (images, HTML) for direct callers.
  Result<boost::json::object> content = boost::json::object();  // (a placeholder that allocates nothing)
  if (tool == "code_execution")
    content = co_await run_python_tool(api, *container, *input, /*rich_outputs=*/true);
  else
    content = co_await run_sub_tool(api, *container, tool, *input);
  if (!content) co_return content.error();
  co_return json_ok(*content);
}

}  // namespace

// The usage walk reads every folder of the container: on the blocking pool.
asio::awaitable<boost::json::object> describe_container(ContainerService& service, const Container& c) {
  auto walk = [&paths = c.paths] { return usage_of(paths); };
  boost::json::object usage = co_await run_blocking(std::move(walk));
  co_return boost::json::object{
      {"id", c.id},
      {"type", "container"},
      {"created_at", ContainerService::format_time(c.created_at)},
      {"expires_at", ContainerService::format_time(service.lifecycle().expires_at(c))},
      {"state", c.running() ? "running" : "stopped"},
      {"usage", std::move(usage)}};
}

asio::awaitable<boost::json::object> list_containers_page(ApiContext& api, RequestContext& ctx, size_t limit,
                                                          std::string after_id) {
  auto records = co_await api.containers.lifecycle().async_list(ctx.owner, limit + 1, after_id);
  bool has_more = records.size() > limit;
  if (has_more) records.pop_back();
  // Cluster mode: a container open on another live replica is described by it (its
  // live state and usage), not from this replica's index as if it were stopped.
  std::vector<store::ContainerRecord> not_open_here;
  for (const auto& record : records)
    if (!api.containers.lifecycle().find_open(ctx.owner, record.id)) not_open_here.push_back(record);
  auto held_elsewhere = co_await describe_held_elsewhere(api, ctx, not_open_here);
  boost::json::array data;
  for (const auto& record : records) {
    if (auto container = api.containers.lifecycle().find_open(ctx.owner, record.id)) {
      data.push_back(co_await describe_container(api.containers, *container));
      continue;
    }
    if (auto it = held_elsewhere.find(record.id); it != held_elsewhere.end()) {
      data.push_back(std::move(it->second));
      continue;
    }
    // Not open: described from the index, without mounting its volume just to list it.
    uint64_t bytes = 0, files = 0;
    auto query = [&api, &record] { return api.containers.metadata().files_of(record.storage); };
    auto stored = co_await store_call(api, std::move(query));
    for (const auto& file : stored) {
      bytes += file.size;
      ++files;
    }
    data.push_back(boost::json::object{
        {"id", record.id},
        {"type", "container"},
        {"created_at", ContainerService::format_time(record.created_at)},
        {"expires_at", ContainerService::format_time(record.last_used_at + api.config()->session_ttl_sec)},
        {"state", "stopped"},
        {"usage", {{"bytes", bytes}, {"files", files}}}});
  }
  boost::json::object out{{"data", data}, {"has_more", has_more}};
  out["first_id"] = records.empty() ? boost::json::value(nullptr) : boost::json::value(records.front().id);
  out["last_id"] = records.empty() ? boost::json::value(nullptr) : boost::json::value(records.back().id);
  co_return out;
}

server::StringResponse json_ok(const boost::json::value& body, http::status status) {
  return server::json_response(status, boost::json::serialize(body));
}

Result<size_t> page_limit(const RequestContext& ctx) {
  auto text = ctx.query_value("limit");
  if (!text) return size_t{20};
  char* end = nullptr;
  long value = std::strtol(text->c_str(), &end, 10);
  if (text->empty() || *end || value < 1 || value > 1000)
    return ApiError::invalid_request("'limit' must be an integer from 1 to 1000");
  return static_cast<size_t>(value);
}

asio::awaitable<std::string> container_named_in_json_body(RequestContext& ctx, size_t limit,
                                                          ContainerPick pick) {
  auto body = co_await ctx.read_body(limit);
  if (!body) co_return "";
  std::string id;
  boost::system::error_code ec;
  auto value = boost::json::parse(*body, ec);
  if (!ec && value.is_object()) id = pick(value.as_object());
  ctx.keep_body(std::move(*body));
  co_return id;
}

Result<boost::json::object> parse_json_object(std::string_view body) {
  boost::system::error_code ec;
  boost::json::value value = boost::json::parse(body, ec);
  if (ec) return ApiError::invalid_request("The request body is not valid JSON: " + ec.message());
  if (!value.is_object()) return ApiError::invalid_request("The request body must be a JSON object");
  return std::move(value.as_object());
}

void install_container_routes(server::HttpServer& http, ApiContext& api) {
  const std::string base = "/api/gpt/v1/containers";
  const server::RouteOptions by_id{.container = server::ContainerScope::path_parameter("id")};
  // A creation may name its id, which may be a container another replica holds.
  http.route(http::verb::post, base, "containers.create", with_api(api, create_container),
             {.container = server::ContainerScope::found_by(container_named_in_create_body)});
  http.route(http::verb::get, base, "containers.list", with_api(api, list_containers));
  http.route(http::verb::get, base + "/{id}", "containers.get", with_api(api, get_container), by_id);
  http.route(http::verb::delete_, base + "/{id}", "containers.delete", with_api(api, delete_container),
             by_id);
  http.route(http::verb::post, base + "/{id}/stop", "containers.stop", with_api(api, stop_container), by_id);
  http.route(http::verb::post, base + "/{id}/tools/{tool}", "containers.tool", with_api(api, run_tool),
             by_id);
}

}  // namespace sandboxd::api
