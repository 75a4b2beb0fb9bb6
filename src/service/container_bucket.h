// A container's durable copy in the sessions bucket as this replica sees it
// (storage.backend s3; cluster/container_durability.h does the copying): whether the
// local copy was checked against the bucket's manifest, which changes are not flushed
// yet, how the last flushes went. Part of Container (its `bucket`).
//
// Locking: a transfer (a flush or a restore) runs on a blocking thread and holds
// transfer_lock() throughout, so one runs at a time per container, and a removal of
// rows (forget_files) never falls between a flush's walk and its row writes. The counts
// and flags are atomics, read and written by any thread without that lock: executions
// and API writes note their changes, the flusher reads them each tick.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

namespace sandboxd::service {

class ContainerBucket {
 public:
  // Held by one flush or restore of the container at a time (blocking threads).
  [[nodiscard]] std::unique_lock<std::mutex> transfer_lock() { return std::unique_lock(transfer_mutex_); }

  // The local copy was checked against the manifest (and restored where it had to be);
  // until then it may be missing or stale, and is never flushed.
  bool local_ready() const { return local_ready_.load(); }
  void local_is_ready() { local_ready_ = true; }
  // Stale from now on (a lease newly taken, or lost): checked again before its next use.
  void invalidate_local() { local_ready_ = false; }

  // Something changed its files (an execution's start and end, an API write or
  // deletion, a checkpoint): the next flush sends it.
  void note_change() { ++changes_; }
  // Where a flush starts: what flush_succeeded takes once it went up whole.
  uint64_t changes_so_far() const { return changes_.load(); }
  // Changes were noted since the last good flush (or restore).
  bool has_unflushed_changes() const { return changes_.load() != flushed_changes_.load(); }
  // Nothing left to send and no flush failing: its lease may go.
  bool releasable() const { return !flush_failed_.load() && !has_unflushed_changes(); }
  // A flush is worth running now (changes to send, or a failed one to retry).
  bool needs_flush() const { return has_unflushed_changes() || flush_failed_.load(); }
  // The flusher's timing: a failed flush is retried when its backoff ends; else one
  // runs `interval_ms` after the last, when something changed (`executing`: a command
  // runs now and may be writing).
  bool flush_due(int64_t now_ms, int64_t interval_ms, bool executing) const {
    if (flush_failed_.load()) return now_ms >= retry_at_ms_.load();
    return (executing || has_unflushed_changes()) && now_ms - last_flush_ms_.load() >= interval_ms;
  }

  // The tree went up whole: the changes noted before the flush started are in the bucket.
  void flush_succeeded(uint64_t changes_at_start) { flushed_changes_ = changes_at_start; }
  // The local copy is the bucket's as of now (restored, or let go of: nothing of it is
  // ever to be sent).
  void caught_up() { flushed_changes_ = changes_.load(); }
  // A flush's outcome, for its retries: a success clears the failures; a failure is
  // retried after a backoff that doubles each time, up to `max_delay_ms`. Until a flush
  // succeeds the container is not released.
  void flush_ended_well(int64_t now_ms) {
    flush_failed_ = false;
    flush_failures_ = 0;
    last_flush_ms_ = now_ms;
  }
  void flush_ended_badly(int64_t now_ms, int64_t max_delay_ms) {
    const int failures = ++flush_failures_;
    flush_failed_ = true;
    retry_at_ms_ = now_ms + std::min<int64_t>(max_delay_ms, 1000LL << std::min(failures, 16));
  }
  // This copy is no longer the container's (fenced): nothing to retry, nothing to send.
  void let_go() {
    flush_failed_ = false;
    flush_failures_ = 0;
    caught_up();
  }

  // What the last flush could not send (bytes), for the pending-bytes gauge.
  uint64_t unflushed_bytes() const { return unflushed_bytes_.load(); }
  void set_unflushed_bytes(uint64_t bytes) { unflushed_bytes_ = bytes; }

 private:
  std::mutex transfer_mutex_;
  std::atomic<bool> local_ready_{false};
  std::atomic<uint64_t> changes_{0};          // bumped by executions and API deletions
  std::atomic<uint64_t> flushed_changes_{0};  // `changes_` as of the last good flush
  std::atomic<bool> flush_failed_{false};     // retried with backoff; never released meanwhile
  std::atomic<int> flush_failures_{0};
  std::atomic<int64_t> last_flush_ms_{0}, retry_at_ms_{0};  // steady clock
  std::atomic<uint64_t> unflushed_bytes_{0};
};

}  // namespace sandboxd::service
