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
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/routes.h"
#include "service/tool_calls.h"

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

// What the GET stream of a session (the revisions 2025-11-25 and older) carries:
// notifications/resources/updated for the files the session subscribed to
// (resources/subscribe), and notifications/message for what its calls did that a client
// may want to know (service::ToolNotice), at or above the level it set
// (logging/setLevel; before that, none). Transport state of one session, held by it
// (api/mcp_sessions.h): its requests add to it, its one stream takes from it.
//
// A subscribed file's folder is watched from the subscribe on (inotify keeps what
// happens until the stream reads it, so a change right after the subscribe's answer
// is not missed); log messages wait, at most kMaxQueuedLogMessages of them (the oldest
// dropped), for a stream to take them. Nothing is kept once sent: the stream's events
// carry no SSE id, and a stream opened again (Last-Event-ID or not) starts afresh.
constexpr size_t kMaxSessionSubscriptions = 100;
constexpr size_t kMaxSessionFolders = 4;
constexpr size_t kMaxQueuedLogMessages = 100;

class McpSessionEvents {
 public:
  // The protocol's log levels (RFC 5424's), lowest first; nullopt for another name.
  static std::optional<int> log_level(std::string_view name);
  void set_log_level(int level);
  // Queued for the stream when at or above the level set.
  void log(const service::ToolNotice& notice);

  // resources/subscribe: watches the file `uri` names (a file of one of the owner's
  // containers, whose folder is there; another URI is accepted and never fires). 400
  // past kMaxSessionSubscriptions URIs or kMaxSessionFolders folders, 429 past the
  // owner's share of folder watches.
  asio::awaitable<Result<void>> subscribe(ApiContext& api, RequestContext& ctx, const std::string& uri);
  // resources/unsubscribe: no more notifications for `uri` (one not subscribed: nothing).
  void unsubscribe(const std::string& uri);

  // The stream's next events, as SSE frames, waiting at most about `wait` for one:
  // empty when nothing came meanwhile. One caller at a time (the session's one stream).
  asio::awaitable<std::string> next(std::chrono::milliseconds wait);

 private:
  struct Folder {
    std::shared_ptr<service::DirectoryWatch> watch;
    std::map<std::string, std::string> files;  // name in the folder -> URI
  };
  std::mutex mutex_;
  std::optional<int> level_;
  std::deque<std::string> logs_;                            // SSE frames
  std::set<std::string> uris_;                              // subscribed, watched or not
  std::map<std::string, std::shared_ptr<Folder>> folders_;  // container + '\n' + folder
};

// The container the URIs of a subscriptions/listen name ("" for none): in cluster mode
// the listen runs on the replica holding it, where the command writes.
std::string mcp_container_of_listen(const boost::json::object& params);

}  // namespace sandboxd::api
