// HTTP/1.1 transport on Boost.Beast and C++20 coroutines: an acceptor, one coroutine
// per connection (keep-alive), header and body timeouts (a slowloris client holds a
// socket, not a thread), per-route body limits, request ids, one access-log line per
// request, and graceful shutdown. Handlers get a RequestContext and return a Response.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>

#include "base/error.h"
#include "base/ids.h"
#include "server/connection_limits.h"
#include "server/router.h"

namespace sandboxd::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using StringResponse = http::response<http::string_body>;

// A response whose body is a range of an open file, sent with sendfile().
struct FileResponse {
  http::response<http::empty_body> header;  // Content-Length is set by the server
  int fd = -1;                              // owned: closed after sending
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Writes the chunks of a streamed body (chunked transfer encoding).
class ChunkWriter {
 public:
  // `raw`: the body goes as is (the header says its Content-Length), not in chunks.
  ChunkWriter(beast::tcp_stream& stream, std::chrono::seconds write_timeout, bool raw = false)
      : stream_(stream), write_timeout_(write_timeout), raw_(raw) {}
  // Sends one chunk at once; false (and every later call false) once the client is gone.
  asio::awaitable<bool> write(std::string_view data);
  // Sends the body's last chunk and its end together, in one write (a producer whose
  // last words are known at once saves the client a packet); nothing may follow.
  asio::awaitable<bool> write_last(std::string_view data);
  bool failed() const { return failed_; }
  bool finished() const { return finished_; }
  // The producer cannot finish the body (its source broke): the connection closes
  // without the body's end, so the client sees it cut off, never complete.
  void abort() { failed_ = true; }
  beast::tcp_stream& stream() { return stream_; }

 private:
  beast::tcp_stream& stream_;
  std::chrono::seconds write_timeout_;
  bool raw_ = false;
  bool failed_ = false;
  bool finished_ = false;
};

// Watches a connection, while a long request works, for the client closing it: then
// `on_gone` runs (on the socket's executor), so the work can be cancelled. stop() must
// be called before the socket is used for anything but writes, or goes away.
class DisconnectWatch : public std::enable_shared_from_this<DisconnectWatch> {
 public:
  static std::shared_ptr<DisconnectWatch> start(tcp::socket& socket, std::function<void()> on_gone);
  void stop();

 private:
  DisconnectWatch(tcp::socket& socket, std::function<void()> on_gone)
      : socket_(socket), on_gone_(std::move(on_gone)) {}
  asio::awaitable<void> watch();
  tcp::socket& socket_;
  std::function<void()> on_gone_;
  bool stopped_ = false;
};

// A response whose body a producer writes as it goes (server-sent events): the header
// is sent first, then `produce` writes chunks until it returns. A header with a
// Content-Length sends the body as is (exactly that many bytes), not chunked; a HEAD
// request gets the header only.
struct StreamResponse {
  http::response<http::empty_body> header;
  std::function<asio::awaitable<void>(ChunkWriter&)> produce;
  // The body's first bytes when they are known at once: sent in the header's write
  // (one packet for the client, not two), before `produce` runs.
  std::string first_chunk;
};

using Response = std::variant<StringResponse, FileResponse, StreamResponse>;

struct ServerLimits {
  size_t header_limit = 16 * 1024;
  std::chrono::seconds header_timeout{15};     // the whole header must arrive in this time
  std::chrono::seconds body_idle_timeout{60};  // at most this long without body bytes
  // A body must keep an average of body_min_rate bytes/s; body_rate_grace is the credit
  // it starts with (time to get going). A trickle is cut off, not just a silence.
  size_t body_min_rate = 1024;
  std::chrono::seconds body_rate_grace{10};
  size_t max_connections = 4096;               // open at once, all clients together
  size_t max_connections_per_owner = 256;      // open at once that authenticated to one owner
  size_t max_connections_per_address = 0;      // open at once from one client address (0: no cap)
  size_t max_unauthenticated_per_address = 0;  // of those, not authenticated yet (0: no cap)
  std::chrono::seconds write_timeout{60};
  size_t json_body_limit = 32u << 20;
};

// Where a connection came from when it is not the public listener: the API listener of
// a sandbox (see api/sandbox_network.h). The authenticator decides what it may do.
struct ConnectionOrigin {
  virtual ~ConnectionOrigin() = default;
};

// Base of what an authenticator attaches to a request about its caller.
struct CallerDetails {
  virtual ~CallerDetails() = default;
};

class ContainerScope;

class RequestContext {
 public:
  RequestContext(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                 http::request_parser<http::buffer_body>& parser, const ServerLimits& limits);

