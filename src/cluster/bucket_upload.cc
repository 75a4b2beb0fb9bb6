#include "cluster/bucket_upload.h"

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

namespace sandboxd::cluster {

// Eight threads: two uploads with four parts in flight each. They wait on the network,
// not the CPU (libcurl copies each part into its socket).
asio::thread_pool& bucket_transfer_pool() {
  static asio::thread_pool pool(8);
  return pool;
}

namespace {

template <typename Fn>
asio::awaitable<std::invoke_result_t<Fn&>> invoke_transfer(Fn fn) {
  co_return fn();
}

// Runs the blocking bucket call `fn` on the transfer threads; the caller resumes on its
// own executor with the result. (A named callable, moved: see base/blocking.h.)
template <typename Fn>
asio::awaitable<std::invoke_result_t<Fn&>> run_transfer(Fn fn) {
  co_return co_await asio::co_spawn(bucket_transfer_pool(), invoke_transfer(std::move(fn)),
                                    asio::use_awaitable);
}

}  // namespace

// A part being sent on the transfer threads; its outcome arrives through the channel.
struct BucketUpload::InFlight {
  explicit InFlight(asio::any_io_executor executor) : done(executor, 1) {}
  int number = 0;
  std::string body;
  store::S3Result<std::string> etag = store::S3Error{};
  asio::experimental::concurrent_channel<void(boost::system::error_code)> done;
};

// What the parts in flight share with their upload: when the upload is abandoned (its
// handler went away without discard), the last of its parts to come back aborts the
// multipart upload, so no part lands after the abort.
struct BucketUpload::Pending {
  std::shared_ptr<store::S3Client> client;
  std::string key, upload_id;
  std::mutex mutex;
  int parts = 0;
  bool abandoned = false;

  void abort_now() {
    if (auto aborted = client->abort_multipart(key, upload_id); !aborted)
      spdlog::warn("bucket: aborting the multipart upload of {}: {}", key, aborted.error().describe());
  }
  void part_started() {
    std::lock_guard lock(mutex);
    ++parts;
  }
  // On a transfer thread, after a part came back.
  void part_done() {
    {
      std::lock_guard lock(mutex);
      if (--parts > 0 || !abandoned) return;
    }
    abort_now();
  }
  void abandon(const std::shared_ptr<Pending>& self) {
    {
      std::lock_guard lock(mutex);
      abandoned = true;
      if (parts > 0) return;  // the last part aborts
    }
    asio::post(bucket_transfer_pool(), [self] { self->abort_now(); });
  }
};

// The streamed PUT's window: chunks of the body queued by the upload (on its I/O
// thread), pulled by libcurl's read callback (on a transfer thread).
struct BucketUpload::Stream {
  explicit Stream(asio::any_io_executor executor) : done(executor, 1), room(executor, 1) {}
  std::mutex mutex;
  std::condition_variable ready;  // bytes queued, the end, or the cut
  std::deque<std::string> chunks;
  std::vector<std::string> spare;  // pulled chunks' buffers, for the next ones
  size_t front_offset = 0, queued = 0;
  bool ended = false, cut = false, finished = false, writer_waiting = false;
  store::S3Result<std::string> etag = store::S3Error{};
  asio::experimental::concurrent_channel<void(boost::system::error_code)> done, room;

