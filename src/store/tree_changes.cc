#include "store/tree_changes.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <vector>

namespace sandboxd::store {
namespace {

// Every change to a folder's entries and to the files in it. Not IN_DONT_FOLLOW: the
// folder is named by its /proc/self/fd link, which must be followed to reach it (the
// descriptor itself was opened without following any symlink of the sandbox's).
constexpr uint32_t kMask = IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO |
                           IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

constexpr size_t kMaxTotal = 100'000;

size_t default_total() {
  size_t host = 0;
  std::ifstream in("/proc/sys/fs/inotify/max_user_watches");
  if (!(in >> host) || host == 0) host = 8192;  // the kernel's smallest default
  return std::min(host / 4, kMaxTotal);
}

}  // namespace

struct TreeChanges::Walk::Tree {
  uint64_t id = 0;
  uint64_t events = 0;
  uint64_t generation = 0;
  bool covered = false;
  bool oversized = false;  // its last walk had more folders than a tree may watch
  bool forgotten = false;
  std::unordered_set<int> watches;
};

TreeChanges::TreeChanges(Limits limits) : limits_(limits) {
  if (limits_.total == 0) limits_.total = default_total();
  inotify_ = UniqueFd(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
}

TreeChanges::~TreeChanges() = default;  // closing the instance drops its watches

void TreeChanges::drain() {
  if (!enabled()) return;
  std::lock_guard lock(mutex_);
  drain_locked();
}

void TreeChanges::drain_locked() {
  // Events are a header each and a name of at most NAME_MAX: this holds many.
  alignas(inotify_event) char buffer[16 * (sizeof(inotify_event) + NAME_MAX + 1)];
  for (;;) {
    const ssize_t got = ::read(inotify_.get(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;  // EAGAIN: nothing more queued
    take_events(buffer, static_cast<size_t>(got));
  }
}

void TreeChanges::take_events(const char* buffer, size_t size) {
  for (size_t at = 0; at + sizeof(inotify_event) <= size;) {
    inotify_event event;
    std::memcpy(&event, buffer + at, sizeof event);
    at += sizeof(inotify_event) + event.len;
    if (event.mask & IN_Q_OVERFLOW) {  // events were lost: nothing is known any more
      for (auto& [key, tree] : trees_) uncover(*tree);
      continue;
    }
    auto found = tree_of_watch_.find(event.wd);
    if (found == tree_of_watch_.end()) continue;  // a watch removed meanwhile
    Tree& tree = *found->second;
    ++tree.events;
    if (event.mask & IN_IGNORED) {  // the folder is gone, or its file system: walk again
      tree.watches.erase(event.wd);
      tree_of_watch_.erase(found);
      --watches_;
      uncover(tree);
    } else if (((event.mask & IN_ISDIR) && (event.mask & (IN_CREATE | IN_MOVED_TO))) ||
               (event.mask & (IN_MOVE_SELF | IN_UNMOUNT))) {
      uncover(tree);  // a folder without a watch yet, or one that moved
    }
  }
}

void TreeChanges::uncover(Tree& tree) {
  tree.covered = false;
  ++tree.generation;
}

void TreeChanges::drop_watch(int wd) {
  inotify_rm_watch(inotify_.get(), wd);  // its IN_IGNORED then names no tree
  tree_of_watch_.erase(wd);
  --watches_;
}

void TreeChanges::remove_watches(Tree& tree) {
  for (int wd : tree.watches) drop_watch(wd);
  tree.watches.clear();
  uncover(tree);
}

void TreeChanges::track(const std::string& key) {
  if (!enabled()) return;
  std::lock_guard lock(mutex_);
  auto& tree = trees_[key];
  if (tree) return;
  tree = std::make_shared<Tree>();
  tree->id = next_tree_++;
}

void TreeChanges::forget(const std::string& key) {
  if (!enabled()) return;
  std::lock_guard lock(mutex_);
  auto found = trees_.find(key);
  if (found == trees_.end()) return;
  remove_watches(*found->second);
  found->second->forgotten = true;  // a walk still running adds nothing more
  trees_.erase(found);
}

TreeChanges::Mark TreeChanges::mark(const std::string& key) {
  Mark out;
  if (!enabled()) return out;
  std::lock_guard lock(mutex_);
  auto found = trees_.find(key);
  if (found == trees_.end()) return out;
  const Tree& tree = *found->second;
  out.tree = tree.id;
  out.generation = tree.generation;
  out.events = tree.events;
  out.covered = tree.covered;
  return out;
}

bool TreeChanges::unchanged_since(const std::string& key, const Mark& before) {
  if (!enabled() || before.tree == 0 || !before.covered) return false;
  std::lock_guard lock(mutex_);
  drain_locked();
  auto found = trees_.find(key);
  if (found == trees_.end()) return false;
  const Tree& tree = *found->second;
  return tree.id == before.tree && tree.covered && tree.generation == before.generation &&
         tree.events == before.events;
}

std::unique_ptr<TreeChanges::Walk> TreeChanges::begin_walk(const std::string& key) {
  if (!enabled()) return nullptr;
  std::lock_guard lock(mutex_);
  auto found = trees_.find(key);
  if (found == trees_.end()) return nullptr;
  const auto& tree = found->second;
  return std::unique_ptr<Walk>(new Walk(*this, tree, tree->generation, !tree->oversized));
}

TreeChanges::Walk::Walk(TreeChanges& owner, std::shared_ptr<Tree> tree, uint64_t generation, bool watching)
    : owner_(owner),
      tree_(std::move(tree)),
      generation_at_start_(generation),
      watching_(watching),
      complete_(watching) {}

void TreeChanges::Walk::entering(int folder) {
  ++folders_;
  if (!watching_) return;  // counted only: whether the tree is still too large
  if (folders_ > owner_.limits_.folders_per_tree) {
    complete_ = false;
    return;
  }
  const std::string through = "/proc/self/fd/" + std::to_string(folder);
  // The watch is added and entered in the map in one step: an event of it that a drain
  // reads must find its tree.
  std::lock_guard lock(owner_.mutex_);
  if (tree_->forgotten) {
    complete_ = false;
    return;
  }
  const int wd = inotify_add_watch(owner_.inotify_.get(), through.c_str(), kMask);
  if (wd < 0) {  // ENOSPC: the host's watches are used up; the tree is walked as before
    complete_ = false;
    return;
  }
  auto found = owner_.tree_of_watch_.find(wd);
  if (found == owner_.tree_of_watch_.end()) {  // a new watch: within the server's total?
    if (owner_.watches_ >= owner_.limits_.total) {
      inotify_rm_watch(owner_.inotify_.get(), wd);
      complete_ = false;
      return;
    }
    owner_.tree_of_watch_.emplace(wd, tree_.get());
    tree_->watches.insert(wd);
    ++owner_.watches_;
  } else if (found->second != tree_.get()) {  // a folder of another tree (never, unless mounted twice)
    complete_ = false;
    return;
  }
  seen_.insert(wd);
}

void TreeChanges::end_walk(Walk& walk) {
  std::lock_guard lock(mutex_);
  drain_locked();  // what happened during the walk counts before it is judged
  Tree& tree = *walk.tree_;
  if (tree.forgotten) return;
  if (walk.folders_ > limits_.folders_per_tree) {
    tree.oversized = true;  // not watched at all until a walk finds it small enough again
    remove_watches(tree);
    return;
  }
  tree.oversized = false;
  if (!walk.complete_) uncover(tree);  // a folder it could not watch, a file events cannot follow
  if (!walk.complete_ || tree.generation != walk.generation_at_start_) {
    // Watches of folders that left the tree pile up only while no walk is clean: a
    // tree that keeps them from being pruned loses them all and starts over.
    if (tree.watches.size() > limits_.folders_per_tree) remove_watches(tree);
    return;
  }
  // Every folder of the tree has a watch and none appeared meanwhile: folders the walk
  // did not enter are no longer in it (moved away).
  std::vector<int> stale;
  for (int wd : tree.watches)
    if (!walk.seen_.count(wd)) stale.push_back(wd);
  for (int wd : stale) {
    drop_watch(wd);
    tree.watches.erase(wd);
  }
  tree.covered = true;
}

size_t TreeChanges::watches() const {
  std::lock_guard lock(mutex_);
  return watches_;
}

}  // namespace sandboxd::store
