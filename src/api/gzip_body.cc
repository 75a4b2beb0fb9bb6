#include "api/gzip_body.h"

#include <boost/beast/core/string.hpp>

namespace sandboxd::api {

GzipBody::GzipBody(uint64_t max_inflated) : max_inflated_(max_inflated) {
  // 16 + MAX_WBITS: a gzip wrapper (not zlib's, nor raw deflate).
  ready_ = inflateInit2(&stream_, 16 + MAX_WBITS) == Z_OK;
  piece_.resize(kPieceBytes);
}

GzipBody::~GzipBody() {
  if (ready_) inflateEnd(&stream_);
}

server::RequestContext::AsyncChunkConsumer GzipBody::inflating(
    server::RequestContext::AsyncChunkConsumer consumer) {
  return [this, consumer = std::move(consumer)](std::string_view chunk) -> asio::awaitable<Result<void>> {
    if (!ready_) co_return ApiError::internal();
    stream_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(chunk.data()));
    stream_.avail_in = static_cast<uInt>(chunk.size());
    while (stream_.avail_in > 0) {
      if (member_ended_) {
        // A new member (gzip allows several, one after the other: one stream).
        if (inflateReset(&stream_) != Z_OK) co_return ApiError::internal();
        member_ended_ = false;
      }
      stream_.next_out = reinterpret_cast<Bytef*>(piece_.data());
      stream_.avail_out = static_cast<uInt>(piece_.size());
      const int rc = inflate(&stream_, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
        co_return ApiError::invalid_request("The body is not valid gzip (Content-Encoding: gzip): " +
                                            std::string(stream_.msg ? stream_.msg : "inflate failed"));
      const size_t made = piece_.size() - stream_.avail_out;
      if (rc == Z_STREAM_END) member_ended_ = true;
      if (made > max_inflated_ - inflated_)
        co_return ApiError::too_large("The upload inflates to more than the server's upload limit (" +
                                      std::to_string(max_inflated_) + " bytes, server.maxUploadSize)");
      inflated_ += made;
      if (made > 0) {
        if (auto taken = co_await consumer(std::string_view(piece_.data(), made)); !taken) co_return taken;
      } else if (rc == Z_BUF_ERROR) {
        break;  // (all of the input is taken in; more comes with the next chunk)
      }
    }
    co_return Result<void>{};
  };
}

Result<void> GzipBody::check_complete() const {
  if (!member_ended_)
    return ApiError::invalid_request("The gzip body ended before its end (Content-Encoding: gzip)");
  return {};
}

Result<bool> gzip_encoded(const RequestContext& ctx) {
  const auto encoding = ctx.header_value(http::field::content_encoding);
  if (encoding.empty() || boost::beast::iequals(encoding, "identity")) return false;
  if (boost::beast::iequals(encoding, "gzip") || boost::beast::iequals(encoding, "x-gzip")) return true;
  return ApiError::invalid_request("Content-Encoding '" + std::string(encoding.substr(0, 32)) +
                                   "' is not accepted; send the body as is or gzip-encoded");
}

}  // namespace sandboxd::api
