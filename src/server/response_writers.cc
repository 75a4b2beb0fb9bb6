// The answers: the JSON response builders, the chunk writer of a streamed body, and
// HttpServer::send for each kind of response (a string, a stream with its chunks, a
// file range by sendfile).
#include <sys/sendfile.h>
#include <unistd.h>

#include <algorithm>
#include <array>

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_cat.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/json.hpp>

#include "base/utf8.h"
#include "messages/error_types.h"
#include "server/http_server.h"

namespace sandboxd::server {
namespace {

namespace json = boost::json;

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

}  // namespace

StringResponse json_response(http::status status, std::string body) {
  StringResponse res{status, 11};
  res.set(http::field::content_type, "application/json");
  // Every JSON text the server sends is UTF-8: names and messages built from bytes it
  // did not choose (a file name made in a sandbox) have their invalid bytes replaced
  // with U+FFFD here, whatever the handler forgot. (JSON's own syntax is ASCII, so
  // this never touches anything but string contents.)
  if (is_valid_utf8(body))
    res.body() = std::move(body);  // the common case: no copy
  else
    res.body() = to_valid_utf8(body);
  return res;
}

http::status http_status_of(ErrorKind kind) {
  return static_cast<http::status>(messages::anthropic_error(kind).status);
}

std::string error_body(const ApiError& error) {
  json::object body{{"type", "error"},
                    {"error", json::object{{"type", messages::anthropic_error(error.kind).type},
                                           {"message", error.message}}}};
  return json::serialize(body);
}

StringResponse error_response(const ApiError& error) {
  auto res = json_response(http_status_of(error.kind), error_body(error));
  // 529 is Anthropic's own status; Beast knows no reason phrase for it.
  if (error.kind == ErrorKind::upstream_overloaded) res.reason("Overloaded");
  if (error.retry_after) res.set(http::field::retry_after, std::to_string(*error.retry_after));
  // RFC 9110: a 401 names the scheme it wants; MCP clients read it to learn how to sign in.
  if (error.kind == ErrorKind::unauthenticated)
    res.set(http::field::www_authenticate, "Bearer realm=\"sandboxd\"");
  return res;
}

asio::awaitable<bool> ChunkWriter::write(std::string_view data) {
  if (failed_) co_return false;
  if (data.empty()) co_return true;  // an empty chunk would end the body
  stream_.expires_after(write_timeout_);
  boost::system::error_code ec;
  if (raw_)
    std::tie(ec, std::ignore) =
        co_await asio::async_write(stream_, asio::const_buffer(data.data(), data.size()), use_tuple);
  else
    std::tie(ec, std::ignore) = co_await asio::async_write(
        stream_, http::make_chunk(asio::const_buffer(data.data(), data.size())), use_tuple);
  stream_.expires_never();
  if (ec) failed_ = true;
  co_return !failed_;
}

asio::awaitable<bool> ChunkWriter::write_last(std::string_view data) {
  if (failed_) co_return false;
  if (raw_) co_return co_await write(data);
  stream_.expires_after(write_timeout_);
  boost::system::error_code ec;
  const auto last = http::make_chunk_last();
  if (data.empty()) {
    std::tie(ec, std::ignore) = co_await asio::async_write(stream_, last, use_tuple);
  } else {
    const auto chunk = http::make_chunk(asio::const_buffer(data.data(), data.size()));
    std::tie(ec, std::ignore) =
        co_await asio::async_write(stream_, beast::buffers_cat(chunk, last), use_tuple);
  }
  stream_.expires_never();
  finished_ = true;
  if (ec) failed_ = true;
  co_return !failed_;
}

asio::awaitable<bool> HttpServer::send(beast::tcp_stream& stream, Response& response, bool head,
                                       unsigned& status, size_t& bytes) {
  stream.expires_after(limits_.write_timeout);
  if (auto* res = std::get_if<StringResponse>(&response)) {
    status = res->result_int();
    res->prepare_payload();
    boost::system::error_code ec;
    if (head) {
      // The headers of the GET answer (Content-Length included), no body.
      http::response_serializer<http::string_body> serializer{*res};
      std::tie(ec, std::ignore) = co_await http::async_write_header(stream, serializer, use_tuple);
    } else {
      bytes = res->body().size();
      std::tie(ec, std::ignore) = co_await http::async_write(stream, *res, use_tuple);
    }
    stream.expires_never();
    co_return !ec;
  }
  if (auto* streamed = std::get_if<StreamResponse>(&response)) {
    status = streamed->header.result_int();
    // A 101 has no body at all (what follows is another protocol's, written raw by the
    // producer): neither length nor chunks (RFC 9110 8.6, RFC 9112 6.1).
    const bool sized = streamed->header.has_content_length() ||
                       streamed->header.result() == http::status::switching_protocols;
    if (!sized) streamed->header.chunked(true);
    http::response_serializer<http::empty_body> serializer{streamed->header};
    boost::system::error_code ec;
    if (head || streamed->first_chunk.empty()) {
      std::tie(ec, std::ignore) = co_await http::async_write_header(stream, serializer, use_tuple);
    } else {
      // The header's bytes, then the first chunk, in one write.
      std::string header_bytes;
      serializer.split(true);
      serializer.next(ec, [&](boost::system::error_code&, const auto& buffers) {
        for (const auto piece : beast::buffers_range_ref(buffers))
          header_bytes.append(static_cast<const char*>(piece.data()), piece.size());
        serializer.consume(beast::buffer_bytes(buffers));
      });
      const auto& first = streamed->first_chunk;
      if (!ec && sized)
        std::tie(ec, std::ignore) = co_await asio::async_write(
            stream,
            std::array{asio::const_buffer(header_bytes.data(), header_bytes.size()),
                       asio::const_buffer(first.data(), first.size())},
            use_tuple);
      else if (!ec)
        std::tie(ec, std::ignore) = co_await asio::async_write(
            stream,
            beast::buffers_cat(asio::const_buffer(header_bytes.data(), header_bytes.size()),
                               http::make_chunk(asio::const_buffer(first.data(), first.size()))),
            use_tuple);
    }
    stream.expires_never();
    if (ec) co_return false;
    if (head) co_return true;
    ChunkWriter writer(stream, limits_.write_timeout, /*raw=*/sized);
    try {
      co_await streamed->produce(writer);
    } catch (const std::exception& e) {
      // Unexpected, and the status is sent: log it and end the connection.
      spdlog::error("a streamed response failed: {}", e.what());
      co_return false;
    }
    if (writer.failed()) co_return false;
    if (sized || writer.finished()) co_return true;
    stream.expires_after(limits_.write_timeout);
    std::tie(ec, std::ignore) = co_await asio::async_write(stream, http::make_chunk_last(), use_tuple);
    stream.expires_never();
    co_return !ec;
  }
  auto& file = std::get<FileResponse>(response);
  status = file.header.result_int();
  file.header.content_length(file.length);
  struct CloseFd {
    int fd;
    ~CloseFd() {
      if (fd >= 0) ::close(fd);
    }
  } closer{file.fd};
  http::response_serializer<http::empty_body> serializer{file.header};
  auto [ec, n] = co_await http::async_write_header(stream, serializer, use_tuple);
  stream.expires_never();
  if (ec) co_return false;
  if (head) co_return true;
  // Zero-copy: sendfile from the file to the socket, waiting for writability.
  auto& socket = stream.socket();
  socket.native_non_blocking(true);
  off_t offset = static_cast<off_t>(file.offset);
  uint64_t remaining = file.length;
  asio::steady_timer deadline(socket.get_executor());
  while (remaining > 0) {
    ssize_t sent =
        ::sendfile(socket.native_handle(), file.fd, &offset, std::min<uint64_t>(remaining, 4u << 20));
    if (sent > 0) {
      remaining -= static_cast<uint64_t>(sent);
      bytes += static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && errno == EAGAIN) {
      using namespace asio::experimental::awaitable_operators;
      deadline.expires_after(limits_.write_timeout);
      auto outcome =
          co_await (socket.async_wait(tcp::socket::wait_write, use_tuple) || deadline.async_wait(use_tuple));
      if (outcome.index() == 1) co_return false;  // the client stopped reading
      continue;
    }
    co_return false;  // error, or the file shrank under us
  }
  co_return true;
}

}  // namespace sandboxd::server
