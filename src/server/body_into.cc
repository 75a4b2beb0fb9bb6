// RequestContext::read_body_into: a sized body read from the socket straight into the
// consumer's buffers (an upload's hashing and writing threads take them from there).
#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstring>

#include "server/http_server.h"

namespace sandboxd::server {
namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// Copies `data` into the consumer's buffers (what did not come from the socket).
asio::awaitable<Result<void>> copy_into(const RequestContext::BodyBuffers& buffers, std::string_view data) {
  while (!data.empty()) {
    auto lent = co_await buffers.lend();
    if (!lent) co_return lent.error();
    const size_t take = std::min(data.size(), lent->size());
    std::memcpy(lent->data(), data.data(), take);
    if (auto accepted = buffers.filled(take); !accepted) co_return accepted.error();
    data.remove_prefix(take);
  }
  co_return Result<void>();
}

}  // namespace

asio::awaitable<Result<void>> RequestContext::read_body_into(size_t limit, const BodyBuffers& buffers) {
  auto length = parser_.content_length();
  if (kept_body_ || parser_.is_done() || !length || parser_.chunked()) {
    AsyncChunkConsumer copy = [&buffers](std::string_view chunk) { return copy_into(buffers, chunk); };
    co_return co_await read_body_stream_async(limit, copy);
  }
  if (*length > limit)
    co_return ApiError::too_large("Request body is " + std::to_string(*length) + " bytes; the limit is " +
                                  std::to_string(limit) + " bytes");
  if (!co_await send_continue_if_expected()) co_return ApiError::invalid_request("connection lost");
  uint64_t remaining = *length;
  // What the header read already buffered.
  if (buffer_.size() > 0) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining, buffer_.size()));
    auto copied =
        co_await copy_into(buffers, std::string_view(static_cast<const char*>(buffer_.data().data()), take));
    buffer_.consume(take);
    remaining -= take;
    if (!copied) co_return copied.error();
  }
  // The rest, each read as large as the lent buffer (or the body) allows. Timeouts as
  // read_body_stream's: idle, and the minimum average rate.
  const auto started = std::chrono::steady_clock::now();
  uint64_t received = 0;
  while (remaining > 0) {
    auto lent = co_await buffers.lend();
    if (!lent) {
      stream_.expires_never();
      co_return lent.error();
    }
    stream_.expires_at(body_read_deadline(started, received));
    auto [ec, n] = co_await stream_.async_read_some(
        asio::buffer(lent->data(), static_cast<size_t>(std::min<uint64_t>(remaining, lent->size()))),
        use_tuple);
    if (ec) {
      stream_.expires_never();
      co_return ApiError::invalid_request("The request body could not be read: " + ec.message());
    }
    remaining -= n;
    received += n;
    if (auto accepted = buffers.filled(n); !accepted) {
      stream_.expires_never();
      co_return accepted.error();
    }
  }
  stream_.expires_never();
  body_read_ = true;
  co_return Result<void>();
}

}  // namespace sandboxd::server
