// The NetworkPolicy peers kept current from the Kubernetes API: one list-then-watch per
// resource (namespaces, pods, services, discovery.k8s.io/v1 endpoint slices) as the
// API's clients do it (resource versions, bookmarks, a 410 Gone lists again, a lost
// connection reconnects with backoff), and after each change the resolved set
// published as a new immutable snapshot. Until the first list of all four the set is
// empty (nothing reachable); when the API is lost the last set stays in force, and the
// status says it is no longer current.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kubernetes/api_client.h"
#include "kubernetes/peer_resolution.h"

namespace sandboxd::kubernetes {

class PeerWatch : public std::enable_shared_from_this<PeerWatch> {
 public:
  PeerWatch(boost::asio::io_context& io, ApiEndpoint endpoint, std::vector<ops::NetworkPeer> peers);

  void start();
  void stop();

  // The set in force now (empty before the first full list). Any thread.
  std::shared_ptr<const ResolvedPeers> peers() const;

  struct Status {
    bool synced = false;   // all four resources listed and their set published
    bool current = false;  // and every watch is open now
    std::string problem;   // the last failure, while not current
    double seconds_not_current = 0;
    uint64_t relists = 0, reconnects = 0, updates = 0;
    size_t names = 0, addresses = 0;
  };
  Status status() const;

  // Called on the watch's strand after each new set is published.
  void on_change(std::function<void()> listener);

 private:
  struct Resource;
  boost::asio::awaitable<void> follow(std::shared_ptr<Resource> resource);
  boost::asio::awaitable<bool> list(Resource& resource);
  void changed();
  void publish();
  void set_problem(const std::string& problem);

  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  ApiClient client_;
  std::vector<ops::NetworkPeer> peer_rules_;
  ClusterObjects objects_;  // on strand_
  std::vector<std::shared_ptr<Resource>> resources_;
  boost::asio::steady_timer publish_timer_;
  bool publish_pending_ = false;  // on strand_
  std::vector<std::function<void()>> listeners_;
  std::atomic<bool> stopped_{false};
  bool published_ = false;  // under mutex_: a set from a full list is in force

  mutable std::mutex mutex_;
  std::shared_ptr<const ResolvedPeers> current_;
  Status status_;
  std::chrono::steady_clock::time_point not_current_since_;
};

}  // namespace sandboxd::kubernetes
