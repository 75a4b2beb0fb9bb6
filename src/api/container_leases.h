// This replica's side of the container leases (store/lease_store.h): which
// replica serves a container, taking a lease before serving one, renewing the held
// ones in the background (every leaseSeconds/3), releasing them when their sandbox
// stops, and the fence every write to a container's file records passes.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"
#include "store/lease_store.h"

namespace sandboxd::api {

namespace asio = boost::asio;

class ContainerLeases {
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

  // Takes (or keeps) the lease before this replica serves the container. `fresh` tells
  // that it was not held here a moment ago (the local copy must be made current). 503
  // when another replica holds it, or when this replica is draining.
  struct Claim {
    int64_t epoch = 0;
    bool fresh = false;
  };
  // `existing_container`: the container has a record (not one being made): a lease is
  // only made while the record is there, and a claim that finds the record gone is a
  // 404 (deleted through another replica). A lease row held by another session past
  // the database's lock timeout is a 503 with Retry-After, for this container alone.
  Result<Claim> claim(const std::string& storage, bool existing_container = true);
  // Held here and confirmed recently enough that claim() needs no database.
  bool confirmed(const std::string& storage) const;
  // Gives a held lease up at once (after the final flush). True when it was held.
  bool release(const std::string& storage);
  // Forgets a lease that is gone: taken over (`lost`: on_lost runs), or the container
  // deleted (`deleted`: its row goes too).
  void drop(const std::string& storage, bool deleted = false, bool lost = false);
  // A write met the fence (another replica took the container, or it was deleted):
  // the lease is forgotten and on_lost runs.
  void fenced(const store::FencedError& fenced);
  std::vector<std::string> held() const;
  // Called (on any thread, no lock held) when this replica finds a lease it held taken
  // over or gone: its renewal failed or a write met the fence. Set once, before serving.
  void set_on_lost(std::function<void(const std::string& storage)> on_lost) { on_lost_ = std::move(on_lost); }

  // The fence (Metadata::set_write_fence): throws store::FencedError unless `storage`'s
  // lease still has the epoch this replica took it at.
  // Returns the epoch it checked.
  int64_t check_fence(store::db::Connection& conn, const std::string& storage) const;

  // Background renewal, until stop().
  void start();
  void stop();
  // Refuse new claims from now on (drain, shutdown): requests for other containers go
  // to the replicas that take them.
  void set_draining() { draining_ = true; }
  bool draining() const { return draining_; }

 private:
  asio::awaitable<void> renew_loop();
  static int64_t now_ms();

  struct Held {
    int64_t epoch = 0;
    std::chrono::steady_clock::time_point confirmed_at;  // the last acquire or renewal
    bool live = true;                                    // false once released
  };

  asio::io_context& io_;
  store::LeaseStore& store_;
  Settings settings_;
  mutable std::mutex mutex_;
  std::map<std::string, Held> held_;  // the epoch stays after a release: the fence uses it
  asio::steady_timer renew_timer_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> draining_{false};
  std::function<void(const std::string&)> on_lost_;
};

}  // namespace sandboxd::api
