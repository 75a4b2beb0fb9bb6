// How a handler reads its request (RequestContext): its header fields and query, and
// its body whole, in chunks as it arrives or through an awaiting consumer, under the
// idle timeout and the minimum average rate; "Expect: 100-continue" answered first.
// (The body read straight into a consumer's buffers is body_into.cc.)
#include <algorithm>
#include <memory>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "server/http_server.h"

namespace sandboxd::server {
namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
using Clock = std::chrono::steady_clock;

}  // namespace

RequestContext::RequestContext(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                               http::request_parser<http::buffer_body>& parser, const ServerLimits& limits)
    : stream_(stream), buffer_(buffer), parser_(parser), limits_(limits) {}

std::string_view RequestContext::header_value(http::field field) const {
  auto it = header().find(field);
  return it == header().end() ? std::string_view() : std::string_view(it->value());
}

std::string_view RequestContext::header_value(std::string_view name) const {
  auto it = header().find(name);
  return it == header().end() ? std::string_view() : std::string_view(it->value());
}

std::optional<std::string> RequestContext::query_value(const std::string& name) const {
  auto it = query.find(name);
  if (it == query.end()) return std::nullopt;
  return it->second;
}

asio::awaitable<Result<void>> RequestContext::read_body_stream(
    size_t limit, const std::function<Result<void>(std::string_view)>& on_chunk,
    const std::function<asio::awaitable<Result<void>>()>& after_chunk) {
  AsyncChunkConsumer consume = [&on_chunk,
                                &after_chunk](std::string_view chunk) -> asio::awaitable<Result<void>> {
    if (auto accepted = on_chunk(chunk); !accepted) co_return accepted;
    if (!after_chunk) co_return Result<void>();
    co_return co_await after_chunk();
  };
  co_return co_await read_body_stream_async(limit, consume);
}

