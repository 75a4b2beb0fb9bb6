#include "kubernetes/api_client.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/json.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "base/blocking.h"

namespace sandboxd::kubernetes {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr auto kRequestTimeout = std::chrono::seconds(60);
constexpr size_t kMaxFileBytes = 1 << 20;  // a token or a CA bundle

ApiFailure unavailable(std::string message) { return ApiFailure{0, std::move(message)}; }

ApiFailure api_status(unsigned status, std::string message) { return ApiFailure{status, std::move(message)}; }

std::optional<std::string> read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(kMaxFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxFileBytes) return std::nullopt;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return text;
}

// "https://host:port[/]" -> host, port.
bool split_url(const std::string& url, std::string& host, std::string& port) {
  std::string rest = url.substr(std::string("https://").size());
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    if (slash + 1 != rest.size()) return false;  // a path prefix is not supported
    rest.resize(slash);
  }
  if (rest.empty()) return false;
  if (rest.front() == '[') {
    auto close = rest.find(']');
    if (close == std::string::npos) return false;
    host = rest.substr(1, close - 1);
    port = close + 2 < rest.size() && rest[close + 1] == ':' ? rest.substr(close + 2) : "443";
  } else if (auto colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  } else {
    host = rest;
    port = "443";
  }
  return !host.empty() && !port.empty();
}

}  // namespace

void throw_exception_from_error(const ApiFailure& failure, const boost::source_location&) {
  throw std::runtime_error("kubernetes API (HTTP " + std::to_string(failure.status) +
                           "): " + failure.message);
}

std::optional<ApiEndpoint> find_api_endpoint(const ops::KubernetesSettings& settings, std::string& why) {
  ApiEndpoint endpoint;
  const std::string account = kServiceAccountDir;
  endpoint.ca_file = settings.ca_file.empty() ? account + "/ca.crt" : settings.ca_file;
  endpoint.token_file = settings.token_file.empty() ? account + "/token" : settings.token_file;
  if (!settings.api_server.empty()) {
    if (!split_url(settings.api_server, endpoint.host, endpoint.port)) {
      why = "kubernetes.apiServer: must be https://host[:port]";
      return std::nullopt;
    }
  } else {
    const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host) {
      why = "not in a Kubernetes pod (no KUBERNETES_SERVICE_HOST) and kubernetes.apiServer is not set";
      return std::nullopt;
    }
    endpoint.host = host;
    endpoint.port = port && *port ? port : "443";
  }
  endpoint.namespace_name = settings.namespace_name;
  if (endpoint.namespace_name.empty()) {
    auto text = read_small_file(account + "/namespace");
    endpoint.namespace_name = text && !text->empty() ? *text : "default";
  }
  return endpoint;
}

class ApiClient::Stream {
 public:
  Stream(asio::any_io_executor executor, std::unique_ptr<asio::ssl::context> context)
      : tls(std::move(context)), stream(executor, *tls) {}
  std::unique_ptr<asio::ssl::context> tls;  // before the stream, which uses it
  beast::ssl_stream<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  std::string token;
};

ApiClient::ApiClient(asio::any_io_executor executor, ApiEndpoint endpoint)
    : executor_(std::move(executor)), endpoint_(std::move(endpoint)) {}
ApiClient::~ApiClient() = default;

asio::awaitable<KubeResult<std::unique_ptr<ApiClient::Stream>>> ApiClient::connect() {
  // The CA bundle and the token are files the kubelet rotates: read on each connection.
  // (Named before co_await: GCC 12 frees a closure with captured strings twice when it
  // is a temporary of the co_await expression.)
  auto read_files = [ca = endpoint_.ca_file, token = endpoint_.token_file] {
    return std::make_pair(read_small_file(ca), read_small_file(token));
  };
  auto files = co_await run_blocking(std::move(read_files));
  if (!files.second || files.second->empty())
    co_return unavailable("the service account token " + endpoint_.token_file + " cannot be read");
  auto tls = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  tls->set_verify_mode(asio::ssl::verify_peer);
  boost::system::error_code ec;
  if (!files.first) co_return unavailable("the API server's CA " + endpoint_.ca_file + " cannot be read");
  const std::string ca = *files.first + "\n";
  tls->add_certificate_authority(asio::buffer(ca), ec);
  if (ec) co_return unavailable("the API server's CA " + endpoint_.ca_file + ": " + ec.message());
  auto stream = std::make_unique<Stream>(executor_, std::move(tls));
  stream->token = std::move(*files.second);
  tcp::resolver resolver(executor_);
  auto [resolve_error, addresses] =
      co_await resolver.async_resolve(endpoint_.host, endpoint_.port, use_tuple);
  if (resolve_error) co_return unavailable("resolving " + endpoint_.host + ": " + resolve_error.message());
  auto& lowest = beast::get_lowest_layer(stream->stream);
  lowest.expires_after(kConnectTimeout);
  auto [connect_error, connected] = co_await lowest.async_connect(addresses, use_tuple);
  if (connect_error)
    co_return unavailable("connecting to " + endpoint_.host + ":" + endpoint_.port + ": " +
                          connect_error.message());
  // The certificate must name the host we asked for (an IP address is matched as one).
  stream->stream.set_verify_callback(asio::ssl::host_name_verification(endpoint_.host));
  if (!SSL_set_tlsext_host_name(stream->stream.native_handle(), endpoint_.host.c_str()))
    co_return unavailable("TLS: cannot set the server name");
  auto [handshake_error] = co_await stream->stream.async_handshake(asio::ssl::stream_base::client, use_tuple);
  if (handshake_error) co_return unavailable("TLS with " + endpoint_.host + ": " + handshake_error.message());
  co_return std::move(stream);
}

