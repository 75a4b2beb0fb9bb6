#include "server/http_server.h"

#include <sstream>

#include <sys/sendfile.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_cat.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/url/parse.hpp>

#include "server/header_values.h"
#include "base/utf8.h"

namespace sandboxd::server {
namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
using Clock = std::chrono::steady_clock;

http::fields& header_of(Response& response) {
  return std::visit(
      [](auto& res) -> http::fields& {
        using T = std::decay_t<decltype(res)>;
        if constexpr (std::is_same_v<T, FileResponse> || std::is_same_v<T, StreamResponse>) return res.header;
        else return res;
      },
      response);
}

// A whole HTTP/1.1 answer for a connection refused before any request is read: sent
// without waiting, then the connection closes.
std::string canned_refusal(const ApiError& error) {
  auto res = error_response(error);
  res.set(http::field::connection, "close");
  res.prepare_payload();
  std::ostringstream out;
  out << res;
  return out.str();
}

}  // namespace

StringResponse json_response(http::status status, std::string body) {
  StringResponse res{status, 11};
  res.set(http::field::content_type, "application/json");
  // Every JSON text the server sends is UTF-8: names and messages built from bytes it
  // did not choose (a file name made in a sandbox) have their invalid bytes replaced
  // with U+FFFD here, whatever the handler forgot. (JSON's own syntax is ASCII, so
  // this never touches anything but string contents.)
  if (is_valid_utf8(body)) res.body() = std::move(body);  // the common case: no copy
  else res.body() = to_valid_utf8(body);
  return res;
}

StringResponse error_response(const ApiError& error) {
  auto res = json_response(error.status, error_body(error));
  if (error.status == static_cast<http::status>(529)) res.reason("Overloaded");
  if (error.retry_after) res.set(http::field::retry_after, std::to_string(*error.retry_after));
  // RFC 9110: a 401 names the scheme it wants; MCP clients read it to learn how to sign in.
  if (error.status == http::status::unauthorized) res.set(http::field::www_authenticate, "Bearer realm=\"sandboxd\"");
  return res;
}

// ---------------------------------------------------------------------------------
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
  AsyncChunkConsumer consume = [&on_chunk, &after_chunk](std::string_view chunk) -> asio::awaitable<Result<void>> {
    if (auto accepted = on_chunk(chunk); !accepted) co_return accepted;
    if (!after_chunk) co_return Result<void>();
    co_return co_await after_chunk();
  };
  co_return co_await read_body_stream_async(limit, consume);
}

asio::awaitable<Result<void>> RequestContext::read_body_stream_async(size_t limit, const AsyncChunkConsumer& on_chunk) {
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
          asio::buffer(chunk.get(), static_cast<size_t>(std::min<uint64_t>(remaining, chunk_size))), use_tuple);
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
  auto earned = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(static_cast<double>(received) / static_cast<double>(limits_.body_min_rate)));
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
  std::string body;
  auto rc = co_await read_body_stream(limit, [&](std::string_view chunk) -> Result<void> {
    body.append(chunk);
    return {};
  });
  if (!rc) co_return rc.error();
  co_return body;
}

// ---------------------------------------------------------------------------------
asio::awaitable<bool> ChunkWriter::write(std::string_view data) {
  if (failed_) co_return false;
  if (data.empty()) co_return true;  // an empty chunk would end the body
  stream_.expires_after(write_timeout_);
  boost::system::error_code ec;
  if (raw_)
    std::tie(ec, std::ignore) = co_await asio::async_write(stream_, asio::const_buffer(data.data(), data.size()), use_tuple);
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

std::shared_ptr<DisconnectWatch> DisconnectWatch::start(tcp::socket& socket, std::function<void()> on_gone) {
  std::shared_ptr<DisconnectWatch> watch(new DisconnectWatch(socket, std::move(on_gone)));
  asio::co_spawn(socket.get_executor(), [watch]() { return watch->watch(); }, asio::detached);
  return watch;
}

asio::awaitable<void> DisconnectWatch::watch() {
  auto self = shared_from_this();
  for (;;) {
    auto [ec] = co_await socket_.async_wait(tcp::socket::wait_read, use_tuple);
    if (stopped_) co_return;  // the socket may be gone: touch nothing
    if (ec) {
      if (ec != asio::error::operation_aborted) on_gone_();
      co_return;
    }
    char byte;
    ssize_t n = ::recv(socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) co_return;  // a pipelined request: the client is still there
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      on_gone_();
      co_return;
    }
  }
}

