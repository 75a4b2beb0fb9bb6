#include "model/upstream_client.h"

#include <curl/curl.h>

#include <spdlog/spdlog.h>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <map>
#include <stdexcept>

namespace sandboxd::model {

// The transfer's curl state. Created with the call, used by the client's thread while
// the transfer runs; the cancel flag is the one field both sides touch.
struct UpstreamCall::Transfer {
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  UpstreamRequest request;
  bool head_sent = false;
  std::atomic<bool> cancel_requested{false};
  char error_buffer[CURL_ERROR_SIZE] = {};

  ~Transfer() {
    if (easy) curl_easy_cleanup(easy);
    if (headers) curl_slist_free_all(headers);
  }
};

struct UpstreamClient::Shared {
  CURLM* multi = nullptr;
  std::mutex mutex;
  std::vector<std::shared_ptr<UpstreamCall>> to_add;
  bool stopping = false;
  std::map<CURL*, std::shared_ptr<UpstreamCall>> active;  // the loop thread's own
};

// ---------------------------------------------------------------------------------
UpstreamCall::UpstreamCall(asio::any_io_executor executor,
                           std::shared_ptr<runtime::Cancellation> cancellation)
    : executor_(executor), signal_(executor), cancellation_(std::move(cancellation)) {}

UpstreamCall::~UpstreamCall() {
  if (cancellation_ && subscription_) cancellation_->unsubscribe(subscription_);
}

void UpstreamCall::push(UpstreamEvent event) {
  {
    std::lock_guard lock(mutex_);
    if (ended_) return;
    if (event.kind == UpstreamEvent::Kind::kEnd) ended_ = true;
    events_.push_back(std::move(event));
  }
  asio::post(executor_, [self = shared_from_this()] { self->signal_.cancel(); });
}

asio::awaitable<UpstreamEvent> UpstreamCall::next() {
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (!events_.empty()) {
        UpstreamEvent event = std::move(events_.front());
        events_.pop_front();
        co_return event;
      }
    }
    // An event queued after the check above posts its wake-up to this executor, where
    // it can only run once this wait is pending.
    boost::system::error_code ec;
    signal_.expires_at(asio::steady_timer::time_point::max());
    co_await signal_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

void UpstreamCall::cancel() {
  if (!transfer_) return;
  transfer_->cancel_requested = true;
  if (auto client = client_.lock()) client->wake();
}

// ---------------------------------------------------------------------------------
struct CallAccess {
  static UpstreamCall::Transfer& transfer(UpstreamCall& call) { return *call.transfer_; }
  static void push(UpstreamCall& call, UpstreamEvent event) { call.push(std::move(event)); }
};

static void send_head(UpstreamCall& call, CURL* easy) {
  auto& transfer = CallAccess::transfer(call);
  if (transfer.head_sent) return;
  transfer.head_sent = true;
  UpstreamEvent head;
  head.kind = UpstreamEvent::Kind::kHead;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &head.status);
  char* type = nullptr;
  if (curl_easy_getinfo(easy, CURLINFO_CONTENT_TYPE, &type) == CURLE_OK && type) head.content_type = type;
  CallAccess::push(call, std::move(head));
}

static size_t call_on_header(char* data, size_t size, size_t count, void* user) {
  auto* call = static_cast<UpstreamCall*>(user);
  auto& transfer = CallAccess::transfer(*call);
  size_t n = size * count;
  std::string_view line(data, n);
  if (line == "\r\n" || line == "\n") {  // the end of a header block
    long status = 0;
    curl_easy_getinfo(transfer.easy, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200) send_head(*call, transfer.easy);
  }
  return n;
}

static size_t call_on_data(char* data, size_t size, size_t count, void* user) {
  auto* call = static_cast<UpstreamCall*>(user);
  auto& transfer = CallAccess::transfer(*call);
  if (transfer.cancel_requested) return 0;  // aborts the transfer
  send_head(*call, transfer.easy);
  UpstreamEvent piece;
  piece.kind = UpstreamEvent::Kind::kData;
  piece.data.assign(data, size * count);
  CallAccess::push(*call, std::move(piece));
  return size * count;
}

std::shared_ptr<UpstreamClient> UpstreamClient::create() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  std::shared_ptr<UpstreamClient> client(new UpstreamClient());
  client->thread_ = std::thread([raw = client.get()] { raw->loop(); });
  return client;
}

UpstreamClient::UpstreamClient() : shared_(std::make_unique<Shared>()) {
  shared_->multi = curl_multi_init();
  if (!shared_->multi) throw std::runtime_error("curl_multi_init failed");
  // Idle connections kept for reuse: the keep-alive pool.
  curl_multi_setopt(shared_->multi, CURLMOPT_MAXCONNECTS, 64L);
}

UpstreamClient::~UpstreamClient() {
  shutdown();
  curl_multi_cleanup(shared_->multi);
}

