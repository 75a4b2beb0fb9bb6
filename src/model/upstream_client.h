// The upstream model: an Anthropic-compatible Messages endpoint reached with libcurl.
// One event-loop thread drives every transfer through a curl multi handle (its
// connection cache is the keep-alive pool; https gets TLS), so no request thread ever
// blocks on the network: a call hands its events (head, body pieces, end) to the
// coroutine that awaits them, on that coroutine's own executor.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cancellation.h"

namespace sandboxd::model {

namespace asio = boost::asio;

struct UpstreamEvent {
  enum class Kind { kHead, kData, kEnd } kind = Kind::kEnd;
  long status = 0;           // kHead: the HTTP status
  std::string content_type;  // kHead
  std::string data;          // kData: a piece of the body
  // kEnd: empty when the transfer completed; else why it did not.
  std::string error;
  bool timed_out = false;
  bool cancelled = false;
};

class UpstreamClient;
struct CallAccess;

// One POST in flight. Its events arrive in order: kHead (unless the transfer failed
// before a response), kData pieces, then exactly one kEnd.
class UpstreamCall : public std::enable_shared_from_this<UpstreamCall> {
 public:
  UpstreamCall(asio::any_io_executor executor, std::shared_ptr<runtime::Cancellation> cancellation);
  ~UpstreamCall();

  asio::awaitable<UpstreamEvent> next();
  // Aborts the transfer; its kEnd then says cancelled.
  void cancel();

 private:
  friend class UpstreamClient;
  friend struct CallAccess;
  struct Transfer;
  void push(UpstreamEvent event);

  asio::any_io_executor executor_;
  asio::steady_timer signal_;  // cancelled (on executor_) when an event is queued
  std::mutex mutex_;
  std::deque<UpstreamEvent> events_;
  bool ended_ = false;
  std::shared_ptr<runtime::Cancellation> cancellation_;
  uint64_t subscription_ = 0;
  std::weak_ptr<UpstreamClient> client_;
  std::unique_ptr<Transfer> transfer_;  // owned by the client's thread while active
};

struct UpstreamRequest {
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;
  std::chrono::milliseconds timeout{600'000};
  std::chrono::milliseconds connect_timeout{10'000};
};

class UpstreamClient : public std::enable_shared_from_this<UpstreamClient> {
 public:
  static std::shared_ptr<UpstreamClient> create();
  ~UpstreamClient();
  UpstreamClient(const UpstreamClient&) = delete;
  UpstreamClient& operator=(const UpstreamClient&) = delete;

  // Starts a POST; its events are delivered on `executor` (which must be a strand or a
  // single-threaded executor: the call's waits and wake-ups are serialized on it).
  std::shared_ptr<UpstreamCall> post(asio::any_io_executor executor, UpstreamRequest request,
                                     std::shared_ptr<runtime::Cancellation> cancellation = nullptr);

  // Stops the thread; transfers still in flight end with an error.
  void shutdown();
  // Interrupts the thread's wait (new work, a cancellation).
  void wake();

 private:
  struct Shared;
  UpstreamClient();
  void loop();

  std::unique_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace sandboxd::model