void DisconnectWatch::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ignored;
  socket_.cancel(ignored);  // wakes the pending wait; no write is pending now
}

HttpServer::HttpServer(asio::io_context& io, ServerLimits limits)
    : io_(io),
      limits_(limits),
      connections_(std::make_shared<ConnectionCounter>(limits.max_connections, limits.max_connections_per_owner,
                                                       limits.max_connections_per_address,
                                                       limits.max_unauthenticated_per_address)),
      reserve_fd_(::open("/dev/null", O_RDONLY | O_CLOEXEC)) {}

HttpServer::~HttpServer() {
  if (reserve_fd_ >= 0) ::close(reserve_fd_);
}

void HttpServer::route(http::verb method, std::string pattern, std::string name, Handler handler,
                       RouteOptions options) {
  router_.add(method, std::move(pattern), std::move(name));
  handlers_.push_back(std::move(handler));
  route_options_.push_back(options);
}

tcp::endpoint HttpServer::listen(const std::string& host, uint16_t port) {
  tcp::endpoint endpoint{asio::ip::make_address(host), port};
  acceptor_.emplace(io_);
  acceptor_->open(endpoint.protocol());
  acceptor_->set_option(asio::socket_base::reuse_address(true));
  acceptor_->bind(endpoint);
  acceptor_->listen(asio::socket_base::max_listen_connections);
  acceptor_->native_non_blocking(true);  // the out-of-descriptors path accepts directly
  asio::co_spawn(io_, accept_loop(), asio::detached);
  return acceptor_->local_endpoint();
}

void HttpServer::stop_accepting() {
  stopping_ = true;
  if (acceptor_) {
    asio::post(acceptor_->get_executor(), [this] {
      boost::system::error_code ec;
      acceptor_->close(ec);
    });
  }
}

asio::awaitable<void> HttpServer::accept_loop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor_->async_accept(asio::make_strand(io_), use_tuple);
    if (ec) {
      if (stopping_ || ec == asio::error::operation_aborted) co_return;
      // Out of descriptors or similar: back off instead of spinning. Out of descriptors,
      // the reserve one makes room to take the waiting connection off the queue and
      // close it, so its client hears at once instead of hanging.
      static std::atomic<int64_t> last_warning{0};  // at most one line every 5 s
      const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch()).count();
      if (int64_t last = last_warning.load(); now - last >= 5 && last_warning.compare_exchange_strong(last, now))
        spdlog::warn("accept: {}", ec.message());
      const bool out_of_descriptors = ec == asio::error::no_descriptors || ec.value() == ENFILE;
      if (out_of_descriptors && reserve_fd_ < 0) reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (out_of_descriptors && reserve_fd_ >= 0) {
        ::close(reserve_fd_);
        int waiting = ::accept4(acceptor_->native_handle(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (waiting >= 0) ::close(waiting);
        reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      }
      asio::steady_timer pause(io_, std::chrono::milliseconds(50));
      co_await pause.async_wait(use_tuple);
      continue;
    }
    socket.set_option(tcp::no_delay(true));
    auto executor = socket.get_executor();
    asio::co_spawn(executor, session(std::move(socket), nullptr), asio::detached);
  }
}

void HttpServer::serve_connection(tcp::socket socket, std::shared_ptr<const ConnectionOrigin> origin,
                                  std::function<void()> on_closed) {
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  auto executor = socket.get_executor();
  asio::co_spawn(executor, origin_session(this, std::move(socket), std::move(origin), std::move(on_closed)),
                 asio::detached);
}

asio::awaitable<void> HttpServer::origin_session(HttpServer* self, tcp::socket socket,
                                                 std::shared_ptr<const ConnectionOrigin> origin,
                                                 std::function<void()> on_closed) {
  struct Closed {
    std::function<void()>& on_closed;
    ~Closed() {
      if (on_closed) on_closed();
    }
  } closed{on_closed};
  co_await self->session(std::move(socket), std::move(origin));
}