void UpstreamClient::shutdown() {
  {
    std::lock_guard lock(shared_->mutex);
    shared_->stopping = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
}

void UpstreamClient::wake() { curl_multi_wakeup(shared_->multi); }

std::shared_ptr<UpstreamCall> UpstreamClient::post(asio::any_io_executor executor, UpstreamRequest request,
                                                   std::shared_ptr<runtime::Cancellation> cancellation) {
  auto call = std::make_shared<UpstreamCall>(executor, cancellation);
  call->client_ = weak_from_this();
  call->transfer_ = std::make_unique<UpstreamCall::Transfer>();
  auto& transfer = *call->transfer_;
  transfer.request = std::move(request);
  CURL* easy = curl_easy_init();
  if (!easy) throw std::runtime_error("curl_easy_init failed");
  transfer.easy = easy;
  for (const auto& header : transfer.request.headers)
    transfer.headers = curl_slist_append(transfer.headers, header.c_str());
  // No "Expect: 100-continue" round trip before the body.
  transfer.headers = curl_slist_append(transfer.headers, "Expect:");
  curl_easy_setopt(easy, CURLOPT_URL, transfer.request.url.c_str());
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, transfer.headers);
  curl_easy_setopt(easy, CURLOPT_POST, 1L);
  curl_easy_setopt(easy, CURLOPT_POSTFIELDS, transfer.request.body.data());
  curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(transfer.request.body.size()));
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(transfer.request.timeout.count()));
  curl_easy_setopt(
      easy, CURLOPT_CONNECTTIMEOUT_MS,
      static_cast<long>(std::min(transfer.request.connect_timeout, transfer.request.timeout).count()));
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, transfer.error_buffer);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, call_on_header);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, call.get());
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, call_on_data);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, call.get());
  curl_easy_setopt(easy, CURLOPT_PRIVATE, call.get());
  {
    std::lock_guard lock(shared_->mutex);
    if (shared_->stopping) {
      call->push({UpstreamEvent::Kind::kEnd, 0, {}, {}, "the server is shutting down"});
      return call;
    }
    shared_->to_add.push_back(call);
  }
  wake();
  if (cancellation) {
    std::weak_ptr<UpstreamCall> weak = call;
    call->subscription_ = cancellation->subscribe([weak] {
      if (auto c = weak.lock()) c->cancel();
    });
  }
  return call;
}

void UpstreamClient::loop() {
  auto& s = *shared_;
  auto finish = [&](CURL* easy, UpstreamEvent end) {
    auto it = s.active.find(easy);
    if (it == s.active.end()) return;
    auto call = it->second;
    s.active.erase(it);
    curl_multi_remove_handle(s.multi, easy);
    CallAccess::push(*call, std::move(end));
  };
  for (;;) {
    std::vector<std::shared_ptr<UpstreamCall>> adding;
    bool stopping;
    {
      std::lock_guard lock(s.mutex);
      adding.swap(s.to_add);
      stopping = s.stopping;
    }
    for (auto& call : adding) {
      CURL* easy = CallAccess::transfer(*call).easy;
      s.active.emplace(easy, call);
      if (CURLMcode rc = curl_multi_add_handle(s.multi, easy); rc != CURLM_OK) {
        UpstreamEvent end;
        end.error = std::string("curl_multi_add_handle: ") + curl_multi_strerror(rc);
        finish(easy, std::move(end));
      }
    }
    if (stopping) {
      while (!s.active.empty()) {
        UpstreamEvent end;
        end.error = "the server is shutting down";
        end.cancelled = true;
        finish(s.active.begin()->first, std::move(end));
      }
      return;
    }
    // Cancelled transfers end now, whatever state they are in.
    std::vector<CURL*> cancelled;
    for (auto& [easy, call] : s.active)
      if (CallAccess::transfer(*call).cancel_requested) cancelled.push_back(easy);
    for (CURL* easy : cancelled) {
      UpstreamEvent end;
      end.error = "cancelled";
      end.cancelled = true;
      finish(easy, std::move(end));
    }
    int running = 0;
    curl_multi_perform(s.multi, &running);
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(s.multi, &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      CURL* easy = msg->easy_handle;
      UpstreamEvent end;
      if (msg->data.result != CURLE_OK) {
        auto it = s.active.find(easy);
        std::string detail = it != s.active.end() ? CallAccess::transfer(*it->second).error_buffer : "";
        end.error = detail.empty() ? curl_easy_strerror(msg->data.result) : detail;
        end.timed_out = msg->data.result == CURLE_OPERATION_TIMEDOUT;
        if (it != s.active.end() && CallAccess::transfer(*it->second).cancel_requested) end.cancelled = true;
      } else if (auto it = s.active.find(easy); it != s.active.end()) {
        send_head(*it->second, easy);  // a response with neither body nor header end
      }
      finish(easy, std::move(end));
    }
    curl_multi_poll(s.multi, nullptr, 0, 1000, nullptr);
  }
}

}  // namespace sandboxd::model
