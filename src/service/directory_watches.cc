#include "service/directory_watches.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstring>

#include "base/temp_files.h"

namespace sandboxd::service {
namespace {

namespace asio = boost::asio;

// What a change is (IN_MOVED_TO is a name that appeared, IN_MOVED_FROM one that went
// away by a rename, as fsnotify and so envd report them). Not IN_DONT_FOLLOW: the
// folder is named by its /proc/self/fd link, which must be followed to reach it (the
// descriptor itself was opened without following any symlink out of the mount).
constexpr uint32_t kMask = IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_ATTRIB |
                           IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK;
// How deep a recursive watch descends when it starts.
constexpr int kMaxDepth = 64;

std::string joined(const std::string& folder, std::string_view name) {
  return folder.empty() ? std::string(name) : folder + "/" + std::string(name);
}

}  // namespace

DirectoryWatches::DirectoryWatches(Limits limits) : limits_(limits) {}

Result<std::shared_ptr<DirectoryWatch>> DirectoryWatches::open(const std::string& owner,
                                                               const ContainerPaths& paths,
                                                               const std::string& sandbox_path,
                                                               bool recursive) {
  auto resolved = resolve_sandbox_path(paths, sandbox_path);
  if (!resolved || resolved->host_root.empty())
    return ApiError::invalid_request("'" + sandbox_path.substr(0, 512) +
                                     "' is outside the sandbox's persistent folders (/home/user, "
                                     "/mnt/user-data/outputs, /mnt/user-data/uploads)");
  {
    std::lock_guard lock(mutex_);
    if (per_owner_[owner] >= limits_.per_owner)
      return ApiError::rate_limited("At most " + std::to_string(limits_.per_owner) +
                                        " folder watches at once per owner; stop one first",
                                    1);
    if (total_ >= limits_.total)
      return ApiError::overloaded("The server watches as many folders as it can; try again later", 5);
    ++per_owner_[owner];
    ++total_;
  }
  // From here the share is the watch's: its destructor gives it back.
  std::shared_ptr<DirectoryWatch> watch(
      new DirectoryWatch(*this, owner, recursive, limits_.folders_per_watch));
  const int root = ::open(resolved->host_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return ApiError::internal();
  watch->mount_root_ = UniqueFd(root);
  watch->base_ = resolved->relative;
  const int folder = open_beneath(root, watch->base_.empty() ? "." : watch->base_, O_PATH | O_DIRECTORY);
  if (folder < 0)
    return ApiError::not_found("path " + resolved->sandbox_path + " not found or not a directory");
  ::close(folder);
  const int inotify = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify < 0) {
    spdlog::warn("inotify_init1(IN_NONBLOCK | IN_CLOEXEC): {}", std::strerror(errno));
    return ApiError::overloaded("The server cannot watch more folders now; try again later", 5);
  }
  watch->inotify_ = UniqueFd(inotify);
  if (!watch->add_folder("", 0)) {
    if (watch->folders_.empty())
      return ApiError::not_found("path " + resolved->sandbox_path + " not found or not a directory");
    return ApiError::invalid_request("'" + resolved->sandbox_path + "' has more than " +
                                     std::to_string(limits_.folders_per_watch) +
                                     " folders below it; watch a smaller part");
  }
  // A watch of one folder never opens another: its descriptor of the mount goes now, so
  // that the watch does not keep the container's volume busy (an open descriptor makes
  // its unmount fail, at a stop or at shutdown). The inotify mark does not: an unmount
  // removes it, which ends the watch.
  if (!recursive) watch->mount_root_.reset();
  return watch;
}

void DirectoryWatches::release(const std::string& owner) {
  std::lock_guard lock(mutex_);
  if (auto it = per_owner_.find(owner); it != per_owner_.end() && --it->second == 0) per_owner_.erase(it);
  --total_;
}

DirectoryWatch::DirectoryWatch(DirectoryWatches& owner_limits, std::string owner, bool recursive,
                               size_t max_folders)
    : limits_(owner_limits), owner_(std::move(owner)), recursive_(recursive), max_folders_(max_folders) {}

DirectoryWatch::~DirectoryWatch() {
  stream_.reset();  // (closes the inotify descriptor it owns)
  limits_.release(owner_);
}

namespace {

// The renames from a temporary name whose final name is awaited: both halves come in
// one read of the queue but for a full buffer, so a few suffice.
constexpr size_t kMaxPendingTempRenames = 64;

// The name the kernel gives an O_TMPFILE while it has none ("#" and its inode number),
// for the attribute and data changes it reports of it.
bool is_anonymous_temp(std::string_view leaf, uint32_t mask) {
  if (!(mask & (IN_ATTRIB | IN_MODIFY)) || (mask & (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE)))
    return false;
  if (leaf.size() < 2 || leaf[0] != '#') return false;
  return std::all_of(leaf.begin() + 1, leaf.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

bool DirectoryWatch::add_folder(const std::string& relative, int depth) {
  if (folders_.size() >= max_folders_) return false;
  const std::string below_root =
      base_.empty() ? relative : (relative.empty() ? base_ : base_ + "/" + relative);
  // Opened beneath the mount's root first, then watched through its descriptor: the
  // path never goes through a symlink that leaves the mount.
  const int fd = open_beneath(mount_root_.get(), below_root.empty() ? "." : below_root,
                              O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  if (fd < 0) return !folders_.empty() || !relative.empty();  // gone already: nothing to watch
  UniqueFd folder(fd);
  const std::string through = "/proc/self/fd/" + std::to_string(fd);
  const int wd =
      inotify_add_watch(inotify_.valid() ? inotify_.get() : stream_->native_handle(), through.c_str(), kMask);
  if (wd < 0) {
    spdlog::warn("inotify_add_watch({}, {:#x}): {}", through, kMask, std::strerror(errno));
    return folders_.empty() ? false : true;
  }
  folders_[wd] = relative;
  if (relative.empty()) root_watch_ = wd;
  if (!recursive_ || depth >= kMaxDepth) return true;
  // The folders below, now: symlinks are not followed (d_type, and O_NOFOLLOW above).
  DIR* dir = fdopendir(folder.release());
  if (!dir) return true;
  std::vector<std::string> children;
  while (dirent* entry = readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (entry->d_type == DT_DIR) children.emplace_back(name);
  }
  closedir(dir);
  for (const auto& child : children)
    if (!add_folder(joined(relative, child), depth + 1)) return false;
  return true;
}

std::vector<WatchEvent> DirectoryWatch::take_events(const char* buffer, size_t size, bool& ended) {
  std::vector<WatchEvent> out;
  size_t at = 0;
  while (at + sizeof(inotify_event) <= size) {
    inotify_event event;
    std::memcpy(&event, buffer + at, sizeof event);
    const char* name_at = buffer + at + sizeof(inotify_event);
    at += sizeof(inotify_event) + event.len;
    if (at > size) break;
    if (event.mask & IN_Q_OVERFLOW) {
      spdlog::warn("a folder watch lost events: the kernel's queue overflowed");
      continue;
    }
    auto folder = folders_.find(event.wd);
    if (folder == folders_.end()) continue;
    if (event.mask & IN_IGNORED) {  // the folder went away, or its mount did
      if (event.wd == root_watch_) ended = true;
      folders_.erase(folder);
      continue;
    }
    if (event.mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
      if (event.wd == root_watch_) ended = true;
      continue;  // a folder below is reported by its parent, under its name there
    }
    const std::string_view leaf(name_at, strnlen(name_at, event.len));
    const std::string name = joined(folder->second, leaf);
    auto report = [&](WatchEvent::Type type) { out.push_back({name, type}); };
    // sandboxd writes a file whole (its uploads, the editor's saves): a temporary file,
    // then a rename over the final name. A watcher is told what envd's direct write
    // shows: a write of the final name, nothing of the temporary one. Its events are
    // dropped: those of its name (kTempPrefix) and, while it is an anonymous O_TMPFILE,
    // the ones the kernel names "#<inode>" (its owner and mode set before it is named).
    if (is_temp_name(leaf) || is_anonymous_temp(leaf, event.mask)) {
      if ((event.mask & IN_MOVED_FROM) && event.cookie) {
        temp_renames_.push_back(event.cookie);
        if (temp_renames_.size() > kMaxPendingTempRenames) temp_renames_.pop_front();
      }
      continue;
    }
    if ((event.mask & IN_MOVED_TO) && event.cookie) {
      if (auto it = std::find(temp_renames_.begin(), temp_renames_.end(), event.cookie);
          it != temp_renames_.end()) {
        temp_renames_.erase(it);
        report(WatchEvent::Type::kWrite);
        continue;
      }
    }
    if (event.mask & (IN_CREATE | IN_MOVED_TO)) {
      report(WatchEvent::Type::kCreate);
      if (recursive_ && (event.mask & IN_ISDIR) && !add_folder(name, 0))
        spdlog::warn("a folder watch has {} folders; '{}' and what is below it are not watched", max_folders_,
                     name);
    }
    if (event.mask & IN_MOVED_FROM) report(WatchEvent::Type::kRename);
    if (event.mask & IN_ATTRIB) report(WatchEvent::Type::kChmod);
    if (event.mask & IN_MODIFY) report(WatchEvent::Type::kWrite);
    if (event.mask & IN_DELETE) report(WatchEvent::Type::kRemove);
  }
  return out;
}

void DirectoryWatch::cancel() {
  ended_ = true;
  if (stream_) stream_->cancel();
}

asio::awaitable<Result<std::vector<WatchEvent>>> DirectoryWatch::next(std::chrono::milliseconds wait) {
  if (ended_) co_return ApiError::not_found("the watched folder is gone");
  if (!stream_)
    stream_ = std::make_unique<asio::posix::stream_descriptor>(co_await asio::this_coro::executor,
                                                               inotify_.release());
  asio::steady_timer timer(stream_->get_executor(), wait);
  timer.async_wait([stream = stream_.get()](boost::system::error_code ec) {
    if (!ec) stream->cancel();
  });
  // Events are at least a header each, and a name at most NAME_MAX: this holds many.
  alignas(inotify_event) char buffer[16 * (sizeof(inotify_event) + NAME_MAX + 1)];
  auto [ec, size] =
      co_await stream_->async_read_some(asio::buffer(buffer), asio::as_tuple(asio::use_awaitable));
  timer.cancel();
  if (ended_) co_return ApiError::not_found("the watch has ended");
  if (ec == asio::error::operation_aborted) co_return std::vector<WatchEvent>{};
  if (ec) {
    ended_ = true;
    co_return ApiError::internal();
  }
  bool ended = false;
  auto events = take_events(buffer, size, ended);
  if (ended) ended_ = true;
  co_return events;
}

}  // namespace sandboxd::service
