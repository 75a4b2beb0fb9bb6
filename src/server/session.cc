// A connection's loop (HttpServer::session): admitted against the connection caps, then
// one request after another on the kept-alive connection: the header read under its
// timeout, the request dispatched, the response's last checks and headers, the answer
// sent, the observer told.
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <sstream>

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>

#include "server/header_values.h"
#include "server/http_server.h"

namespace sandboxd::server {
namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
using Clock = std::chrono::steady_clock;

http::fields& header_of(Response& response) {
  return std::visit(
      [](auto& res) -> http::fields& {
        using T = std::decay_t<decltype(res)>;
        if constexpr (std::is_same_v<T, FileResponse> || std::is_same_v<T, StreamResponse>)
          return res.header;
        else
          return res;
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

// How a string response's header was written by write_string_header.
enum class HeaderText {
  kWritten,  // whole, in the buffer
  kUnsafe,   // a field could end its line: nothing may be sent of it
  kBeast,    // a case the transport leaves to Beast (see below)
};

void append_number(std::string& out, uint64_t value) {
  char digits[24];
  auto end = std::to_chars(std::begin(digits), std::end(digits), value).ptr;
  out.append(digits, end);
}

// The header of a string response as Beast's serializer writes it (the status line, the
// fields in order, CRLF), with the transport's own fields: its Content-Length, the
// request id, nosniff and, when the connection ends, "Connection: close". Written into
// a buffer the connection keeps, so an answer costs no allocation of its own and no
// field is added to the message. A response whose framing a handler chose itself (a
// Content-Length, Transfer-Encoding or Connection field of its own, a status that has
// no body, a version other than 1.1) is left to Beast: kBeast, nothing written. `unsafe` names a field that
// could end its line (checked here, in the same pass, as the last line of defence).
HeaderText write_string_header(const StringResponse& res, std::string_view request_id, bool keep_alive,
                               std::string& out, std::string& unsafe) {
  const unsigned status = res.result_int();
  if (status < 200 || status == 204 || status == 304 || res.version() != 11) return HeaderText::kBeast;
  out.clear();
  out.append("HTTP/1.1 ");
  append_number(out, status);
  out.push_back(' ');
  const auto reason = res.reason();
  out.append(reason.data(), reason.size());
  out.append("\r\n");
  for (const auto& field : res) {
    const auto name = field.name();
    if (name == http::field::content_length || name == http::field::transfer_encoding ||
        name == http::field::connection)
      return HeaderText::kBeast;
    const std::string_view name_text(field.name_string().data(), field.name_string().size());
    const std::string_view value(field.value().data(), field.value().size());
    if (!safe_header_name(name_text) || !safe_header_value(value)) {
      unsafe = header_text(name_text.substr(0, 64));
      return HeaderText::kUnsafe;
    }
    // The transport's own fields replace a handler's of the same name, as set() would.
    if (beast::iequals(name_text, "request-id") || beast::iequals(name_text, "X-Content-Type-Options"))
      continue;
    out.append(name_text);
    out.append(": ");
    out.append(value);
    out.append("\r\n");
  }
  if (!keep_alive) out.append("Connection: close\r\n");
  out.append("Content-Length: ");
  append_number(out, res.body().size());
  out.append("\r\nrequest-id: ");
  out.append(request_id);
  out.append("\r\nX-Content-Type-Options: nosniff\r\n\r\n");
  return HeaderText::kWritten;
}

// Sends `header` then `body`: at once when the socket takes them (an answer of a few
// hundred bytes nearly always fits the socket's send buffer: no composed operation, no
// timer), the rest, if any, under the write timeout.
asio::awaitable<bool> write_now_or_later(beast::tcp_stream& stream, std::string_view header,
                                         std::string_view body, std::chrono::seconds write_timeout) {
  iovec pieces[2] = {{const_cast<char*>(header.data()), header.size()},
                     {const_cast<char*>(body.data()), body.size()}};
  msghdr message{};
  message.msg_iov = pieces;
  message.msg_iovlen = body.empty() ? 1 : 2;
  ssize_t sent;
  do sent = ::sendmsg(stream.socket().native_handle(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (sent < 0 && errno == EINTR);
  if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) co_return false;
  size_t done = sent < 0 ? 0 : static_cast<size_t>(sent);
  if (done == header.size() + body.size()) co_return true;
  const size_t header_done = std::min(done, header.size());
  const std::array<asio::const_buffer, 2> rest{
      asio::const_buffer(header.data() + header_done, header.size() - header_done),
      asio::const_buffer(body.data() + (done - header_done), body.size() - (done - header_done))};
  stream.expires_after(write_timeout);
  auto [ec, n] = co_await asio::async_write(stream, rest, use_tuple);
  stream.expires_never();
  co_return !ec;
}

// Reads and drops what the peer still sends after this side's FIN, until it ends (EOF or
// an error), for at most kLingerTime or kLingerBytes.
asio::awaitable<void> drain_before_close(beast::tcp_stream& stream) {
  constexpr auto kLingerTime = std::chrono::seconds(2);
  constexpr size_t kLingerBytes = 16u << 20;
  std::array<char, 16384> scratch;
  stream.expires_after(kLingerTime);
  for (size_t dropped = 0; dropped < kLingerBytes;) {
    auto [ec, n] = co_await stream.async_read_some(asio::buffer(scratch), use_tuple);
    if (ec) break;
    dropped += n;
  }
  stream.expires_never();
}

}  // namespace

asio::awaitable<void> HttpServer::session(tcp::socket socket,
                                          std::shared_ptr<const ConnectionOrigin> origin) {
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
    static const std::string kAddressBusy = canned_refusal(ApiError::rate_limited(
        "Too many open connections from this address (server.maxConnectionsPerIp)", 1));
    static const std::string kAddressIdle =
        canned_refusal(ApiError::rate_limited("Too many connections from this address have not authenticated "
                                              "(server.maxUnauthenticatedConnectionsPerIp)",
                                              1));
    const std::string& answer =
        slot.admission() == ConnectionCounter::Admission::kAddressFull                  ? kAddressBusy
        : slot.admission() == ConnectionCounter::Admission::kAddressUnauthenticatedFull ? kAddressIdle
                                                                                        : kBusy;
    ::send(socket.native_handle(), answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    boost::system::error_code ignored;
    socket.close(ignored);
    co_return;
  }
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  // Beast reads into what the buffer has room for, at least 512 bytes: an empty buffer
  // takes a typical client's request (an SDK's runs to 534 bytes of header) in two
  // reads. One allocation per connection makes it one.
  buffer.reserve(4096);
  std::string header_bytes;  // a string response's header, written here (capacity kept)
  std::string unsafe_field;
  bool body_left = false;  // the last request was answered before its body was read
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
                             ? ApiError::headers_too_large("Request headers are too large")
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
      auto refusal =
          error_response(ApiError::overloaded("This server is shutting down; try again shortly", 1));
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
    body_left = !ctx.body_complete();
    const bool head = ctx.method() == http::verb::head;
    unsigned status = 0;
    size_t bytes = 0;
    bool sent = false;
    bool written = false;
    if (auto* res = std::get_if<StringResponse>(&response)) {
      auto text = write_string_header(*res, ctx.request_id, keep_alive, header_bytes, unsafe_field);
      if (text == HeaderText::kUnsafe) {
        spdlog::error("{} {}: refused to send the response: header '{}' holds a control byte", ctx.request_id,
                      ctx.route_name, unsafe_field);
        *res = error_response(ApiError::internal());
        text = write_string_header(*res, ctx.request_id, keep_alive, header_bytes, unsafe_field);
      }
      if (text == HeaderText::kWritten) {
        status = res->result_int();
        // The headers of the GET answer (Content-Length included) and no body, for HEAD.
        if (!head) bytes = res->body().size();
        sent = co_await write_now_or_later(stream, header_bytes, head ? std::string_view() : res->body(),
                                           limits_.write_timeout);
        written = true;
      }
    }
    if (!written) {
      std::visit(
          [&](auto& res) {
            auto& base = [&]() -> auto& {
              using T = std::decay_t<decltype(res)>;
              if constexpr (std::is_same_v<T, FileResponse> || std::is_same_v<T, StreamResponse>)
                return res.header;
              else
                return res;
            }
            ();
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
      sent = co_await send(stream, response, head, status, bytes);
    }
    --in_flight_;
    double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    if (observer_) {
      RequestRecord record;
      record.request_id = ctx.request_id;
      record.method = http::to_string(ctx.method());
      record.target = std::string_view(parser.get().target()).substr(0, 256);
      record.owner = ctx.owner;
      record.route =
          ctx.route_name.empty() ? std::string_view("unmatched") : std::string_view(ctx.route_name);
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
  // Answered before its body was read (too large, refused, malformed), a request leaves
  // the client still sending: closing now, with its bytes in the receive queue or still
  // arriving, resets the connection, and a client in the middle of a write loses the
  // answer it was sent (curl: "Send failure: Broken pipe", the status never read). As
  // nginx's lingering close does, what still comes is read and dropped until the client
  // ends, for a bounded time and number of bytes.
  if (body_left && !stopping_) co_await drain_before_close(stream);
}

}  // namespace sandboxd::server
