#include "server/port_proxy.h"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <limits>

#include "server/end_to_end_fields.h"

namespace sandboxd::server {
namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr size_t kPieceSize = 64 * 1024;
using Clock = std::chrono::steady_clock;

// Whether the comma-separated list `value` (a Connection header) holds `token`.
bool lists_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    std::string_view item = value.substr(0, comma);
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (beast::iequals(item, token)) return true;
  }
  return false;
}

// What the proxy holds while the answer streams or the tunnel runs (the response
// outlives the handler).
struct Upstream {
  explicit Upstream(tcp::socket socket) : stream(std::move(socket)) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  std::shared_ptr<DisconnectWatch> watch;  // the client going away ends the exchange
  std::unique_ptr<char[]> piece{new char[kPieceSize]};
  std::shared_ptr<void> hold;
  ~Upstream() {
    if (watch) watch->stop();
  }
};

// One direction of a tunnel: what `from` sends goes to `to` as it arrives (the next read
// waits for the write, so a slow reader holds the sender back); its end is passed on as
// a half-close.
asio::awaitable<void> pump(tcp::socket& from, tcp::socket& to, Clock::time_point& last_moved) {
  std::unique_ptr<char[]> piece(new char[kPieceSize]);
  for (;;) {
    auto [ec, n] = co_await from.async_read_some(asio::buffer(piece.get(), kPieceSize), use_tuple);
    if (n > 0) {
      last_moved = Clock::now();
      auto [write_error, written] = co_await asio::async_write(to, asio::buffer(piece.get(), n), use_tuple);
      if (write_error) break;
      last_moved = Clock::now();
    }
    if (ec) break;
  }
  boost::system::error_code ignored;
  to.shutdown(tcp::socket::shutdown_send, ignored);
}

// Returns once nothing has moved either way for `idle`.
asio::awaitable<void> idle_watch(asio::steady_timer& timer, const Clock::time_point& last_moved,
                                 std::chrono::seconds idle) {
  for (;;) {
    timer.expires_at(last_moved + idle);
    auto [ec] = co_await timer.async_wait(use_tuple);
    if (ec) co_return;
    if (Clock::now() >= last_moved + idle) co_return;
  }
}

asio::awaitable<bool> write_all(tcp::socket& to, beast::flat_buffer& pending) {
  if (pending.size() == 0) co_return true;
  auto [ec, n] = co_await asio::async_write(to, pending.data(), use_tuple);
  pending.consume(pending.size());
  co_return !ec;
}

// Both directions until both have ended, or the idle timeout (then both are cancelled).
asio::awaitable<void> tunnel(tcp::socket& client, tcp::socket& upstream, std::chrono::seconds idle) {
  using namespace asio::experimental::awaitable_operators;
  Clock::time_point last_moved = Clock::now();
  asio::steady_timer timer(client.get_executor());
  co_await ((pump(client, upstream, last_moved) && pump(upstream, client, last_moved)) ||
            idle_watch(timer, last_moved, idle));
}

ApiError no_answer(const PortProxyOptions& options) {
  return ApiError::upstream_failed(options.no_answer_message);
}

}  // namespace

