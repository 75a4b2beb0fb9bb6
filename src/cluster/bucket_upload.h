// One upload's body on its way to the sessions bucket while it streams to the local
// file (storage.backend s3). A body up to one part goes up as a single PUT at the end;
// a longer one as an S3 multipart upload: each full part is handed to the bucket
// transfer threads as soon as it fills, up to `max_in_flight` parts at once, while the
// body keeps arriving. The upload holds at most (max_in_flight + 1) parts in memory
// (storage.s3.maxPartsInFlight, partSize) and never a second copy on disk. A failed or
// abandoned upload waits for its parts in flight, then aborts its multipart upload.
//
// A body whose length is announced up front (`stream_size`: a PUT with Content-Length)
// instead streams as one PUT of that length while it arrives, through a window of the
// same (max_in_flight x part_bytes) bytes: one request for the bucket instead of a part
// per 8 MiB and a join at the end (S3 servers that copy the parts into the object at
// CompleteMultipartUpload spend as much again there). A PUT that is cut is not stored;
// its key is deleted all the same, for servers that keep what they were sent.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "service/cluster_hooks.h"
#include "store/s3_client.h"

namespace sandboxd::cluster {

namespace asio = boost::asio;

// The threads that send uploads' parts to the bucket: a pool of their own, so that a
// few large uploads (each with several parts in flight, each part a blocking request of
// up to a second or more) never hold up the disk walks and hashing on the blocking pool.
asio::thread_pool& bucket_transfer_pool();

class BucketUpload : public service::BucketObjectUpload {
 public:
  BucketUpload(asio::any_io_executor executor, std::shared_ptr<store::S3Client> client, std::string key,
               size_t part_bytes, int retry_after_sec, size_t max_in_flight = 1,
               std::optional<uint64_t> stream_size = std::nullopt);
  ~BucketUpload() override;
  BucketUpload(const BucketUpload&) = delete;
  BucketUpload& operator=(const BucketUpload&) = delete;

  const std::string& key() const override { return key_; }
  // Takes the next bytes (synchronous: called from the body reader).
  void append(std::string_view data) override { buffer_.append(data); }
  // Sends a full part if there is one (first waiting for the oldest part in flight when
  // max_in_flight are): awaited after every chunk of the body.
  asio::awaitable<Result<void>> drain() override;
  // The rest, and the object is complete in the bucket.
  asio::awaitable<Result<void>> finish() override;
  // Drops whatever was sent: the multipart upload is aborted (or, on a server without
  // AbortMultipartUpload, completed and deleted), nothing stays in the bucket.
  asio::awaitable<void> discard() override;

 private:
  struct InFlight;
  struct Pending;
  struct Stream;
  // The streamed PUT: starts it, hands it what the buffer holds (all of it when `last`),
  // and waits while its window is full.
  asio::awaitable<Result<void>> feed_stream(bool last);
  asio::awaitable<Result<void>> finish_stream();
  asio::awaitable<void> wait_stream_done();
  // Hands `buffer_` to the transfer threads as part number part_count_ + 1.
  void send_part();
  // Waits for the oldest part in flight; its etag is recorded, its buffer kept for reuse.
  asio::awaitable<Result<void>> wait_oldest();
  // Waits for every part in flight; the first failure, if any.
  asio::awaitable<Result<void>> wait_all();
  Result<void> failed(const store::S3Error& error) const;

  asio::any_io_executor executor_;
  std::shared_ptr<store::S3Client> client_;
  std::string key_;
  size_t part_bytes_;
  int retry_after_sec_;
  size_t max_in_flight_;
  std::string buffer_;
  std::vector<std::string> spare_buffers_;  // sent parts' buffers, reused (no new pages per part)
  std::string upload_id_;                   // set once the multipart upload exists
  int part_count_ = 0;                      // parts handed out so far
  std::vector<std::string> part_etags_;     // by part number - 1
  std::deque<std::shared_ptr<InFlight>> in_flight_;
  // Shared with the parts in flight: an abandoned upload is aborted by its last part.
  std::shared_ptr<Pending> pending_;
  std::optional<uint64_t> stream_size_;  // set: one streamed PUT of this many bytes
  std::shared_ptr<Stream> stream_;       // that PUT, once begun
  bool stream_done_ = false;             // its outcome has been received
  bool finished_ = false;                // the object is complete in the bucket
  bool dropped_ = false;                 // discarded: the multipart upload is aborted (or never began)
};

}  // namespace sandboxd::cluster
