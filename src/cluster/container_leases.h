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

  // Background renewal, until stop().
  void start();
  void stop();
  // Refuse new claims from now on (drain, shutdown): requests for other containers go
  // to the replicas that take them.
  void set_draining() override { draining_ = true; }
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

}  // namespace sandboxd::cluster