asio::awaitable<Result<Response>> proxy_request(RequestContext& ctx, tcp::socket socket, std::string target,
                                                PortProxyOptions options) {
  auto upstream = std::make_shared<Upstream>(std::move(socket));
  upstream->hold = std::move(options.hold);
  const auto idle = options.idle_timeout;
  auto& stream = upstream->stream;
  boost::system::error_code ignored;
  stream.socket().set_option(asio::ip::tcp::no_delay(true), ignored);

  // The request: the client's, framed anew, its Host kept (the application may build
  // its links from it). A WebSocket's upgrade keeps its Connection and Upgrade; any
  // other request asks the upstream to close after its answer (one connection each).
  const std::string upgrade(ctx.header_value(http::field::upgrade));
  const bool upgrading =
      !upgrade.empty() && lists_token(ctx.header_value(http::field::connection), "upgrade");
  http::request<http::empty_body> request{ctx.method(), target, 11};
  copy_end_to_end(ctx.header(), request);
  for (const auto& name : options.drop_fields) request.erase(name);
  if (auto host = ctx.header_value(http::field::host); !host.empty()) request.set(http::field::host, host);
  if (upgrading) {
    request.set(http::field::connection, "Upgrade");
    request.set(http::field::upgrade, upgrade);
  } else {
    request.keep_alive(false);
  }
  const bool chunked_in =
      !ctx.kept_body() &&
      ctx.header_value(http::field::transfer_encoding).find("chunked") != std::string_view::npos;
  if (ctx.kept_body())
    request.content_length(ctx.kept_body()->size());
  else if (auto length = ctx.header_value(http::field::content_length); !length.empty())
    request.set(http::field::content_length, length);  // checked by this server's parser
  else if (chunked_in)
    request.chunked(true);

  stream.expires_after(idle);
  http::request_serializer<http::empty_body> serializer{request};
  auto [header_error, header_bytes] = co_await http::async_write_header(stream, serializer, use_tuple);
  if (header_error) {
    spdlog::info("{} proxy: sending the request: {}", ctx.request_id, header_error.message());
    co_return no_answer(options);
  }
  // The body, piece by piece as it arrives. An upstream that stops reading (it answered
  // early) is not an error yet: its answer is read below.
  bool upstream_write_failed = false;
  RequestContext::AsyncChunkConsumer forward = [&](std::string_view piece) -> asio::awaitable<Result<void>> {
    if (upstream_write_failed) co_return Result<void>();
    stream.expires_after(idle);
    boost::system::error_code ec;
    if (chunked_in)
      std::tie(ec, std::ignore) = co_await asio::async_write(
          stream, http::make_chunk(asio::const_buffer(piece.data(), piece.size())), use_tuple);
    else
      std::tie(ec, std::ignore) =
          co_await asio::async_write(stream, asio::const_buffer(piece.data(), piece.size()), use_tuple);
    if (ec) upstream_write_failed = true;
    co_return Result<void>();
  };
  auto body = co_await ctx.read_body_stream_async(std::numeric_limits<size_t>::max(), forward);
  if (!body) co_return body.error();  // the client's body broke off
  if (chunked_in && !upstream_write_failed)
    co_await asio::async_write(stream, http::make_chunk_last(), use_tuple);  // a failure shows in the read

  // The answer's header. While it is awaited, the client going away ends the exchange
  // (not for an upgrade: the client may send its first frames before the 101, and the
  // watch would take the socket's wake-ups; the idle timeout bounds that wait).
  if (!upgrading)
    upstream->watch =
        DisconnectWatch::start(ctx.stream().socket(), [weak = std::weak_ptr<Upstream>(upstream)] {
          if (auto alive = weak.lock()) alive->stream.cancel();
        });
  auto& parser = upstream->parser;
  parser.body_limit(boost::none);
  if (ctx.method() == http::verb::head) parser.skip(true);
  stream.expires_after(idle);
  auto [read_error, read_bytes] =
      co_await http::async_read_header(stream, upstream->buffer, parser, use_tuple);
  if (read_error) {
    spdlog::info("{} proxy: no answer: {}", ctx.request_id, read_error.message());
    co_return no_answer(options);
  }
  const auto& answer = parser.get();
  StreamResponse response;
  response.header.result(answer.result_int());
  response.header.reason(answer.reason());
  response.header.version(11);
  copy_end_to_end(answer.base(), response.header);

  if (upgrading && answer.result() == http::status::switching_protocols) {
    // The handshake's answer as the upstream gave it (Sec-WebSocket-Accept and the
    // rest), then the tunnel; the client's connection ends with it.
    response.header.set(http::field::connection, "Upgrade");
    response.header.set(http::field::upgrade, answer[http::field::upgrade]);
    stream.expires_never();
    // The client sends nothing more before the 101 (RFC 6455 4.1: it MUST wait for the
    // server's handshake), so the server has read nothing of it past the request; what
    // the upstream sent right after its 101 was read with the header, and goes first.
    response.produce = [upstream, idle](ChunkWriter& writer) -> asio::awaitable<void> {
      auto& client = writer.stream().socket();
      auto& inside = upstream->stream.socket();
      if (co_await write_all(client, upstream->buffer)) co_await tunnel(client, inside, idle);
      writer.abort();
    };
    co_return Response(std::move(response));
  }

  const bool sized = answer.has_content_length() && !answer.chunked();
  if (sized) response.header.content_length(*parser.content_length());
  if (parser.is_done()) {  // no body (HEAD, 204, 304, an empty one)
    if (!answer.has_content_length()) response.header.content_length(0);
    response.produce = [upstream](ChunkWriter&) -> asio::awaitable<void> { co_return; };
    co_return Response(std::move(response));
  }
  response.produce = [upstream, idle](ChunkWriter& writer) -> asio::awaitable<void> {
    auto& parser = upstream->parser;
    while (!parser.is_done()) {
      parser.get().body().data = upstream->piece.get();
      parser.get().body().size = kPieceSize;
      upstream->stream.expires_after(idle);
      auto [ec, n] = co_await http::async_read_some(upstream->stream, upstream->buffer, parser, use_tuple);
      if (ec == http::error::need_buffer) ec = {};
      const size_t got = kPieceSize - parser.get().body().size;
      if (got > 0 && !co_await writer.write(std::string_view(upstream->piece.get(), got))) co_return;
      if (ec) {  // the upstream broke off mid-answer: the client must not see it complete
        writer.abort();
        co_return;
      }
    }
  };
  co_return Response(std::move(response));
}

}  // namespace sandboxd::server
