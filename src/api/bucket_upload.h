// One upload's body on its way to the sessions bucket while it streams to the local
// file (storage.backend s3). A body up to one part goes up as a single PUT at the end;
// a longer one as an S3 multipart upload: each full part is sent while the next one
// fills, so the upload holds at most about two parts in memory and never a second copy
// on disk. A failed or abandoned upload aborts its multipart upload.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "store/s3_client.h"

namespace sandboxd::api {

namespace asio = boost::asio;

class BucketUpload {
 public:
  BucketUpload(asio::any_io_executor executor, std::shared_ptr<store::S3Client> client, std::string key,
               size_t part_bytes, int retry_after_sec);
  ~BucketUpload();
  BucketUpload(const BucketUpload&) = delete;
  BucketUpload& operator=(const BucketUpload&) = delete;

  const std::string& key() const { return key_; }
  // Takes the next bytes (synchronous: called from the body reader).
  void append(std::string_view data) { buffer_.append(data); }
  // Sends a full part if there is one (waiting for the one before it): awaited after
  // every chunk of the body.
  asio::awaitable<Result<void>> drain();
  // The rest, and the object is complete in the bucket.
  asio::awaitable<Result<void>> finish();
  // Drops whatever was sent: the multipart upload is aborted (or, on a server without
  // AbortMultipartUpload, completed and deleted), nothing stays in the bucket.
  asio::awaitable<void> discard();

 private:
  struct InFlight;
  asio::awaitable<Result<void>> wait_in_flight();
  Result<void> failed(const store::S3Error& error) const;

  asio::any_io_executor executor_;
  std::shared_ptr<store::S3Client> client_;
  std::string key_;
  size_t part_bytes_;
  int retry_after_sec_;
  std::string buffer_;
  std::string upload_id_;  // set once the multipart upload exists
  std::vector<std::string> part_etags_;
  std::shared_ptr<InFlight> in_flight_;
  bool finished_ = false;
};

}  // namespace sandboxd::api