  const http::request_header<>& header() const { return parser_.get().base(); }
  http::verb method() const { return parser_.get().method(); }
  std::string_view header_value(http::field field) const;
  std::string_view header_value(std::string_view name) const;

  // Path parameters of the matched route (percent-decoded).
  std::map<std::string, std::string> params;
  // Query parameters (percent-decoded; the last one wins).
  std::map<std::string, std::string> query;
  std::optional<std::string> query_value(const std::string& name) const;

  std::string request_id;
  std::string route_name;  // for metrics and logs
  // The headers that may carry the caller's token, in order (x-api-key first; the
  // server's, HttpServer::accept_credential_header).
  std::span<const std::string> credential_headers;
  // Where the matched route finds its container (null until a route matched).
  const ContainerScope* container_scope = nullptr;
  std::string owner;  // set once authenticated
  bool authenticated_route = false;
  // Null for the public listener; a sandbox's API listener otherwise.
  std::shared_ptr<const ConnectionOrigin> origin;
  // What the authenticator learned of the caller beyond its owner (a surface's own
  // type; the transport carries it and never looks inside). Null for a user's request.
  std::shared_ptr<const CallerDetails> caller;
  // The connection's place in the server's connection counts (charged to the owner once
  // authenticated).
  ConnectionSlot* connection = nullptr;

  // The whole body, up to `limit` bytes (413 beyond it).
  asio::awaitable<Result<std::string>> read_body(size_t limit);
  // The body in chunks, as it arrives; `on_chunk` may refuse (its error is returned).
  // `after_chunk`, when set, is awaited after each chunk: a consumer that hands the
  // bytes on to something slower (the sessions bucket) holds the reading back meanwhile.
  asio::awaitable<Result<void>> read_body_stream(
      size_t limit, const std::function<Result<void>(std::string_view)>& on_chunk,
      const std::function<asio::awaitable<Result<void>>()>& after_chunk = nullptr);
  // The same, for a consumer that waits on each chunk (sends it on to another socket).
  using AsyncChunkConsumer = std::function<asio::awaitable<Result<void>>(std::string_view)>;
  asio::awaitable<Result<void>> read_body_stream_async(size_t limit, const AsyncChunkConsumer& on_chunk);
  // The body read straight into buffers its consumer lends (no copy in between, for a
  // consumer that hands the bytes to other threads): `lend` gives where the next bytes
  // go, awaiting room; `filled` takes each read's bytes at the start of the lent span
  // (its error is returned). What the header read buffered, a chunked body and a kept
  // one are copied into the lent buffers. (server/body_into.cc)
  struct BodyBuffers {
    std::function<asio::awaitable<Result<std::span<char>>>()> lend;
    std::function<Result<void>(size_t)> filled;
  };
  asio::awaitable<Result<void>> read_body_into(size_t limit, const BodyBuffers& buffers);
  // A body read already (to look into it before deciding where the request goes): the
  // next read gets it instead of the socket.
  void keep_body(std::string body) { kept_body_ = std::move(body); }
  const std::optional<std::string>& kept_body() const { return kept_body_; }
  // The whole body has been read (the connection can serve another request).
  bool body_complete() const { return parser_.is_done() || body_read_; }
  // The body's size as the request's Content-Length announces it (none when chunked).
  std::optional<uint64_t> declared_body_size() const {
    if (parser_.chunked()) return std::nullopt;
    auto length = parser_.content_length();
    return length ? std::optional<uint64_t>(*length) : std::nullopt;
  }

