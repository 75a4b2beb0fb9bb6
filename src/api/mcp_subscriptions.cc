#include "api/mcp_subscriptions.h"

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <map>

#include "api/file_transfer.h"
#include "base/blocking.h"
#include "base/utf8.h"
#include "model/sse.h"
#include "server/router.h"
#include "service/container_service.h"
#include "service/directory_watches.h"

namespace sandboxd::api {

using service::ContainerFiles;
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

using FolderWatches = std::map<std::string, std::shared_ptr<service::DirectoryWatch>>;

// Watches of the folders `folders` of the owner's container `container_id`: those that
// are there, of the container's mounts (the others are left out, as is every folder of
// a container that is not the owner's). An error when the owner's share of watches is
// taken, or the container cannot be made ready.
asio::awaitable<Result<FolderWatches>> open_folder_watches(ApiContext& api, RequestContext& ctx,
                                                           const std::string& container_id,
                                                           const std::vector<std::string>& folders) {
  FolderWatches watches;
  if (container_id.empty() || folders.empty()) co_return watches;
  ContainerFiles files(api);
  auto container = co_await files.open_ready(ctx.owner, container_id, /*create=*/false);
  if (container) api.containers.lifecycle().touch(**container);
  // Another owner's container, or none: nothing of it is watched (as a file not there).
  if (!container && container.error().kind == ErrorKind::not_found) co_return watches;
  if (!container) co_return container.error();
  for (const auto& folder : folders) {
    auto open = [watches = &api.directory_watches, owner = ctx.owner, paths = (*container)->paths,
                 path = folder] { return watches->open(owner, paths, path, /*recursive=*/false); };
    auto watch = co_await run_blocking(std::move(open));
    // The owner's share of watches taken: refused. A folder that is not there, or not
    // one of the container's (outside its mounts): its files are left out.
    if (!watch && watch.error().kind == ErrorKind::rate_limited) co_return watch.error();
    if (!watch) continue;
    watches.emplace(folder, std::move(*watch));
  }
  co_return watches;
}

// The folder of a sandbox path ("/" for a file at the root) and the file's name in it.
std::pair<std::string, std::string> split_path(const std::string& path) {
  const auto slash = path.rfind('/');
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

std::string sse_message(const json::object& message) {
  return model::format_sse("message", json::serialize(message));
}

constexpr std::array<std::string_view, 8> kLogLevels{"debug", "info",     "notice", "warning",
                                                     "error", "critical", "alert",  "emergency"};

}  // namespace

std::optional<int> McpSessionEvents::log_level(std::string_view name) {
  for (size_t i = 0; i < kLogLevels.size(); ++i)
    if (kLogLevels[i] == name) return static_cast<int>(i);
  return std::nullopt;
}

void McpSessionEvents::set_log_level(int level) {
  std::lock_guard lock(mutex_);
  level_ = level;
}

void McpSessionEvents::log(const service::ToolNotice& notice) {
  const int level = notice.level == service::ToolNotice::Level::kWarning  ? 3
                    : notice.level == service::ToolNotice::Level::kNotice ? 2
                                                                          : 1;
  json::object message{
      {"jsonrpc", "2.0"},
      {"method", "notifications/message"},
      {"params", {{"level", kLogLevels[level]}, {"logger", "sandboxd"}, {"data", notice.message}}}};
  std::lock_guard lock(mutex_);
  if (!level_ || level < *level_) return;
  logs_.push_back(sse_message(message));
  if (logs_.size() > kMaxQueuedLogMessages) logs_.pop_front();
}

asio::awaitable<Result<void>> McpSessionEvents::subscribe(ApiContext& api, RequestContext& ctx,
                                                          const std::string& uri) {
  const auto parsed = parse_file_uri(uri);
  std::string key, name;
  std::string folder;
  {
    std::lock_guard lock(mutex_);
    if (uris_.contains(uri)) co_return Result<void>{};
    if (uris_.size() >= kMaxSessionSubscriptions)
      co_return ApiError::invalid_request("Invalid params: at most " +
                                          std::to_string(kMaxSessionSubscriptions) +
                                          " resource subscriptions in one session (unsubscribe one first)");
    if (!parsed) {  // no file of a container: accepted, never fires
      uris_.insert(uri);
      co_return Result<void>{};
    }
    std::tie(folder, name) = split_path(parsed->path);
    key = parsed->container + "\n" + folder;
    if (auto it = folders_.find(key); it != folders_.end()) {
      it->second->files[name] = uri;
      uris_.insert(uri);
      co_return Result<void>{};
    }
    if (folders_.size() >= kMaxSessionFolders)
      co_return ApiError::invalid_request(
          "Invalid params: the resource subscriptions of one session are files in at "
          "most " +
          std::to_string(kMaxSessionFolders) + " folders (unsubscribe first)");
  }
  // Opened without the lock (a container made ready, a folder opened): a subscribe of
  // the same folder meanwhile is the one kept.
  const std::vector<std::string> folders{folder};
  auto watches = co_await open_folder_watches(api, ctx, parsed->container, folders);
  if (!watches) co_return watches.error();
  std::lock_guard lock(mutex_);
  if (uris_.size() >= kMaxSessionSubscriptions)
    co_return ApiError::invalid_request("Invalid params: at most " +
                                        std::to_string(kMaxSessionSubscriptions) +
                                        " resource subscriptions in one session (unsubscribe one first)");
  uris_.insert(uri);
  if (watches->empty()) co_return Result<void>{};  // the folder is not there: never fires
  auto& entry = folders_[key];
  if (!entry) entry = std::make_shared<Folder>(Folder{std::move(watches->begin()->second), {}});
  entry->files[name] = uri;
  co_return Result<void>{};
}

void McpSessionEvents::unsubscribe(const std::string& uri) {
  std::lock_guard lock(mutex_);
  if (!uris_.erase(uri)) return;
  for (auto it = folders_.begin(); it != folders_.end(); ++it) {
    auto& files = it->second->files;
    for (auto file = files.begin(); file != files.end(); ++file) {
      if (file->second != uri) continue;
      files.erase(file);
      // Its watch ends once the stream lets it go too.
      if (files.empty()) folders_.erase(it);
      return;
    }
  }
}

asio::awaitable<std::string> McpSessionEvents::next(std::chrono::milliseconds wait) {
  // Each folder is read a slice at a time in turn, and the log messages between the
  // rounds: a change or a message shows at most a round late.
  constexpr std::chrono::milliseconds kSlice{100};
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::string frames;
  for (;;) {
    std::vector<std::pair<std::string, std::shared_ptr<Folder>>> folders;
    {
      std::lock_guard lock(mutex_);
      while (!logs_.empty()) {
        frames += logs_.front();
        logs_.pop_front();
      }
      folders.assign(folders_.begin(), folders_.end());
    }
    if (folders.empty()) {
      if (!frames.empty() || std::chrono::steady_clock::now() >= deadline) co_return frames;
      asio::steady_timer timer(co_await asio::this_coro::executor, kSlice);
      co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    for (const auto& [key, folder] : folders) {
      auto events = co_await folder->watch->next(frames.empty() ? kSlice : std::chrono::milliseconds(0));
      std::lock_guard lock(mutex_);
      if (!events) {  // the folder went away: its files are subscribed still, unwatched
        if (auto it = folders_.find(key); it != folders_.end() && it->second == folder) folders_.erase(it);
        continue;
      }
      std::vector<std::string> changed;
      for (const auto& event : *events)
        if (auto file = folder->files.find(event.name);
            file != folder->files.end() &&
            std::find(changed.begin(), changed.end(), file->second) == changed.end())
          changed.push_back(file->second);
      for (const auto& uri : changed)
        frames += sse_message(json::object{
            {"jsonrpc", "2.0"}, {"method", "notifications/resources/updated"}, {"params", {{"uri", uri}}}});
    }
    if (!frames.empty() || std::chrono::steady_clock::now() >= deadline) co_return frames;
  }
}

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
  std::vector<std::string> names;
  for (const auto& [folder, files] : by_folder) names.push_back(folder);
  auto watches = co_await open_folder_watches(api, ctx, container_id, names);
  if (!watches) co_return watches.error();
  std::vector<McpResourceWatch::Folder> folders;
  for (auto& [folder, files] : by_folder)
    if (auto it = watches->find(folder); it != watches->end())
      folders.push_back(McpResourceWatch::Folder{std::move(it->second), std::move(files)});
  co_return std::make_shared<McpResourceWatch>(std::move(folders));
}

}  // namespace sandboxd::api
