// This replica's side of the container leases (store/lease_store.h): which
// replica serves a container, taking a lease before serving one, the replica's
// heartbeat that keeps every held lease (one statement every leaseSeconds/3, whatever
// the number held), releasing a lease when its sandbox stops, and the fence every write
// to a container's file records passes.
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
#include <string>
#include <vector>

#include "base/error.h"
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
  };
  ContainerLeases(asio::io_context& io, store::LeaseStore& store, Settings settings);

  const Settings& settings() const { return settings_; }

  // Who serves a container now: another replica whose lease is live (the request is
  // relayed to `holder_url`), or nobody else (this replica serves it, taking the lease).
  struct Holder {
    bool elsewhere = false;
    std::string holder, holder_url;
  };
  Holder holder_of(const std::string& storage);

  // The LeaseKeeper calls (service/cluster_hooks.h).
  Result<Claim> claim(const std::string& storage, bool existing_container = true) override;
  bool confirmed(const std::string& storage) const override;
  bool release(const std::string& storage) override;
  void drop(const std::string& storage, bool deleted = false, bool lost = false) override;
  void fenced(const store::FencedError& fenced) override;
  std::vector<std::string> held() const override;
  void set_on_lost(std::function<void(const std::string& storage)> on_lost) override { on_lost_ = std::move(on_lost); }

  // The fence (Metadata::set_write_fence): throws store::FencedError unless `storage`'s
  // lease still has the epoch this replica took it at.
  // Returns the epoch it checked.
  int64_t check_fence(store::db::Connection& conn, const std::string& storage) const;

  // Registers this replica (a new incarnation: whatever an earlier run of it held is
  // free, to be taken again at the next epoch). Before the first claim.
  void register_replica();
  // The heartbeat in the background, until stop().
  void start();
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
  // to the replicas that take them.
  void set_draining() override { draining_ = true; }
  bool draining() const { return draining_; }

 private:
  asio::awaitable<void> heartbeat_loop();
  static int64_t now_ms();
  int64_t ttl_ms() const;
  store::ReplicaRegistration registration() const;
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
  };

  asio::io_context& io_;
  store::LeaseStore& store_;
  Settings settings_;
  mutable std::mutex mutex_;
  std::map<std::string, Held> held_;  // the epoch stays after a release: the fence uses it
  store::ReplicaRegistration registration_;  // under mutex_
  std::chrono::steady_clock::time_point
      heartbeat_at_{};  // the last heartbeat that found the incarnation; under mutex_
  asio::steady_timer renew_timer_;
  asio::thread_pool heartbeat_thread_{1};
  std::atomic<bool> stopped_{false};
  std::atomic<bool> draining_{false};
  std::function<void(const std::string&)> on_lost_;
};

}  // namespace sandboxd::cluster