  beast::tcp_stream& stream() { return stream_; }

 private:
  beast::tcp_stream& stream_;
  beast::flat_buffer& buffer_;
  http::request_parser<http::buffer_body>& parser_;
  const ServerLimits& limits_;
  bool body_read_ = false;
  // How long the next read of a body may wait (body_idle_timeout, and the minimum
  // average rate since `started` given `received` bytes so far).
  std::chrono::steady_clock::time_point body_read_deadline(std::chrono::steady_clock::time_point started,
                                                           uint64_t received) const;
  // Answers "Expect: 100-continue" before the body is read; false: the connection is lost.
  asio::awaitable<bool> send_continue_if_expected();
  std::optional<std::string> kept_body_;
};

using Handler = std::function<asio::awaitable<Result<Response>>(RequestContext&)>;
// Authenticates a request: sets ctx.owner or returns the 401.
using Authenticator = std::function<Result<void>(RequestContext&)>;
// Runs each authenticated request's handler, or answers in its place (a cluster replica
// relays a request for a container another replica serves).
using Interceptor = std::function<asio::awaitable<Result<Response>>(RequestContext&, const Handler&)>;

// Where a route's request names the one container it works on, declared by the route
// beside its pattern: cluster mode serves such a request on the replica that holds that
// container (api/cluster_relay.h), so a container route that said nothing would run on
// the wrong replica. The default names none (a listing, a creation of a new id, a route
// for records only).
class ContainerScope {
 public:
  // Reads the container's id from whatever the request carries; "" when it names none.
  // One that reads the body keeps it for the handler (RequestContext::keep_body).
  using Finder = std::function<asio::awaitable<std::string>(RequestContext&)>;

  ContainerScope() = default;
  static ContainerScope path_parameter(std::string name);
  static ContainerScope query_parameter(std::string name);
  static ContainerScope header(std::string name);
  static ContainerScope found_by(Finder finder);

  bool names_a_container() const { return static_cast<bool>(finder_); }
  // The id the request names ("" when none, or when the route names no container).
  asio::awaitable<std::string> container_of(RequestContext& ctx) const;

 private:
  explicit ContainerScope(Finder finder) : finder_(std::move(finder)) {}
  Finder finder_;
};

// An error answered in another API's shape than sandboxd's own (a surface for another
// API's clients: they raise their own errors only from their API's bodies).
using ErrorShape = std::function<Response(const ApiError&)>;
// A credential a route accepts besides the server's authenticator's: nullopt when the
// request carries none of it (the server's authenticator then decides), else the
// verdict (ctx.owner set, or the error).
using RouteCredential = std::function<std::optional<Result<void>>(RequestContext&)>;

struct RouteOptions {
  bool authenticated = true;
  ContainerScope container;
  // Every error of the route in this shape, wherever it arises (authentication, the
  // cluster's routing, the handler); null: sandboxd's own.
  ErrorShape error_shape;
  // Asked before the server's authenticator (a URL signed with a token, which an SDK
  // hands to a browser to download or upload a file with); never for a connection from
  // a sandbox (ConnectionOrigin), whose reach is the authenticator's alone.
  RouteCredential credential;
};

// What the server tells its observer after each request (the access log, metrics and
// the audit log are the observer's business).
struct RequestRecord {
  std::string_view request_id, method, target, owner, route;  // route: "unmatched" if none
  unsigned status = 0;
  size_t bytes = 0;
  double seconds = 0;
  bool authenticated_route = false;
};
using RequestObserver = std::function<void(const RequestRecord&)>;

class HttpServer {
 public:
  HttpServer(asio::io_context& io, ServerLimits limits);
  ~HttpServer();