namespace {

http::request<http::empty_body> make_request(const std::string& host, const std::string& target,
                                             const std::string& token) {
  http::request<http::empty_body> request(http::verb::get, target, 11);
  request.set(http::field::host, host);
  request.set(http::field::authorization, "Bearer " + token);
  request.set(http::field::accept, "application/json");
  request.set(http::field::user_agent, "sandboxd");
  return request;
}

// The message of a Status object the API answers with, or the status line.
std::string failure_message(unsigned status, const std::string& body) {
  boost::system::error_code ec;
  json::value parsed = json::parse(body, ec);
  if (!ec && parsed.is_object())
    if (const json::value* message = parsed.as_object().if_contains("message");
        message && message->is_string())
      return "HTTP " + std::to_string(status) + ": " + std::string(message->as_string());
  return "HTTP " + std::to_string(status);
}

}  // namespace

asio::awaitable<ApiResult> ApiClient::get(const std::string& target, size_t limit) {
  auto connected = co_await connect();
  if (!connected) co_return connected.error();
  auto& stream = **connected;
  auto& lowest = beast::get_lowest_layer(stream.stream);
  lowest.expires_after(kRequestTimeout);
  auto request = make_request(endpoint_.host, target, stream.token);
  auto [write_error, written] = co_await http::async_write(stream.stream, request, use_tuple);
  if (write_error) co_return unavailable("sending " + target + ": " + write_error.message());
  http::response_parser<http::string_body> parser;
  parser.body_limit(limit);
  parser.header_limit(64 << 10);
  auto [read_error, read] = co_await http::async_read(stream.stream, stream.buffer, parser, use_tuple);
  if (read_error) co_return unavailable("reading " + target + ": " + read_error.message());
  const unsigned status = parser.get().result_int();
  if (status != 200) co_return api_status(status, failure_message(status, parser.get().body()));
  boost::system::error_code ec;
  json::value body = json::parse(parser.get().body(), ec);
  if (ec) co_return unavailable(target + ": the API's answer is not JSON");
  co_return body;
}

asio::awaitable<KubeResult<void>> ApiClient::watch(const std::string& target, std::chrono::seconds idle,
                                                   size_t line_limit,
                                                   const std::function<bool(json::value)>& on_event,
                                                   const std::function<void()>& on_open) {
  auto connected = co_await connect();
  if (!connected) co_return connected.error();
  auto& stream = **connected;
  auto& lowest = beast::get_lowest_layer(stream.stream);
  lowest.expires_after(kRequestTimeout);
  auto request = make_request(endpoint_.host, target, stream.token);
  auto [write_error, written] = co_await http::async_write(stream.stream, request, use_tuple);
  if (write_error) co_return unavailable("sending " + target + ": " + write_error.message());
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);  // a watch streams for as long as it lasts
  parser.header_limit(64 << 10);
  auto [header_error, header_bytes] =
      co_await http::async_read_header(stream.stream, stream.buffer, parser, use_tuple);
  if (header_error) co_return unavailable("reading " + target + ": " + header_error.message());
  const unsigned status = parser.get().result_int();
  std::string line;
  // On the heap: a plain array in a coroutine's frame is not handled well by GCC 12.
  std::vector<char> chunk(16 << 10);
  std::string failure_body;
  if (status == 200) on_open();
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    lowest.expires_after(idle);
    // Some bytes at a time: a watch sends an event and then waits, its body never fills a buffer.
    auto [read_error, bytes] =
        co_await http::async_read_some(stream.stream, stream.buffer, parser, use_tuple);
    if (read_error && read_error != http::error::need_buffer) {
      if (read_error == beast::error::timeout)
        co_return unavailable(target + ": nothing for " + std::to_string(idle.count()) + " s");
      co_return unavailable("reading " + target + ": " + read_error.message());
    }
    const size_t got = chunk.size() - parser.get().body().size;
    if (status != 200) {
      if (failure_body.size() < (64 << 10)) failure_body.append(chunk.data(), got);
      continue;
    }
    for (size_t i = 0; i < got; ++i) {
      if (chunk[i] != '\n') {
        if (line.size() >= line_limit)
          co_return unavailable(target + ": an event past " + std::to_string(line_limit) + " bytes");
        line.push_back(chunk[i]);
        continue;
      }
      if (line.empty()) continue;
      boost::system::error_code ec;
      json::value event = json::parse(line, ec);
      line.clear();
      if (ec) co_return unavailable(target + ": an event that is not JSON");
      if (!on_event(std::move(event))) co_return KubeResult<void>{};
    }
  }
  if (status != 200) co_return api_status(status, failure_message(status, failure_body));
  co_return KubeResult<void>{};
}

}  // namespace sandboxd::kubernetes
