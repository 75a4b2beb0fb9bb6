#include "api/mcp_subscriptions.h"

#include <algorithm>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <map>

#include "api/file_transfer.h"
#include "base/blocking.h"
#include "base/utf8.h"
#include "server/router.h"
#include "service/container_service.h"
#include "service/directory_watches.h"

namespace sandboxd::api {
namespace {

namespace json = boost::json;

constexpr std::string_view kUriPrefix = "sandboxd://containers/";

struct FileUri {
  std::string container, path;  // path: the sandbox path, with its leading '/'
};

// sandboxd://containers/{container}/files/{path}, as resources/read takes it.
std::optional<FileUri> parse_file_uri(std::string_view uri) {
  if (!uri.starts_with(kUriPrefix)) return std::nullopt;
  std::string_view rest = uri.substr(kUriPrefix.size());
  const auto slash = rest.find("/files/");
  if (slash == std::string_view::npos) return std::nullopt;
  FileUri parsed;
  std::string path;
  if (!server::percent_decode(rest.substr(0, slash), parsed.container) ||
      !server::percent_decode(rest.substr(slash + 7), path) ||
      !ContainerService::valid_id(parsed.container) || path.empty() || path.back() == '/')
    return std::nullopt;
  parsed.path = "/" + path;
  return parsed;
}

const json::array* listen_uris(const json::object& params) {
  const auto* notifications = params.if_contains("notifications");
  if (!notifications || !notifications->is_object()) return nullptr;
  const auto* uris = notifications->as_object().if_contains("resourceSubscriptions");
  return uris && uris->is_array() ? &uris->as_array() : nullptr;
}

}  // namespace

McpResourceWatch::McpResourceWatch(std::vector<Folder> folders) : folders_(std::move(folders)) {
  for (const auto& folder : folders_)
    for (const auto& [name, uri] : folder.files) uris_.push_back(uri);
}

asio::awaitable<Result<std::vector<std::string>>> McpResourceWatch::next(std::chrono::milliseconds wait) {
  std::vector<std::string> changed;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  if (folders_.empty()) {  // nothing to watch: the caller's keep-alives go on
    asio::steady_timer timer(co_await asio::this_coro::executor, wait);
    co_await timer.async_wait(asio::use_awaitable);
    co_return changed;
  }
  // One folder is waited on for as long as asked; several in turn, a slice each (a change
  // shows at most a round of slices late).
  const auto slice = folders_.size() == 1 ? wait : std::chrono::milliseconds(100);
  do {
    for (const auto& folder : folders_) {
      auto events = co_await folder.watch->next(slice);
      if (!events) co_return events.error();
      for (const auto& event : *events)
        for (const auto& [name, uri] : folder.files)
          if (event.name == name && std::find(changed.begin(), changed.end(), uri) == changed.end())
            changed.push_back(uri);
    }
  } while (changed.empty() && std::chrono::steady_clock::now() < deadline);
  co_return changed;
}

void McpResourceWatch::cancel() {
  for (auto& folder : folders_) folder.watch->cancel();
}

std::string mcp_container_of_listen(const json::object& params) {
  const auto* uris = listen_uris(params);
  if (!uris || uris->empty() || !uris->front().is_string()) return "";
  auto parsed = parse_file_uri(uris->front().as_string());
  return parsed ? parsed->container : "";
}

asio::awaitable<Result<std::shared_ptr<McpResourceWatch>>> mcp_watch_resources(ApiContext& api,
                                                                               RequestContext& ctx,
                                                                               const json::array& uris) {
  if (uris.size() > kMaxListenUris)
    co_return ApiError::invalid_request("Invalid params: at most " + std::to_string(kMaxListenUris) +
                                        " resourceSubscriptions in one subscriptions/listen");
  // The files by folder; the URIs that name no container file are left out.
  std::string container_id;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> by_folder;
  for (const auto& value : uris) {
    if (!value.is_string())
      co_return ApiError::invalid_request("Invalid params: resourceSubscriptions holds URIs (strings)");
    const std::string uri(value.as_string());
    auto parsed = parse_file_uri(uri);
    if (!parsed) continue;
    if (!container_id.empty() && parsed->container != container_id)
      co_return ApiError::invalid_request(
          "Invalid params: the resourceSubscriptions of one subscriptions/listen are files of one container "
          "(listen once per container)");
    container_id = parsed->container;
    const auto slash = parsed->path.rfind('/');
    auto& files = by_folder[slash == 0 ? "/" : parsed->path.substr(0, slash)];
    files.emplace_back(parsed->path.substr(slash + 1), uri);
  }
  if (by_folder.size() > kMaxListenFolders)
    co_return ApiError::invalid_request(
        "Invalid params: the resourceSubscriptions of one subscriptions/listen are "
        "in at most " +
        std::to_string(kMaxListenFolders) + " folders");
  std::vector<McpResourceWatch::Folder> folders;
  if (container_id.empty() || !api.directory_watches)
    co_return std::make_shared<McpResourceWatch>(std::move(folders));
  auto container = co_await api.containers.async_open(ctx.owner, container_id, /*create=*/false);
  if (container) api.containers.touch(**container);
  container = co_await ready_container(api, std::move(container));
  // Another owner's container, or none: nothing of it is watched (as a file not there).
  if (!container && container.error().status == HttpStatus::not_found)
    co_return std::make_shared<McpResourceWatch>(std::move(folders));
  if (!container) co_return container.error();
  for (auto& [folder, files] : by_folder) {
    auto open = [watches = api.directory_watches, owner = ctx.owner, paths = (*container)->paths,
                 path = folder] { return watches->open(owner, paths, path, /*recursive=*/false); };
    auto watch = co_await run_blocking(std::move(open));
    // The owner's share of watches taken: refused. A folder that is not there, or not
    // one of the container's (outside its mounts): its files are left out.
    if (!watch && watch.error().status == HttpStatus::too_many_requests) co_return watch.error();
    if (!watch) continue;
    folders.push_back(McpResourceWatch::Folder{std::move(*watch), std::move(files)});
  }
  co_return std::make_shared<McpResourceWatch>(std::move(folders));
}

}  // namespace sandboxd::api
