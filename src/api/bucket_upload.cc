#include "api/bucket_upload.h"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "server/blocking.h"

namespace sandboxd::api {

// A part being sent on the blocking pool; its outcome arrives through the channel.
struct BucketUpload::InFlight {
  explicit InFlight(asio::any_io_executor executor) : done(executor, 1) {}
  std::string body;
  store::S3Result<std::string> etag = store::S3Error{};
  asio::experimental::concurrent_channel<void(boost::system::error_code)> done;
};

BucketUpload::BucketUpload(asio::any_io_executor executor, std::shared_ptr<store::S3Client> client, std::string key,
                           size_t part_bytes, int retry_after_sec)
    : executor_(std::move(executor)),
      client_(std::move(client)),
      key_(std::move(key)),
      part_bytes_(part_bytes),
      retry_after_sec_(retry_after_sec) {}

BucketUpload::~BucketUpload() {
  if (finished_ || upload_id_.empty()) return;
  // Abandoned mid-way (the handler went away without discard): abort in the background.
  auto client = client_;
  auto in_flight = in_flight_;
  asio::post(server::blocking_pool(), [client, in_flight, key = key_, id = upload_id_] {
    (void)in_flight;  // its part may still be sending: keep its body alive
    if (auto aborted = client->abort_multipart(key, id); !aborted)
      spdlog::warn("bucket: aborting the multipart upload of {}: {}", key, aborted.error().describe());
  });
}

Result<void> BucketUpload::failed(const store::S3Error& error) const {
  spdlog::warn("bucket: upload of {}: {}", key_, error.describe());
  return ApiError::overloaded("The sessions bucket cannot take the file now; try again later", retry_after_sec_);
}

asio::awaitable<Result<void>> BucketUpload::wait_in_flight() {
  if (!in_flight_) co_return Result<void>();
  auto part = std::move(in_flight_);
  boost::system::error_code ec;
  co_await part->done.async_receive(asio::redirect_error(asio::use_awaitable, ec));
  if (!part->etag) co_return failed(part->etag.error());
  part_etags_.push_back(*part->etag);
  co_return Result<void>();
}

asio::awaitable<Result<void>> BucketUpload::drain() {
  if (buffer_.size() < part_bytes_) co_return Result<void>();
  if (upload_id_.empty()) {
    auto create = [client = client_, key = key_] { return client->create_multipart(key); };
    auto created = co_await server::run_blocking(std::move(create));
    if (!created) co_return failed(created.error());
    upload_id_ = *created;
  }
  // The part before this one must be in before this one goes (memory stays bounded).
  if (auto previous = co_await wait_in_flight(); !previous) co_return previous;
  auto part = std::make_shared<InFlight>(executor_);
  part->body = std::move(buffer_);
  buffer_ = std::string();
  buffer_.reserve(part_bytes_ + (1u << 20));
  const int number = static_cast<int>(part_etags_.size()) + 1;
  asio::post(server::blocking_pool(), [client = client_, key = key_, id = upload_id_, number, part] {
    part->etag = client->upload_part(key, id, number, part->body);
    part->body = std::string();  // freed as soon as it is sent
    part->done.try_send(boost::system::error_code());
  });
  in_flight_ = std::move(part);
  co_return Result<void>();
}

asio::awaitable<Result<void>> BucketUpload::finish() {
  if (upload_id_.empty()) {
    auto put = [client = client_, key = key_, this] { return client->put_object(key, buffer_); };
    auto stored = co_await server::run_blocking(std::move(put));
    if (!stored) co_return failed(stored.error());
    finished_ = true;
    buffer_ = std::string();
    co_return Result<void>();
  }
  if (auto previous = co_await wait_in_flight(); !previous) co_return previous;
  if (!buffer_.empty()) {
    const int number = static_cast<int>(part_etags_.size()) + 1;
    auto send = [client = client_, key = key_, id = upload_id_, number, this] {
      return client->upload_part(key, id, number, buffer_);
    };
    auto etag = co_await server::run_blocking(std::move(send));
    if (!etag) co_return failed(etag.error());
    part_etags_.push_back(*etag);
    buffer_ = std::string();
  }
  auto complete = [client = client_, key = key_, id = upload_id_, etags = part_etags_] {
    return client->complete_multipart(key, id, etags);
  };
  auto completed = co_await server::run_blocking(std::move(complete));
  if (!completed) co_return failed(completed.error());
  finished_ = true;
  co_return Result<void>();
}

asio::awaitable<void> BucketUpload::discard() {
  if (finished_) {  // complete in the bucket, but not wanted (the local commit failed)
    auto remove = [client = client_, key = key_] { return client->delete_object(key); };
    if (auto removed = co_await server::run_blocking(std::move(remove)); !removed)
      spdlog::warn("bucket: deleting the unwanted object {}: {}", key_, removed.error().describe());
    co_return;
  }
  finished_ = true;
  buffer_ = std::string();
  if (upload_id_.empty()) co_return;  // nothing was sent
  (void)co_await wait_in_flight();
  auto abort = [client = client_, key = key_, id = upload_id_, etags = part_etags_]() -> store::S3Result<void> {
    auto aborted = client->abort_multipart(key, id);
    if (aborted) return aborted;
    // A server without AbortMultipartUpload (405/501): complete what was sent and delete
    // the object, so neither parts nor an object stay behind.
    const long status = aborted.error().status;
    if ((status != 405 && status != 501) || etags.empty()) return aborted;
    if (auto completed = client->complete_multipart(key, id, etags); !completed) return completed;
    return client->delete_object(key);
  };
  if (auto aborted = co_await server::run_blocking(std::move(abort)); !aborted)
    spdlog::warn("bucket: aborting the multipart upload of {}: {}", key_, aborted.error().describe());
}

}  // namespace sandboxd::api
