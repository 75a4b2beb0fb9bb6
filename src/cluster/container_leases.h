// This replica's side of the container leases (store/lease_store.h): which
// replica serves a container, taking a lease before serving one, the replica's
// heartbeat that keeps every held lease (one statement every leaseSeconds/3, whatever
// the number held), the paced takeover of the containers of a replica whose heartbeat
// ran out (cluster/takeover_pacer.h), releasing a lease when its sandbox stops, and the
// fence every write to a container's file records passes.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "cluster/takeover_pacer.h"
#include "service/cluster_hooks.h"
#include "store/lease_store.h"

namespace sandboxd::cluster {

namespace asio = boost::asio;

class ContainerLeases : public service::LeaseKeeper {
 public:
  struct Settings {
    std::string replica_id;
    std::string advertise_url;
    std::chrono::seconds lease{15};
    int retry_after_sec = 1;
    // Containers this replica takes over a second from replicas whose heartbeat ran out
    // (requests for them and the background together), and the most the background
    // takes in one statement (also the most taken at once after a quiet while).
    double takeover_per_second = 500;
    int takeover_batch = 100;
  };
  ContainerLeases(asio::io_context& io, store::LeaseStore& store, Settings settings);

  const Settings& settings() const { return settings_; }

  // Who serves a container now: another replica whose lease is live (the request is
  // relayed to `holder_url`), or nobody else (this replica serves it, taking the lease).
  // `takeover`: nobody serves it, but a replica whose heartbeat ran out (or an earlier
  // run of this one) held it: serving it here takes it over, at the pace of
  // takeover_turn(). A container held here under a recent heartbeat (the rule of
  // confirmed()), or one renewed now, is answered without reading the leases table; any
  // other asks the database (and throws its failures, store::db::TimeoutError included).
  struct Holder {
    bool elsewhere = false;
    bool takeover = false;
    std::string holder, holder_url;
  };
  Holder holder_of(const std::string& storage);

  // A request's turn to take a container over (Holder::takeover): waits on a timer, never
  // on a thread, until the pacer has a claim for it. False when its turn is more than
  // kTakeoverWait away: the request is answered 503 with Retry-After instead.
  static constexpr std::chrono::seconds kTakeoverWait{2};
  asio::awaitable<bool> takeover_turn();

  // One round of the background takeover (the loop runs one every so often; tests call
  // it directly): reads which other replicas' heartbeats have run out; one that stayed
  // so for 2 x leaseSeconds while this replica's own heartbeat was confirmed is dead, and
  // up to takeover_batch of its containers (as many as the pacer has claims free) are
  // taken in one statement. A taken container is held here as if a request had claimed
  // it; its first request makes its local copy current (Claim::fresh).
  struct TakeoverRound {
    size_t taken = 0;
    bool dead = false;      // a dead replica had containers left to take
    bool watching = false;  // another replica's heartbeat has run out, not for long enough yet
  };
  TakeoverRound take_over_round();

  // The LeaseKeeper calls (service/cluster_hooks.h).
  Result<Claim> claim(const std::string& storage, bool existing_container = true) override;
  bool confirmed(const std::string& storage) const override;
  bool release(const std::string& storage) override;
  void drop(const std::string& storage, bool deleted = false, bool lost = false) override;
  void fenced(const store::FencedError& fenced) override;
  std::vector<std::string> held() const override;
  void set_on_lost(std::function<void(const std::string& storage)> on_lost) override {
    on_lost_ = std::move(on_lost);
  }

  // The epoch under which `storage`'s file records may be answered from memory
  // (Metadata::enable_file_cache): its lease's while confirmed(storage), none otherwise.
  // Confirmed means no other replica can have taken the container yet (a takeover waits
  // for this replica's heartbeat to run out, leaseSeconds after it was renewed), so
  // every write to its records since the epoch began was this replica's own.
  std::optional<int64_t> cache_epoch(const std::string& storage) const;
  // Called with each container this replica lets go of (released, dropped, lost with the
  // incarnation, fenced, found held elsewhere), outside the leases' lock. Set before
  // serving.
  void set_on_let_go(std::function<void(const std::string& storage)> on_let_go) {
    on_let_go_ = std::move(on_let_go);
  }

