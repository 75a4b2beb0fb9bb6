// Watching a container's folder for changes, for clients that follow a folder while
// code works in it (E2B's envd WatchDir): what was created, written, removed, renamed
// or had its mode changed below it, by name relative to it, from now on.
//
// inotify on the host side of the container's mounts: the sandbox writes the same
// inodes, so its changes are seen whether they come from its code or from the API. The
// watched folder and every folder added later are opened through openat2 beneath the
// mount's root (base/sandbox_paths.h), so a symlink that code made never puts a watch
// outside the container.
//
// inotify instances and watches are limited per user of the host (the server's, for
// every owner at once): each owner has a share of watches, the server a total, and a
// watch a number of folders, so that one owner's watches cannot take them from others.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/sandbox_paths.h"
#include "base/unique_fd.h"

namespace sandboxd::service {

struct WatchEvent {
  // The numbers are E2B's EventType's.
  enum class Type { kCreate = 1, kWrite = 2, kRemove = 3, kRename = 4, kChmod = 5 };
  std::string name;  // below the watched folder: "a.txt", "sub/b.txt"
  Type type = Type::kCreate;
};

class DirectoryWatch;

class DirectoryWatches {
 public:
  struct Limits {
    size_t per_owner = 8;             // watches open at once, per owner
    size_t total = 64;                // and for the whole server (well under a host's 128 instances)
    size_t folders_per_watch = 1000;  // a recursive watch's folders (each an inotify watch)
  };
  explicit DirectoryWatches(Limits limits);
  DirectoryWatches() : DirectoryWatches(Limits{}) {}

  // Starts watching `sandbox_path` (a folder of the container's mounts) and, when
  // `recursive`, the folders below it. Blocking (opens, walks the tree): run it on the
  // blocking pool. 404 when it is not a folder there, 429 past the owner's share or the
  // server's total.
  Result<std::shared_ptr<DirectoryWatch>> open(const std::string& owner, const ContainerPaths& paths,
                                               const std::string& sandbox_path, bool recursive);

 private:
  friend class DirectoryWatch;
  void release(const std::string& owner);

  Limits limits_;
  std::mutex mutex_;
  std::map<std::string, size_t> per_owner_;
  size_t total_ = 0;
};

// One open watch; closing it (dropping the last reference) ends it and gives back its
// share.
class DirectoryWatch {
 public:
  ~DirectoryWatch();
  DirectoryWatch(const DirectoryWatch&) = delete;
  DirectoryWatch& operator=(const DirectoryWatch&) = delete;

  // The changes since the last call, waiting at most `wait` for one: empty when nothing
  // came meanwhile (the caller may send a keep-alive). An error once the folder is gone
  // (removed, or its mount went away). One caller at a time, on one executor.
  boost::asio::awaitable<Result<std::vector<WatchEvent>>> next(std::chrono::milliseconds wait);
  // Ends the watch (its reader went away): a waiting next() returns at once, with an
  // error. Call it on next()'s executor.
  void cancel();

 private:
  friend class DirectoryWatches;
  DirectoryWatch(DirectoryWatches& owner_limits, std::string owner, bool recursive, size_t max_folders);
  // Watches the folder `relative` below the mount's root (""= the root's own folder
  // relative path `base`), and below it when recursive. Returns false past the limit.
  bool add_folder(const std::string& relative, int depth);
  std::vector<WatchEvent> take_events(const char* buffer, size_t size, bool& ended);

  DirectoryWatches& limits_;
  std::string owner_;
  bool recursive_;
  size_t max_folders_;
  UniqueFd mount_root_;  // O_PATH of the mount's host directory
  std::string base_;     // the watched folder, relative to the mount's root
  UniqueFd inotify_;
  int root_watch_ = -1;
  std::map<int, std::string> folders_;  // watch descriptor -> folder below the watched one
  // The cookies of renames away from sandboxd's own temporary names whose other half
  // (the final name) has not come yet: that half is the write of the final name.
  std::deque<uint32_t> temp_renames_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> stream_;
  bool ended_ = false;
};

}  // namespace sandboxd::service
