// Which containers' uploads/ and outputs/ trees saw a change, told by the kernel
// (inotify) rather than found by walking them: a command's result lists the outputs it
// wrote, and a command that changed nothing there (most of them) then needs no walk.
//
// One inotify instance for the whole server. Its watches are put by the index's own
// walk (FileStore::sync, through store/file_walk.h's FolderObserver) on each folder it
// opens, through the descriptor that the walk opened beneath its parent without
// following a symlink, and before the folder's entries are read: a file made after the
// watch exists gives an event, one made before it is seen by the read. A tree is
// "covered" once a walk has put a watch on every one of its folders with nothing
// uncovering it meanwhile (a folder made or moved in, a watch the kernel dropped, the
// kernel's queue overflowing); only then does "no event" mean "no change".
//
// inotify watches are a per-user resource of the host, shared with every owner and
// every other program of the server's user: a tree has at most `folders_per_tree` of
// them (a larger tree is never covered: it is walked after every command as before), the
// server at most `total`. Without inotify (inotify_init1 failing) nothing is covered.
//
// What inotify cannot see: writes through a shared memory mapping made by a process
// that keeps the mapping open (its close, or its exit, is an IN_CLOSE_WRITE event), and
// a file changed through another of its hard links (a walk that meets a file with more
// than one link leaves the tree uncovered).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "base/unique_fd.h"
#include "store/file_walk.h"

namespace sandboxd::store {

class TreeChanges {
 public:
  struct Limits {
    size_t folders_per_tree = 64;
    size_t total = 0;  // 0: a quarter of the host's max_user_watches, at most 100,000
  };
  explicit TreeChanges(Limits limits);
  TreeChanges() : TreeChanges(Limits{}) {}
  ~TreeChanges();
  TreeChanges(const TreeChanges&) = delete;
  TreeChanges& operator=(const TreeChanges&) = delete;

  bool enabled() const { return inotify_.valid(); }
  // The inotify descriptor, to wait for it to be readable (then call drain()).
  int descriptor() const { return inotify_.get(); }
  // Reads every event queued now (non-blocking reads until there are none): cheap, on
  // any thread, an I/O thread's included.
  void drain();

  // The trees of `key` (a container's storage name) are watched from now on (their next
  // walk puts the watches), until forget(key) removes them all. Call both from one
  // sequence (the container's strand), so that a forget never overtakes its track.
  void track(const std::string& key);
  void forget(const std::string& key);

  // A moment of a tree's history: whether it was covered and how many events it had.
  struct Mark {
    uint64_t tree = 0;  // 0: not tracked
    uint64_t generation = 0;
    uint64_t events = 0;
    bool covered = false;
  };
  // Reads no events (a read a command fewer): one still queued from before the call is
  // counted after it, which can only make unchanged_since say false (a walk, never a
  // change missed). The server's loop on descriptor() drains them as they come.
  Mark mark(const std::string& key);
  // True only when the tree was covered at `before` and still is, with not one event
  // since (drained first): nothing under it changed in between.
  bool unchanged_since(const std::string& key, const Mark& before);

  // One walk of a tree's folders, from begin_walk to end_walk (null when the tree is not
  // tracked or inotify is off): watches each folder the walk enters. The walk also says
  // when it met something that events cannot follow (a file with several hard links).
  class Walk : public FolderObserver {
   public:
    void entering(int folder) override;
    void left_out() override { complete_ = false; }
    void uncertain() { complete_ = false; }

   private:
    friend class TreeChanges;
    struct Tree;
    Walk(TreeChanges& owner, std::shared_ptr<Tree> tree, uint64_t generation, bool watching);
    TreeChanges& owner_;
    std::shared_ptr<Tree> tree_;
    uint64_t generation_at_start_;
    bool watching_;  // false for a tree known to be too large: nothing is added
    bool complete_ = true;
    size_t folders_ = 0;
    std::unordered_set<int> seen_;  // the watches of the folders it entered
  };
  std::unique_ptr<Walk> begin_walk(const std::string& key);
  // A walk that entered every folder, put a watch on each and was not overtaken by a
  // change that uncovers the tree leaves the tree covered; it also drops the watches of
  // folders that left the tree (moved away).
  void end_walk(Walk& walk);

  size_t watches() const;  // in use now, for the metrics and the tests

 private:
  using Tree = Walk::Tree;
  void drain_locked();
  void take_events(const char* buffer, size_t size);
  void uncover(Tree& tree);
  void drop_watch(int wd);          // one watch, from the instance and the map; with mutex_ held
  void remove_watches(Tree& tree);  // with mutex_ held

  Limits limits_;
  UniqueFd inotify_;
  mutable std::mutex mutex_;  // guards everything below, and serializes drain's reads
  uint64_t next_tree_ = 1;
  std::unordered_map<std::string, std::shared_ptr<Tree>> trees_;
  std::unordered_map<int, Tree*> tree_of_watch_;
  size_t watches_ = 0;
};

}  // namespace sandboxd::store