asio::awaitable<Result<void>> RequestContext::read_body_stream_async(size_t limit,
                                                                     const AsyncChunkConsumer& on_chunk) {
  if (kept_body_) {
    std::string body = std::move(*kept_body_);
    kept_body_.reset();
    if (body.size() > limit)
      co_return ApiError::too_large("Request body exceeds the limit of " + std::to_string(limit) + " bytes");
    if (!body.empty())
      if (auto accepted = co_await on_chunk(body); !accepted) co_return accepted.error();
    co_return Result<void>();
  }
  if (parser_.is_done()) co_return Result<void>();
  if (auto length = parser_.content_length(); length && *length > limit)
    co_return ApiError::too_large("Request body is " + std::to_string(*length) + " bytes; the limit is " +
                                  std::to_string(limit) + " bytes");
  if (!co_await send_continue_if_expected()) co_return ApiError::invalid_request("connection lost");
  // Each read waits at most body_idle_timeout, and never past the moment the body falls
  // below the minimum average rate: `received` bytes buy received/min_rate seconds on
  // top of the grace credit. A body trickling a byte every few seconds is cut off (the
  // timeout closes the connection) instead of holding its descriptor forever.
  const auto body_started = Clock::now();
  uint64_t received = 0;
  auto read_deadline = [&] { return body_read_deadline(body_started, received); };
  // The read buffer is allocated when a read needs it, uninitialised and no larger than
  // the body: a small body that came with the header costs no allocation at all.
  std::unique_ptr<char[]> chunk;
  size_t chunk_size = 0;
  auto ensure_chunk = [&](uint64_t wanted) {
    if (chunk) return;
    chunk_size = static_cast<size_t>(std::clamp<uint64_t>(wanted, 4096, 1024 * 1024));
    chunk.reset(new char[chunk_size]);
  };
  if (auto length = parser_.content_length(); length && !parser_.chunked()) {
    // A sized body is read straight from the socket in large pieces: what the header
    // read already buffered first, then the rest. (The parser would copy every piece
    // through its own buffer, in small reads.)
    uint64_t remaining = *length;
    while (remaining > 0 && buffer_.size() > 0) {
      size_t take = std::min<uint64_t>(remaining, buffer_.size());
      auto data = buffer_.data();
      auto accepted = co_await on_chunk(std::string_view(static_cast<const char*>(data.data()), take));
      buffer_.consume(take);
      remaining -= take;
      if (!accepted) co_return accepted.error();
    }
    while (remaining > 0) {
      ensure_chunk(remaining);
      stream_.expires_at(read_deadline());
      auto [ec, n] = co_await stream_.async_read_some(
          asio::buffer(chunk.get(), static_cast<size_t>(std::min<uint64_t>(remaining, chunk_size))),
          use_tuple);
      if (ec) {
        stream_.expires_never();
        co_return ApiError::invalid_request("The request body could not be read: " + ec.message());
      }
      remaining -= n;
      received += n;
      auto accepted = co_await on_chunk(std::string_view(chunk.get(), n));
      if (!accepted) {
        stream_.expires_never();
        co_return accepted.error();
      }
    }
    stream_.expires_never();
    body_read_ = true;
    co_return Result<void>();
  }
  size_t total = 0;
  ensure_chunk(1024 * 1024);
  while (!parser_.is_done()) {
    parser_.get().body().data = chunk.get();
    parser_.get().body().size = chunk_size;
    stream_.expires_at(read_deadline());
    auto [ec, n] = co_await http::async_read(stream_, buffer_, parser_, use_tuple);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      stream_.expires_never();
      co_return ApiError::invalid_request("The request body could not be read: " + ec.message());
    }
    size_t got = chunk_size - parser_.get().body().size;
    total += got;
    received += got;
    if (total > limit) {
      stream_.expires_never();
      co_return ApiError::too_large("Request body exceeds the limit of " + std::to_string(limit) + " bytes");
    }
    if (got > 0) {
      auto accepted = co_await on_chunk(std::string_view(chunk.get(), got));
      if (!accepted) {
        stream_.expires_never();
        co_return accepted.error();
      }
    }
  }
  stream_.expires_never();
  co_return Result<void>();
}

Clock::time_point RequestContext::body_read_deadline(Clock::time_point started, uint64_t received) const {
  auto idle = Clock::now() + limits_.body_idle_timeout;
  if (limits_.body_min_rate == 0) return idle;
  auto earned = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
      static_cast<double>(received) / static_cast<double>(limits_.body_min_rate)));
  return std::min(idle, started + limits_.body_rate_grace + earned);
}

asio::awaitable<bool> RequestContext::send_continue_if_expected() {
  // curl and others wait for this before sending a large body.
  if (!beast::iequals(header_value(http::field::expect), "100-continue")) co_return true;
  http::response<http::empty_body> cont{http::status::continue_, 11};
  stream_.expires_after(limits_.write_timeout);
  auto [ec, n] = co_await http::async_write(stream_, cont, use_tuple);
  co_return !ec;
}

asio::awaitable<Result<std::string>> RequestContext::read_body(size_t limit) {
  // A small sized body usually arrives with its header: taken from the read buffer at
  // once, without the chunked reader's coroutines around it.
  if (!kept_body_ && !parser_.is_done() && !parser_.chunked()) {
    const auto length = parser_.content_length();
    if (length && *length <= limit && buffer_.size() >= *length &&
        !beast::iequals(header_value(http::field::expect), "100-continue")) {
      std::string body(static_cast<const char*>(buffer_.data().data()), static_cast<size_t>(*length));
      buffer_.consume(static_cast<size_t>(*length));
      body_read_ = true;
      co_return body;
    }
  }
  std::string body;
  auto rc = co_await read_body_stream(limit, [&](std::string_view chunk) -> Result<void> {
    body.append(chunk);
    return {};
  });
  if (!rc) co_return rc.error();
  co_return body;
}

}  // namespace sandboxd::server
