// A request body sent with Content-Encoding: gzip, inflated as it arrives for the
// consumer that wants its bytes (E2B's SDKs compress uploads with `gzip: true`).
//
// The body is hostile: what it inflates to is counted against the caller's limit (the
// same as an uncompressed body's), and inflated a bounded piece at a time, each handed
// on before the next is made, so a small body that inflates to gigabytes (a zip bomb)
// costs at most one piece of memory and ends at the limit with a 413.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "api/routes.h"

namespace sandboxd::api {

class GzipBody {
 public:
  // What one step inflates at most: the memory a body holds at once.
  static constexpr size_t kPieceBytes = 256 * 1024;

  // `max_inflated`: the most the body may inflate to (then too_large()).
  explicit GzipBody(uint64_t max_inflated);
  ~GzipBody();
  GzipBody(const GzipBody&) = delete;
  GzipBody& operator=(const GzipBody&) = delete;

  // The consumer of the inflated bytes, wrapped: it gets them in pieces of at most
  // kPieceBytes as each compressed chunk is read. The wrapper refuses what is not gzip
  // (400) and a body past the limit (413).
  server::RequestContext::AsyncChunkConsumer inflating(server::RequestContext::AsyncChunkConsumer consumer);
  // Whether the body ended where its (last) gzip member ends: a body cut short is not
  // a complete upload (400 when not).
  Result<void> check_complete() const;
  uint64_t inflated() const { return inflated_; }

 private:
  z_stream stream_{};
  bool ready_ = false;
  bool member_ended_ = true;  // no member begun yet, or the last one ended
  uint64_t max_inflated_;
  uint64_t inflated_ = 0;
  std::string piece_;
};

// Whether a request's Content-Encoding is gzip (any case; "x-gzip" too); an error for
// any other encoding but identity.
Result<bool> gzip_encoded(const RequestContext& ctx);

}  // namespace sandboxd::api