  // The fence (Metadata::set_write_fence): throws store::FencedError unless `storage`'s
  // lease still has the epoch this replica took it at.
  // Returns the epoch it checked.
  int64_t check_fence(store::db::Connection& conn, const std::string& storage) const;

  // Registers this replica (a new incarnation: whatever an earlier run of it held is
  // free, to be taken again at the next epoch). Before the first claim.
  void register_replica();
  // The heartbeat and the background takeover, until stop().
  void start();
  // One heartbeat now, as the loop makes them (tests drive a replica without its loops).
  // False when the incarnation was gone (a new one is registered).
  bool renew() { return heartbeat(); }
  void stop();
  // Claims each storage as a container being made (no record needed), one after
  // another, on the calling thread (it waits on the database): the test builds' way to
  // hold many leases without running their sandboxes (api/admin.cc).
  struct ClaimTally {
    size_t held = 0, refused = 0;
  };
  ClaimTally claim_each(const std::vector<std::string>& storages);
  int64_t incarnation() const { return registration().incarnation; }

  // Refuse new claims from now on (drain, shutdown): requests for other containers go
  // to the replicas that take them. The leases the background takeover took and no
  // request used since are released (nothing of them is here to flush), on the
  // takeover's thread: the other replicas take them at once, not after this one's
  // heartbeat runs out.
  void set_draining() override;
  bool draining() const { return draining_; }

 private:
  asio::awaitable<void> heartbeat_loop();
  asio::awaitable<void> takeover_loop();
  std::chrono::steady_clock::duration heartbeat_interval() const;
  static int64_t now_ms();
  int64_t ttl_ms() const;
  store::ReplicaRegistration registration() const;
  // The last heartbeat that found the incarnation is less than leaseSeconds/2 old.
  bool confirmed_heartbeat() const;
  // One heartbeat; on finding the incarnation gone, lost_incarnation(). True when it
  // was renewed. Throws on database failures.
  bool heartbeat();
  // The incarnation `lost` is gone (another replica found its heartbeat run out): every
  // lease held under it is forgotten and on_lost runs for each; a new incarnation is
  // registered, under which containers are claimed again (at the next epoch).
  void lost_incarnation(int64_t lost);
  struct Held {
    int64_t epoch = 0;
    bool live = true;  // false once released
    // Taken by the background takeover, no request since: the first claim answers
    // fresh (the local copy, if any, is older than what the dead holder flushed).
    bool unchecked = false;
  };
  // Another replica's row seen with its heartbeat run out, and since when (unchanged).
  struct Expired {
    int64_t incarnation = 0, expires_at_ms = 0;
    std::chrono::steady_clock::time_point since;
  };

  asio::io_context& io_;
  store::LeaseStore& store_;
  Settings settings_;
  mutable std::mutex mutex_;
  std::map<std::string, Held> held_;         // the epoch stays after a release: the fence uses it
  store::ReplicaRegistration registration_;  // under mutex_
  std::chrono::steady_clock::time_point
      heartbeat_at_{};  // the last heartbeat that found the incarnation; under mutex_
  asio::steady_timer renew_timer_;
  asio::thread_pool heartbeat_thread_{1};
  TakeoverPacer pacer_;
  std::mutex takeover_mutex_;                         // one round at a time
  std::map<std::string, Expired> expired_;            // under takeover_mutex_
  std::map<std::string, std::pair<int64_t, int64_t>>  // replica id -> (incarnation, expiry) whose
      taken_over_;                                    // containers are all taken; under takeover_mutex_
  asio::steady_timer takeover_timer_;
  asio::thread_pool takeover_thread_{1};
  std::atomic<bool> stopped_{false};
  std::atomic<bool> draining_{false};
  std::function<void(const std::string&)> on_lost_;
  std::function<void(const std::string&)> on_let_go_;
  void let_go(const std::string& storage) const {
    if (on_let_go_) on_let_go_(storage);
  }
};

}  // namespace sandboxd::cluster
