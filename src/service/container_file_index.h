// What file discovery (discovery.h) knows of a container's file index: whether code may
// have written files since the last walk, whether a walk is scheduled or running, and
// the outputs the last commands were told they changed. Part of Container (its `index`).
//
// Locking: every member is behind one mutex, taken inside each method and never held
// across a walk or a call out of this class; any thread may call any method.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace sandboxd::service {

class ContainerFileIndex {
 public:
  using Clock = std::chrono::steady_clock;
  // ctime (ns) of each output a command was told it changed (store::OutputChanges).
  using ReportedOutputs = std::unordered_map<std::string, int64_t>;

  // Something may have written files (an API write): the next listing walks.
  void note_change() {
    std::lock_guard lock(mutex_);
    dirty_ = true;
  }
  // An execution ended: the index is dirty, and a sync is to be scheduled unless one
  // already is. The wait before it (so that executions in quick succession, within
  // `coalesce` of the last walk, share one walk), or nullopt when one is scheduled.
  std::optional<Clock::duration> schedule_sync(Clock::duration coalesce) {
    std::lock_guard lock(mutex_);
    dirty_ = true;
    if (sync_scheduled_) return std::nullopt;
    sync_scheduled_ = true;
    const auto since = Clock::now() - synced_at_;
    return since < coalesce ? coalesce - since : Clock::duration{};
  }
  // The scheduled sync begins (a later execution schedules another).
  void scheduled_sync_began() {
    std::lock_guard lock(mutex_);
    sync_scheduled_ = false;
  }

  // A walk of the files, from its start (clean as of now) to its end. While one runs a
  // listing walks too: the running walk may not have reached the files yet.
  class Walk {
   public:
    explicit Walk(ContainerFileIndex& index) : index_(index) {
      std::lock_guard lock(index_.mutex_);
      index_.dirty_ = false;
      index_.synced_at_ = Clock::now();
      ++index_.walks_running_;
    }
    ~Walk() {
      std::lock_guard lock(index_.mutex_);
      --index_.walks_running_;
    }
    Walk(const Walk&) = delete;
    Walk& operator=(const Walk&) = delete;

   private:
    ContainerFileIndex& index_;
  };

  // A listing must walk first: files may have been written since the last walk, a walk
  // runs now, or (`running`: the sandbox runs and writes without telling) the last walk
  // is older than `refresh`.
  bool stale(bool running, Clock::duration refresh) const {
    std::lock_guard lock(mutex_);
    return dirty_ || walks_running_ > 0 || (running && Clock::now() - synced_at_ > refresh);
  }

  // The outputs reported to commands, as a walk compares them.
  ReportedOutputs reported_outputs() const {
    std::lock_guard lock(mutex_);
    return reported_outputs_;
  }
  // Kept only while a later command's start may still share their tick: a ctime below
  // `since_ns` (a command's start) can never be at or after a later one's. `now`: the
  // outputs that command was told of.
  void keep_reported_since(int64_t since_ns, const ReportedOutputs& now = {}) {
    std::lock_guard lock(mutex_);
    std::erase_if(reported_outputs_, [since_ns](const auto& entry) { return entry.second < since_ns; });
    for (const auto& [path, ctime_ns] : now) reported_outputs_[path] = ctime_ns;
  }

 private:
  mutable std::mutex mutex_;
  Clock::time_point synced_at_{};
  bool dirty_ = true;  // code may have written files since the last sync
  bool sync_scheduled_ = false;
  int walks_running_ = 0;
  ReportedOutputs reported_outputs_;
};

}  // namespace sandboxd::service
