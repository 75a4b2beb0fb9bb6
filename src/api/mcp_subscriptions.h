// Resource subscriptions of MCP's 2026-07-28 revision (subscriptions/listen with
// `resourceSubscriptions`): a client names files of a container by their resource URIs
// and learns when one appears, is written, renamed or removed, for instance when a
// command writes an output. The folders holding the files are watched with inotify
// (service/directory_watches.h: the owner's share of watches, a watch's folders, and
// every folder opened beneath its mount, never through a link code made).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "api/routes.h"

namespace sandboxd::service {
class DirectoryWatch;
}

namespace sandboxd::api {

// The URIs one listen may name, and the folders they may be in.
constexpr size_t kMaxListenUris = 100;
constexpr size_t kMaxListenFolders = 4;

class McpResourceWatch {
 public:
  struct Folder {
    std::shared_ptr<service::DirectoryWatch> watch;
    std::vector<std::pair<std::string, std::string>> files;  // name in the folder, URI
  };
  explicit McpResourceWatch(std::vector<Folder> folders);

  // The URIs watched (honoured), in the order asked.
  const std::vector<std::string>& uris() const { return uris_; }
  // The watched URIs changed since the last call (each once), waiting at most `wait`:
  // empty when nothing changed meanwhile. An error once a watched folder is gone.
  asio::awaitable<Result<std::vector<std::string>>> next(std::chrono::milliseconds wait);
  // Ends the watches (the client went away): a waiting next() returns. On next()'s executor.
  void cancel();

 private:
  std::vector<Folder> folders_;
  std::vector<std::string> uris_;
};

// Watches the files `uris` name: all of one container of the owner's (else 400), at most
// kMaxListenUris in at most kMaxListenFolders folders (else 400). A URI whose folder is
// not there, or not of the container's mounts (or that names no file of a container),
// is left out of the watch, which says so by its uris(). 429 past the owner's share of
// watches.
asio::awaitable<Result<std::shared_ptr<McpResourceWatch>>> mcp_watch_resources(
    ApiContext& api, RequestContext& ctx, const boost::json::array& uris);

// The container the URIs of a subscriptions/listen name ("" for none): in cluster mode
// the listen runs on the replica holding it, where the command writes.
std::string mcp_container_of_listen(const boost::json::object& params);

}  // namespace sandboxd::api