  // On the transfer thread: up to `want` bytes, waiting for them; -1 once cut.
  long pull(char* out, size_t want) {
    std::unique_lock lock(mutex);
    ready.wait(lock, [&] { return cut || !chunks.empty() || ended; });
    if (cut || chunks.empty()) return -1;
    std::string& front = chunks.front();
    const size_t n = std::min(want, front.size() - front_offset);
    std::memcpy(out, front.data() + front_offset, n);
    front_offset += n;
    queued -= n;
    if (front_offset == front.size()) {
      front.clear();
      spare.push_back(std::move(front));
      chunks.pop_front();
      front_offset = 0;
    }
    wake_writer();
    return static_cast<long>(n);
  }
  void wake_writer() {  // (under the lock)
    if (!writer_waiting) return;
    writer_waiting = false;
    room.try_send(boost::system::error_code());
  }
};

BucketUpload::BucketUpload(asio::any_io_executor executor, std::shared_ptr<store::S3Client> client,
                           std::string key, size_t part_bytes, int retry_after_sec, size_t max_in_flight,
                           std::optional<uint64_t> stream_size)
    : executor_(std::move(executor)),
      client_(std::move(client)),
      key_(std::move(key)),
      part_bytes_(part_bytes),
      retry_after_sec_(retry_after_sec),
      max_in_flight_(std::max<size_t>(1, max_in_flight)),
      pending_(std::make_shared<Pending>()),
      stream_size_(stream_size) {
  pending_->client = client_;
  pending_->key = key_;
}

BucketUpload::~BucketUpload() {
  if (stream_ && !stream_done_) {  // abandoned mid-PUT: cut it (its thread deletes the key)
    std::lock_guard lock(stream_->mutex);
    stream_->cut = true;
    stream_->ready.notify_all();
  }
  if (finished_ || dropped_ || upload_id_.empty()) return;
  pending_->abandon(pending_);
}

Result<void> BucketUpload::failed(const store::S3Error& error) const {
  spdlog::warn("bucket: upload of {}: {}", key_, error.describe());
  return ApiError::overloaded("The sessions bucket cannot take the file now; try again later",
                              retry_after_sec_);
}

void BucketUpload::send_part() {
  auto part = std::make_shared<InFlight>(executor_);
  part->number = ++part_count_;
  part->body = std::move(buffer_);
  if (!spare_buffers_.empty()) {
    buffer_ = std::move(spare_buffers_.back());
    spare_buffers_.pop_back();
  } else {
    buffer_ = std::string();
    buffer_.reserve(part_bytes_ + (1u << 20));  // a part and the chunk that overfills it
  }
  part_etags_.resize(static_cast<size_t>(part_count_));
  pending_->part_started();
  asio::post(bucket_transfer_pool(),
             [client = client_, key = key_, id = upload_id_, part, pending = pending_] {
               part->etag = client->upload_part(key, id, part->number, part->body);
               part->done.try_send(boost::system::error_code());
               pending->part_done();
             });
  in_flight_.push_back(std::move(part));
}

asio::awaitable<Result<void>> BucketUpload::wait_oldest() {
  auto part = std::move(in_flight_.front());
  in_flight_.pop_front();
  boost::system::error_code ec;
  co_await part->done.async_receive(asio::redirect_error(asio::use_awaitable, ec));
  // The channel orders this after the transfer thread's last use of the part.
  part->body.clear();
  spare_buffers_.push_back(std::move(part->body));
  if (!part->etag) co_return failed(part->etag.error());
  part_etags_[static_cast<size_t>(part->number - 1)] = *part->etag;
  co_return Result<void>();
}

asio::awaitable<Result<void>> BucketUpload::wait_all() {
  Result<void> outcome;
  while (!in_flight_.empty()) {
    auto waited = co_await wait_oldest();
    if (!waited && outcome) outcome = waited;
  }
  co_return outcome;
}

asio::awaitable<Result<void>> BucketUpload::feed_stream(bool last) {
  if (!stream_) {
    stream_ = std::make_shared<Stream>(executor_);
    asio::post(bucket_transfer_pool(),
               [client = client_, key = key_, size = *stream_size_, stream = stream_] {
                 std::function<long(char*, size_t)> pull = [&stream](char* out, size_t want) {
                   return stream->pull(out, want);
                 };
                 auto etag = client->put_object_pulled(key, size, pull);
                 const bool stored = etag.has_value();
                 {  // the outcome first: the upload answers without waiting for the clean-up below
                   std::lock_guard lock(stream->mutex);
                   stream->etag = std::move(etag);
                   stream->finished = true;
                   stream->wake_writer();
                 }
                 stream->done.try_send(boost::system::error_code());
                 // Not stored by S3; a server that keeps a cut PUT's bytes gets a delete, retried for
                 // about half a minute when the bucket is away (it may be why the PUT failed).
                 for (int attempt = 0; !stored; ++attempt) {
                   auto removed = client->delete_object(key);
                   if (removed) break;
                   if (attempt == 5) {
                     spdlog::warn("bucket: deleting the cut object {}: {}", key, removed.error().describe());
                     break;
                   }
                   std::this_thread::sleep_for(std::chrono::seconds(1 << attempt));
                 }
               });
  }
  // Handed over in chunks of 1 MiB or more (the body reader's pieces may be small).
  if (buffer_.size() < (1u << 20) && !last) co_return Result<void>();
  const size_t window = max_in_flight_ * part_bytes_;
  for (;;) {
    {
      std::lock_guard lock(stream_->mutex);
      if (stream_->finished && !stream_->etag) co_return failed(stream_->etag.error());
      if (stream_->finished)
        co_return failed(store::S3Error{store::S3Error::Kind::kServer, 0, "", "the PUT ended early"});
      if (stream_->queued < window) {
        stream_->queued += buffer_.size();
        if (!buffer_.empty()) stream_->chunks.push_back(std::move(buffer_));
        stream_->ended = last;
        if (!stream_->spare.empty()) {
          buffer_ = std::move(stream_->spare.back());
          stream_->spare.pop_back();
        } else {
          buffer_ = std::string();
        }
        stream_->ready.notify_all();
        co_return Result<void>();
      }
      stream_->writer_waiting = true;  // full: the next pull (or the end) wakes this
    }
    boost::system::error_code ec;
    co_await stream_->room.async_receive(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<void> BucketUpload::wait_stream_done() {
  if (!stream_ || stream_done_) co_return;
  boost::system::error_code ec;
  co_await stream_->done.async_receive(asio::redirect_error(asio::use_awaitable, ec));
  stream_done_ = true;
}

asio::awaitable<Result<void>> BucketUpload::finish_stream() {
  if (auto fed = co_await feed_stream(/*last=*/true); !fed) co_return fed;
  co_await wait_stream_done();
  if (!stream_->etag) co_return failed(stream_->etag.error());
  finished_ = true;
  buffer_ = std::string();
  co_return Result<void>();
}

asio::awaitable<Result<void>> BucketUpload::drain() {
  if (stream_size_) co_return co_await feed_stream(/*last=*/false);
  if (buffer_.size() < part_bytes_) co_return Result<void>();
  if (upload_id_.empty()) {
    auto create = [client = client_, key = key_] { return client->create_multipart(key); };
    auto created = co_await run_transfer(std::move(create));
    if (!created) co_return failed(created.error());
    upload_id_ = *created;
    pending_->upload_id = upload_id_;  // (before any part: no transfer thread reads it yet)
  }
  // At most max_in_flight parts at once: memory stays bounded, and a bucket slower than
  // the client slows the client down.
  while (in_flight_.size() >= max_in_flight_)
    if (auto oldest = co_await wait_oldest(); !oldest) co_return oldest;
  send_part();
  co_return Result<void>();
}

asio::awaitable<Result<void>> BucketUpload::finish() {
  if (stream_size_) co_return co_await finish_stream();
  if (upload_id_.empty()) {
    auto put = [client = client_, key = key_, this] { return client->put_object(key, buffer_); };
    auto stored = co_await run_transfer(std::move(put));
    if (!stored) co_return failed(stored.error());
    finished_ = true;
    buffer_ = std::string();
    co_return Result<void>();
  }
  if (!buffer_.empty()) {
    while (in_flight_.size() >= max_in_flight_)
      if (auto oldest = co_await wait_oldest(); !oldest) co_return oldest;
    send_part();
  }
  if (auto sent = co_await wait_all(); !sent) co_return sent;
  buffer_ = std::string();
  spare_buffers_.clear();
  auto complete = [client = client_, key = key_, id = upload_id_, etags = part_etags_] {
    return client->complete_multipart(key, id, etags);
  };
  auto completed = co_await run_transfer(std::move(complete));
  if (!completed) co_return failed(completed.error());
  finished_ = true;
  co_return Result<void>();
}

asio::awaitable<void> BucketUpload::discard() {
  if (finished_) {  // complete in the bucket, but not wanted (the local commit failed)
    auto remove = [client = client_, key = key_] { return client->delete_object(key); };
    if (auto removed = co_await run_transfer(std::move(remove)); !removed)
      spdlog::warn("bucket: deleting the unwanted object {}: {}", key_, removed.error().describe());
    co_return;
  }
  if (dropped_) co_return;
  if (stream_) {  // cut the PUT; its thread deletes the key
    {
      std::lock_guard lock(stream_->mutex);
      stream_->cut = true;
      stream_->ready.notify_all();
    }
    co_await wait_stream_done();
    dropped_ = true;
    co_return;
  }
  buffer_ = std::string();
  spare_buffers_.clear();
  if (upload_id_.empty()) {
    dropped_ = true;  // nothing was sent
    co_return;
  }
  // Every part in flight comes back first: none may land after the abort.
  (void)co_await wait_all();
  spare_buffers_.clear();
  dropped_ = true;
  bool every_part = true;
  for (const auto& etag : part_etags_) every_part &= !etag.empty();
  auto abort = [client = client_, key = key_, id = upload_id_, etags = part_etags_,
                every_part]() -> store::S3Result<void> {
    auto aborted = client->abort_multipart(key, id);
    if (aborted) return aborted;
    // A server without AbortMultipartUpload (405/501): complete what was sent and delete
    // the object, so neither parts nor an object stay behind.
    const long status = aborted.error().status;
    if ((status != 405 && status != 501) || etags.empty() || !every_part) return aborted;
    if (auto completed = client->complete_multipart(key, id, etags); !completed) return completed;
    return client->delete_object(key);
  };
  if (auto aborted = co_await run_transfer(std::move(abort)); !aborted)
    spdlog::warn("bucket: aborting the multipart upload of {}: {}", key_, aborted.error().describe());
}

}  // namespace sandboxd::cluster
