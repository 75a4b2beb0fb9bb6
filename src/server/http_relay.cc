#include "server/http_relay.h"

#include "server/end_to_end_fields.h"

#include <spdlog/spdlog.h>
#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>
#include <limits>
#include <set>

namespace sandboxd::server {
namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr size_t kPieceSize = 64 * 1024;
// A body read already (kept) is copied, to be sent again on a new connection when a
// reused one turns out closed, up to this size (a larger one is not sent again).
constexpr size_t kReplayCopyLimit = 1u << 20;

bool is_hop_by_hop(std::string_view name, const std::set<std::string>& named_by_connection) {
  // RFC 9110 §7.6.1's list, plus what this relay frames itself (length, encoding, host)
  // and Expect (the 100-continue is answered to the client by this server already).
  static constexpr std::array<std::string_view, 12> kFields = {"connection",
                                                               "keep-alive",
                                                               "proxy-connection",
                                                               "proxy-authenticate",
                                                               "proxy-authorization",
                                                               "te",
                                                               "trailer",
                                                               "transfer-encoding",
                                                               "upgrade",
                                                               "content-length",
                                                               "host",
                                                               "expect"};
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return std::find(kFields.begin(), kFields.end(), lower) != kFields.end() ||
         named_by_connection.count(lower);
}

// Field names a Connection header lists are hop-by-hop too.
std::set<std::string> connection_tokens(const http::fields& fields) {
  std::set<std::string> tokens;
  for (auto it = fields.find(http::field::connection);
       it != fields.end() && it->name() == http::field::connection; ++it) {
    std::string value(it->value());
    size_t start = 0;
    while (start <= value.size()) {
      size_t comma = value.find(',', start);
      std::string token = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      token.erase(0, token.find_first_not_of(" \t"));
      token.erase(token.find_last_not_of(" \t") + 1);
      std::transform(token.begin(), token.end(), token.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      if (!token.empty()) tokens.insert(token);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return tokens;
}

ApiError unreachable(const RelayOptions& options) {
  return ApiError::overloaded("The replica serving this container cannot be reached; try again shortly",
                              options.retry_after_sec);
}

ApiError broke_off(const RelayOptions& options) {
  return ApiError::upstream_failed("The replica serving this container did not answer; try again shortly",
                                   options.retry_after_sec);
}

// What the relay holds while the answer streams (the response outlives the handler).
struct Upstream {
  explicit Upstream(asio::any_io_executor executor) : stream(std::move(executor)) {}
  explicit Upstream(asio::ip::tcp::socket socket) : stream(std::move(socket)), reused(true) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  std::shared_ptr<DisconnectWatch> watch;  // the client going away ends the relay
  std::unique_ptr<char[]> piece{new char[kPieceSize]};
  bool reused = false;  // taken from the pool (it may have been closed meanwhile)
  std::shared_ptr<UpstreamPool> pool;
  std::string pool_key;
  ~Upstream() {
    if (watch) watch->stop();
  }
  // The answer was read to its end: a connection both sides keep goes back to the pool.
  void answered(bool request_sent_whole) {
    if (!pool || !request_sent_whole || !parser.is_done() || !parser.keep_alive() || buffer.size() != 0)
      return;
    stream.expires_never();
    pool->give_back(pool_key, std::move(stream.socket()));
    pool.reset();
  }
};

// A connection to the upstream: an idle one from the pool, else a new one. Null when
// none could be made (logged).
asio::awaitable<std::shared_ptr<Upstream>> connect_upstream(RequestContext& ctx, const RelayTarget& target,
                                                            const RelayOptions& options, bool may_reuse) {
  auto executor = ctx.stream().get_executor();
  const std::string key = target.host + ":" + target.port;
  if (options.pool && may_reuse)
    if (auto idle = options.pool->take(key, executor)) {
      auto upstream = std::make_shared<Upstream>(std::move(*idle));
      upstream->pool = options.pool;
      upstream->pool_key = key;
      co_return upstream;
    }
  auto upstream = std::make_shared<Upstream>(executor);
  upstream->pool = options.pool;
  upstream->pool_key = key;
  // A name resolves through DNS (a StatefulSet's stable names).
  asio::ip::tcp::resolver resolver(executor);
  auto [resolve_error, endpoints] = co_await resolver.async_resolve(target.host, target.port, use_tuple);
  if (resolve_error) {
    spdlog::warn("{} relay to {}: {}", ctx.request_id, key, resolve_error.message());
    co_return nullptr;
  }
  upstream->stream.expires_after(options.connect_timeout);
  auto [connect_error, connected] = co_await upstream->stream.async_connect(endpoints, use_tuple);
  if (connect_error) {
    spdlog::warn("{} relay to {}: {}", ctx.request_id, key, connect_error.message());
    co_return nullptr;
  }
  boost::system::error_code ignored;
  upstream->stream.socket().set_option(asio::ip::tcp::no_delay(true), ignored);
  co_return upstream;
}

}  // namespace

void copy_end_to_end(const http::fields& from, http::fields& to) {
  const auto hop = connection_tokens(from);
  for (const auto& field : from)
    if (!is_hop_by_hop(field.name_string(), hop)) to.insert(field.name_string(), field.value());
}

Result<RelayTarget> parse_relay_target(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) return ApiError::invalid_request("not an http:// URL");
  url.remove_prefix(kScheme.size());
  if (url.ends_with('/')) url.remove_suffix(1);
  if (url.empty() || url.find_first_of("/?#@ ") != std::string_view::npos)
    return ApiError::invalid_request("not http://HOST[:PORT]");
  RelayTarget target;
  if (url.front() == '[') {  // [v6]:port
    auto close = url.find(']');
    if (close == std::string_view::npos) return ApiError::invalid_request("bad IPv6 host");
    target.host = std::string(url.substr(1, close - 1));
    url.remove_prefix(close + 1);
    target.port = url.starts_with(':') ? std::string(url.substr(1)) : "80";
  } else {
    auto colon = url.rfind(':');
    target.host = std::string(url.substr(0, colon));
    target.port = colon == std::string_view::npos ? "80" : std::string(url.substr(colon + 1));
  }
  if (target.host.empty() || target.port.empty() ||
      !std::all_of(target.port.begin(), target.port.end(), [](unsigned char c) { return std::isdigit(c); }))
    return ApiError::invalid_request("not http://HOST[:PORT]");
  return target;
}

asio::awaitable<Result<Response>> relay_request(RequestContext& ctx, const RelayTarget& target,
                                                const RelayOptions& options) {
  // The request: the client's, framed anew; kept alive when connections are pooled.
  const auto& incoming = ctx.header();
  http::request<http::empty_body> request{ctx.method(), incoming.target(), 11};
  copy_end_to_end(incoming, request);
  request.set(http::field::host, target.host + ":" + target.port);
  request.set(kRelayedByHeader, options.via);
  request.keep_alive(options.pool != nullptr);
  const bool chunked_in =
      !ctx.kept_body() &&
      ctx.header_value(http::field::transfer_encoding).find("chunked") != std::string_view::npos;
  if (ctx.kept_body())
    request.content_length(ctx.kept_body()->size());
  else if (auto length = ctx.header_value(http::field::content_length); !length.empty())
    request.set(http::field::content_length, length);  // checked by this server's parser
  else if (chunked_in)
    request.chunked(true);
  // Whether the request can be sent again on a new connection when a reused one turns
  // out closed: its body is not read from the client yet, or read already and kept.
  const bool copy_kept = options.pool && ctx.kept_body() && ctx.kept_body()->size() <= kReplayCopyLimit;
  const std::optional<std::string> kept_copy = copy_kept ? ctx.kept_body() : std::nullopt;
  const bool no_client_body = !ctx.kept_body() && ctx.body_complete();

  std::shared_ptr<Upstream> upstream;
  bool body_from_client = false;  // some of the body came from the client's socket
  bool upstream_write_failed = false;
  for (int attempt = 0;; ++attempt) {
    upstream = co_await connect_upstream(ctx, target, options, /*may_reuse=*/attempt == 0);
    if (!upstream) co_return unreachable(options);
    auto& stream = upstream->stream;
    // A reused connection that fails before its answer starts was closed by the peer
    // meanwhile: tried once more on a new one, when the body can be sent again.
    auto try_again = [&] {
      const bool again = upstream->reused && !body_from_client && (no_client_body || kept_copy);
      if (!again) return false;
      if (upstream->watch) upstream->watch->stop();
      upstream->watch.reset();
      if (kept_copy) ctx.keep_body(*kept_copy);
      spdlog::info("{} relay to {}:{}: a kept-alive connection was closed by the peer; sending on a new one",
                   ctx.request_id, target.host, target.port);
      return true;
    };
    stream.expires_after(options.answer_timeout);
    http::request_serializer<http::empty_body> serializer{request};
    auto [header_error, header_bytes] = co_await http::async_write_header(stream, serializer, use_tuple);
    if (header_error) {
      if (try_again()) continue;
      spdlog::warn("{} relay to {}:{}: {}", ctx.request_id, target.host, target.port, header_error.message());
      co_return unreachable(options);
    }
    // The body, piece by piece as it arrives. A holder that stops reading (it answered
    // early: 401, 413) is not an error yet: its answer is read below.
    upstream_write_failed = false;
    const bool from_client = !ctx.kept_body();
    RequestContext::AsyncChunkConsumer forward =
        [&](std::string_view piece) -> asio::awaitable<Result<void>> {
      if (from_client) body_from_client = true;
      if (upstream_write_failed) co_return Result<void>();
      stream.expires_after(options.answer_timeout);
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
    if (chunked_in && !upstream_write_failed) {
      auto [ec, n] = co_await asio::async_write(stream, http::make_chunk_last(), use_tuple);
      if (ec) upstream_write_failed = true;
    }
    if (upstream_write_failed && try_again()) continue;

    // The answer's header; the client going away meanwhile ends the relay (the holder
    // then sees its connection close and cancels the work, as for a direct client).
    upstream->watch =
        DisconnectWatch::start(ctx.stream().socket(), [weak = std::weak_ptr<Upstream>(upstream)] {
          if (auto alive = weak.lock()) alive->stream.cancel();
        });
    auto& parser = upstream->parser;
    parser.body_limit(boost::none);
    if (ctx.method() == http::verb::head) parser.skip(true);
    stream.expires_after(options.answer_timeout);
    auto [read_error, read_bytes] =
        co_await http::async_read_header(stream, upstream->buffer, parser, use_tuple);
    if (read_error) {
      // Nothing read at all on a reused connection: the peer had closed it (not a
      // cancel: that is the client gone, or the answer's timeout).
      const bool closed_before = read_error != asio::error::operation_aborted &&
                                 read_error != beast::error::timeout && upstream->buffer.size() == 0 &&
                                 !parser.got_some();
      if (closed_before && try_again()) continue;
      spdlog::warn("{} relay to {}:{}: no answer: {}", ctx.request_id, target.host, target.port,
                   read_error.message());
      // A kept-alive connection the holder closed before a byte of answer, with a body
      // that cannot be sent again: the holder closes an idle connection only while it
      // had no request on it (a request read is always answered, if only with a
      // refusal), so this one was not started there; the client may simply send it again.
      if (closed_before && upstream->reused) co_return unreachable(options);
      co_return broke_off(options);
    }
    break;
  }
  auto& parser = upstream->parser;
  const auto& answer = parser.get();
  StreamResponse response;
  response.header.result(answer.result_int());
  response.header.reason(answer.reason());
  response.header.version(11);
  copy_end_to_end(answer.base(), response.header);
  const bool sized = answer.has_content_length() && !answer.chunked();
  if (sized) response.header.content_length(*parser.content_length());
  if (parser.is_done()) {  // no body (HEAD, 204, 304, an empty one)
    if (!answer.has_content_length()) response.header.content_length(0);
    upstream->answered(!upstream_write_failed);
    response.produce = [upstream](ChunkWriter&) -> asio::awaitable<void> { co_return; };
    co_return Response(std::move(response));
  }
  response.produce = [upstream, timeout = options.answer_timeout,
                      sent_whole = !upstream_write_failed](ChunkWriter& writer) -> asio::awaitable<void> {
    auto& parser = upstream->parser;
    while (!parser.is_done()) {
      parser.get().body().data = upstream->piece.get();
      parser.get().body().size = kPieceSize;
      upstream->stream.expires_after(timeout);
      auto [ec, n] = co_await http::async_read_some(upstream->stream, upstream->buffer, parser, use_tuple);
      if (ec == http::error::need_buffer) ec = {};
      const size_t got = kPieceSize - parser.get().body().size;
      if (got > 0) {
        const bool written = co_await writer.write(std::string_view(upstream->piece.get(), got));
        if (!written) co_return;
      }
      if (ec) {  // the holder broke off mid-answer: the client must not see it complete
        writer.abort();
        co_return;
      }
    }
    upstream->answered(sent_whole);  // read to its end: the connection may serve another
  };
  co_return Response(std::move(response));
}

asio::awaitable<Result<FetchedAnswer>> fetch_from_replica(RequestContext& ctx, const RelayTarget& target,
                                                          const std::string& path, std::string_view marker,
                                                          const RelayOptions& options, size_t body_limit) {
  http::request<http::empty_body> request{http::verb::get, path, 11};
  request.set(http::field::host, target.host + ":" + target.port);
  if (auto value = ctx.header_value(http::field::authorization); !value.empty())
    request.set(http::field::authorization, value);
  if (auto key = ctx.header_value(std::string_view("x-api-key")); !key.empty()) request.set("x-api-key", key);
  request.set(kRelayedByHeader, options.via);
  request.set(marker, "1");
  request.keep_alive(options.pool != nullptr);
  for (int attempt = 0;; ++attempt) {
    auto upstream = co_await connect_upstream(ctx, target, options, /*may_reuse=*/attempt == 0);
    if (!upstream) co_return unreachable(options);
    auto& stream = upstream->stream;
    stream.expires_after(options.answer_timeout);
    auto [write_error, written] = co_await http::async_write(stream, request, use_tuple);
    http::response_parser<http::string_body> parser;
    parser.body_limit(body_limit);
    boost::system::error_code read_error = write_error;
    if (!write_error)
      std::tie(read_error, std::ignore) =
          co_await http::async_read(stream, upstream->buffer, parser, use_tuple);
    if (read_error) {
      if (upstream->reused && !parser.got_some() && read_error != beast::error::timeout)
        continue;  // closed while idle
      spdlog::warn("{} asking {}:{} for {}: {}", ctx.request_id, target.host, target.port, path,
                   read_error.message());
      co_return broke_off(options);
    }
    if (options.pool && parser.keep_alive() && upstream->buffer.size() == 0) {
      stream.expires_never();
      options.pool->give_back(upstream->pool_key, std::move(stream.socket()));
    }
    co_return FetchedAnswer{parser.get().result_int(), std::move(parser.get().body())};
  }
}

}  // namespace sandboxd::server