  void route(http::verb method, std::string pattern, std::string name, Handler handler,
             RouteOptions options = {});
  void set_authenticator(Authenticator authenticator) { authenticator_ = std::move(authenticator); }
  void set_observer(RequestObserver observer) { observer_ = std::move(observer); }
  void set_interceptor(Interceptor interceptor) { interceptor_ = std::move(interceptor); }
  // Runs first on every request, before its target is parsed: may give it another
  // target and set headers from what its Host names (a surface's addressing by host
  // name, as PORT-SANDBOXID.domain). What it sets is what the client could have sent itself
  // (a target and headers), so it grants nothing.
  using HostRouter = std::function<void(http::request<http::buffer_body>& request)>;
  void set_host_router(HostRouter router) { host_router_ = std::move(router); }
  // The errors of requests whose path is `prefix` or below it that no route's own
  // shape answers (no route there, a method not allowed) in another API's shape.
  // Clients of that API then see its errors everywhere under its prefix.
  void shape_errors(std::string prefix, ErrorShape shape) {
    error_shapers_.emplace_back(std::move(prefix), std::move(shape));
  }
  // A header that may carry the caller's token besides x-api-key and a bearer
  // Authorization (presented_token, server/auth.h): another API's SDKs send theirs in
  // headers of their own. Before serving; at most kMaxCredentialHeaders in all.
  void accept_credential_header(std::string name);
  static constexpr size_t kMaxCredentialHeaders = 8;
  asio::io_context& io_context() { return io_; }

  // Binds and starts accepting. Throws on a bind failure.
  tcp::endpoint listen(const std::string& host, uint16_t port);
  // Serves HTTP on a connection accepted elsewhere (a sandbox's API listener), its
  // requests tagged with `origin` (the authenticator then sees every request, routes
  // without authentication included). `on_closed` runs when the connection ends.
  void serve_connection(tcp::socket socket, std::shared_ptr<const ConnectionOrigin> origin,
                        std::function<void()> on_closed);
  // Stops accepting new connections; idle keep-alive connections close.
  void stop_accepting();
  size_t requests_in_flight() const { return in_flight_; }
  const ConnectionCounter& connections() const { return *connections_; }

 private:
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> session(tcp::socket socket, std::shared_ptr<const ConnectionOrigin> origin);
  static asio::awaitable<void> origin_session(HttpServer* self, tcp::socket socket,
                                              std::shared_ptr<const ConnectionOrigin> origin,
                                              std::function<void()> on_closed);
  asio::awaitable<Response> dispatch(RequestContext& ctx, http::request_parser<http::buffer_body>& parser);
  asio::awaitable<bool> send(beast::tcp_stream& stream, Response& response, bool head, unsigned& status,
                             size_t& bytes);

  asio::io_context& io_;
  ServerLimits limits_;
  Router router_;
  std::vector<Handler> handlers_;
  std::vector<RouteOptions> route_options_;
  Authenticator authenticator_;
  RequestObserver observer_;
  Interceptor interceptor_;
  HostRouter host_router_;
  std::vector<std::pair<std::string, ErrorShape>> error_shapers_;
  std::vector<std::string> credential_headers_{"x-api-key"};
  std::optional<tcp::acceptor> acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> in_flight_{0};
  std::shared_ptr<ConnectionCounter> connections_;  // shared with each connection (ConnectionSlot)
  // A descriptor held back for the moment the process runs out: closed to accept (and
  // at once close) a waiting connection, so accept never spins on EMFILE.
  int reserve_fd_ = -1;
};

// Builders for handlers.
StringResponse json_response(http::status status, std::string body);
// An error in the Anthropic shape (messages/error_types.h): its status, its
// {"type":"error","error":{"type":...,"message":...}} body, and the response with both,
// Retry-After and, for a 401, WWW-Authenticate.
http::status http_status_of(ErrorKind kind);
std::string error_body(const ApiError& error);
StringResponse error_response(const ApiError& error);

}  // namespace sandboxd::server

namespace sandboxd {
// The surfaces' name for an HTTP status (the service and below never see one).
using HttpStatus = boost::beast::http::status;
}  // namespace sandboxd