asio::awaitable<void> HttpServer::session(tcp::socket socket, std::shared_ptr<const ConnectionOrigin> origin) {
  // The public listener's connections count per client address too; a sandbox's own
  // listener (an origin) is bounded per sandbox instead.
  std::string address;
  if (!origin) {
    boost::system::error_code peer_error;
    auto peer = socket.remote_endpoint(peer_error);
    if (!peer_error) address = peer.address().to_string();
  }
  ConnectionSlot slot(connections_, std::move(address));
  if (!slot.admitted()) {
    // At a cap: a short answer, best effort and without waiting, then close.
    static const std::string kBusy = canned_refusal(ApiError::overloaded("Too many open connections", 1));
    static const std::string kAddressBusy = canned_refusal(
        ApiError::rate_limited("Too many open connections from this address (server.maxConnectionsPerIp)", 1));
    static const std::string kAddressIdle = canned_refusal(ApiError::rate_limited(
        "Too many connections from this address have not authenticated (server.maxUnauthenticatedConnectionsPerIp)", 1));
    const std::string& answer = slot.admission() == ConnectionCounter::Admission::kAddressFull ? kAddressBusy
                                : slot.admission() == ConnectionCounter::Admission::kAddressUnauthenticatedFull
                                    ? kAddressIdle
                                    : kBusy;
    ::send(socket.native_handle(), answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    boost::system::error_code ignored;
    socket.close(ignored);
    co_return;
  }
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::buffer_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(limits_.header_limit));
    parser.body_limit(boost::none);  // each route enforces its own limit while reading
    stream.expires_after(limits_.header_timeout);
    auto [ec, n] = co_await http::async_read_header(stream, buffer, parser, use_tuple);
    if (ec) {
      if (ec == http::error::header_limit || ec == http::error::bad_target || ec == http::error::bad_method ||
          ec == http::error::bad_field || ec == http::error::bad_value || ec == http::error::bad_version ||
          ec == http::error::bad_line_ending || ec == http::error::bad_content_length) {
        ApiError error = ec == http::error::header_limit
                             ? ApiError{http::status::request_header_fields_too_large, "invalid_request_error",
                                        "Request headers are too large", {}}
                             : ApiError::invalid_request("Malformed HTTP request: " + ec.message());
        auto res = error_response(error);
        res.set("request-id", new_request_id());
        res.keep_alive(false);
        res.prepare_payload();
        stream.expires_after(limits_.write_timeout);
        co_await http::async_write(stream, res, use_tuple);
      }
      break;  // end of stream, timeout (slowloris), reset: just close
    }
    stream.expires_never();
    // Counted before the check below: the drain (stop_accepting, then waiting for the
    // requests in flight) either sees this request or this request sees the drain.
    ++in_flight_;
    if (stopping_) {
      // A request that arrives on a kept-alive connection once the drain has begun: the
      // containers are about to stop (in a cluster their leases are being released), so
      // it is refused whole with a retry (its body unread, the connection closed) rather
      // than started and cut off at exit with no answer at all.
      auto refusal = error_response(ApiError::overloaded("This server is shutting down; try again shortly", 1));
      refusal.set("request-id", new_request_id());
      refusal.keep_alive(false);
      refusal.prepare_payload();
      stream.expires_after(limits_.write_timeout);
      co_await http::async_write(stream, refusal, use_tuple);
      --in_flight_;
      break;
    }
    auto started = Clock::now();
    RequestContext ctx(stream, buffer, parser, limits_);
    ctx.request_id = new_request_id();
    ctx.origin = origin;
    ctx.connection = &slot;
    Response response = co_await dispatch(ctx, parser);
    bool keep_alive = parser.get().keep_alive() && ctx.body_complete() && !stopping_;
    std::visit(
        [&](auto& res) {
          auto& base = [&]() -> auto& {
            using T = std::decay_t<decltype(res)>;
            if constexpr (std::is_same_v<T, FileResponse> || std::is_same_v<T, StreamResponse>) return res.header;
            else return res;
          }();
          base.set("request-id", ctx.request_id);
          base.keep_alive(keep_alive);
        },
        response);
    // The last line of defence against response header injection: a field that could
    // end its line (CR, LF, NUL, other controls) is never sent, whichever handler made it.
    if (auto bad = unsafe_header_field(header_of(response))) {
      spdlog::error("{} {}: refused to send the response: header '{}' holds a control byte", ctx.request_id,
                    ctx.route_name, *bad);
      if (auto* file = std::get_if<FileResponse>(&response); file && file->fd >= 0) ::close(file->fd);
      auto refused = error_response(ApiError::internal());
      refused.set("request-id", ctx.request_id);
      refused.keep_alive(keep_alive);
      response = std::move(refused);
    }
    header_of(response).set("X-Content-Type-Options", "nosniff");
    unsigned status = 0;
    size_t bytes = 0;
    bool sent = co_await send(stream, response, ctx.method() == http::verb::head, status, bytes);
    --in_flight_;
    double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    if (observer_) {
      RequestRecord record;
      record.request_id = ctx.request_id;
      record.method = http::to_string(ctx.method());
      record.target = std::string_view(parser.get().target()).substr(0, 256);
      record.owner = ctx.owner;
      record.route = ctx.route_name.empty() ? std::string_view("unmatched") : std::string_view(ctx.route_name);
      record.status = status;
      record.bytes = bytes;
      record.seconds = seconds;
      record.authenticated_route = ctx.authenticated_route;
      observer_(record);
    }
    if (!sent || !keep_alive) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

asio::awaitable<Response> HttpServer::dispatch(RequestContext& ctx, http::request_parser<http::buffer_body>& parser) {
  auto parsed = boost::urls::parse_origin_form(parser.get().target());
  if (!parsed) co_return error_response(ApiError::invalid_request("Malformed request target"));
  auto url = *parsed;
  for (auto param : url.params()) ctx.query[std::string(param.key)] = std::string(param.value);
  std::string path(url.encoded_path());
  RouteMatch match = router_.match(ctx.method(), path);
  if (match.kind == RouteMatch::Kind::kNotFound)
    co_return error_response(ApiError::not_found("No route for " + std::string(http::to_string(ctx.method())) +
                                                 " " + path.substr(0, 200)));
  if (match.kind == RouteMatch::Kind::kMethodNotAllowed) {
    auto res = error_response({http::status::method_not_allowed, "invalid_request_error",
                               "Method " + std::string(http::to_string(ctx.method())) + " is not allowed here",
                               {}});
    res.set(http::field::allow, match.allow);
    co_return res;
  }
  ctx.params = std::move(match.params);
  ctx.route_name = router_.name(match.route);
  ctx.authenticated_route = route_options_[match.route].authenticated;
  // A connection from a sandbox is always authenticated: what it may reach is the
  // authenticator's decision, for every route.
  if (route_options_[match.route].authenticated || ctx.origin) {
    if (!authenticator_) co_return error_response(ApiError::authentication("Authentication is not configured"));
    auto auth = authenticator_(ctx);
    if (!auth) co_return error_response(auth.error());
    // The owner is known now: its connections count against its own cap (the body of
    // a refused request is not read, so the connection closes after the answer).
    if (ctx.connection && !ctx.owner.empty() && !ctx.connection->charge(ctx.owner))
      co_return error_response(ApiError::rate_limited(
          "Too many open connections for this owner (the limit is " +
              std::to_string(connections_->max_per_owner()) + ")",
          1));
  }
  try {
    // (Not a ?: of two co_awaits: GCC 12 miscompiles that.)
    Result<Response> result = ApiError::internal();
    if (interceptor_) result = co_await interceptor_(ctx, handlers_[match.route]);
    else result = co_await handlers_[match.route](ctx);
    if (!result) co_return error_response(result.error());
    co_return std::move(*result);
  } catch (const std::exception& e) {
    // Unexpected: log the detail, answer without it.
    spdlog::error("{} {} failed: {}", ctx.request_id, ctx.route_name, e.what());
    co_return error_response(ApiError::internal());
  }
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
    const bool sized = streamed->header.has_content_length();
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
    ssize_t sent = ::sendfile(socket.native_handle(), file.fd, &offset, std::min<uint64_t>(remaining, 4u << 20));
    if (sent > 0) {
      remaining -= static_cast<uint64_t>(sent);
      bytes += static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && errno == EAGAIN) {
      using namespace asio::experimental::awaitable_operators;
      deadline.expires_after(limits_.write_timeout);
      auto outcome = co_await (socket.async_wait(tcp::socket::wait_write, use_tuple) || deadline.async_wait(use_tuple));
      if (outcome.index() == 1) co_return false;  // the client stopped reading
      continue;
    }
    co_return false;  // error, or the file shrank under us
  }
  co_return true;
}

}  // namespace sandboxd::server
