// Keep-alive connections from this replica to the others (server/http_relay.h). A
// relayed request takes an idle connection to its upstream when one is there and the
// relay hands it back once the answer was read to its end, so a busy relay pays no TCP
// handshake per request and leaves no TIME_WAIT socket behind each one.
//
// Bounded: at most `max_idle_per_upstream` idle connections per upstream (more are
// closed), each closed once unused for `idle_timeout`, which is shorter than a peer's
// own wait for the next request on a connection (server.headerTimeoutSec, 15 s by
// default), so a peer is not closing a connection while this replica reuses it. One a
// peer closed anyway (a restart) is found dead when taken and never used.
//
// Idle connections are plain sockets with no operation pending; a taken one is adopted
// by a socket on the taker's executor, so no two strands ever share one.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/unique_fd.h"

namespace sandboxd::server {

class UpstreamPool : public std::enable_shared_from_this<UpstreamPool> {
 public:
  struct Limits {
    size_t max_idle_per_upstream = 16;
    std::chrono::milliseconds idle_timeout{10'000};
  };
  // `executor` runs the sweep of expired idle connections.
  static std::shared_ptr<UpstreamPool> make(boost::asio::any_io_executor executor, Limits limits);
  ~UpstreamPool();

  // An idle connection to `upstream` ("host:port") that is still open, as a socket on
  // `executor`; nullopt when there is none (the caller connects anew).
  std::optional<boost::asio::ip::tcp::socket> take(const std::string& upstream,
                                                   boost::asio::any_io_executor executor);
  // A connection whose last answer was read to its end and which both sides keep open:
  // it waits for the next request to `upstream` (or is closed when the pool is full).
  void give_back(const std::string& upstream, boost::asio::ip::tcp::socket socket);

  // Idle connections now (for the tests and /metrics-like checks).
  size_t idle(const std::string& upstream) const;

 private:
  UpstreamPool(boost::asio::any_io_executor executor, Limits limits);
  struct Idle {
    UniqueFd fd;
    boost::asio::ip::tcp protocol;
    std::chrono::steady_clock::time_point since;
  };
  // Under mutex_: drops expired idle connections; arms the sweep while any remain.
  void sweep_locked();
  void arm_locked();

  Limits limits_;
  mutable std::mutex mutex_;
  std::map<std::string, std::deque<Idle>> idle_;  // oldest first
  boost::asio::steady_timer sweep_timer_;
  bool sweep_armed_ = false;
};

}  // namespace sandboxd::server
