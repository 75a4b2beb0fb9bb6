// A small blocking keep-alive HTTP/1.1 client (Boost.Beast) for tests and benchmarks:
// one connection, reopened once when the server closed an idle one.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <ostream>  // boost/core/detail/string_view.hpp in 1.81 needs it first
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sandboxd::testing {

class HttpClient {
 public:
  struct Reply {
    unsigned status = 0;
    std::string body;
    std::string retry_after;                                   // the Retry-After header, if any
    std::vector<std::pair<std::string, std::string>> headers;  // every response header
    std::string header(std::string_view name) const {
      for (const auto& [key, value] : headers)
        if (boost::beast::iequals(key, name)) return value;
      return {};
    }
  };
  using Headers = std::vector<std::pair<std::string, std::string>>;

  HttpClient(int port, std::string token) : port_(port), token_(std::move(token)), socket_(io_) { connect(); }

  Reply post(const std::string& target, const std::string& body,
             const char* content_type = "application/json", const Headers& headers = {}) {
    return send(boost::beast::http::verb::post, target, body, content_type, headers);
  }
  Reply put(const std::string& target, const std::string& body) {
    return send(boost::beast::http::verb::put, target, body, "application/octet-stream");
  }
  Reply get(const std::string& target) { return send(boost::beast::http::verb::get, target, "", nullptr); }

 private:
  void connect() {
    socket_ = boost::asio::ip::tcp::socket(io_);
    buffer_.clear();
    socket_.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)});
    socket_.set_option(boost::asio::ip::tcp::no_delay(true));
  }
  Reply send(boost::beast::http::verb verb, const std::string& target, const std::string& body,
             const char* content_type, const Headers& headers = {}) {
    namespace http = boost::beast::http;
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::authorization, "Bearer " + token_);
    if (content_type) req.set(http::field::content_type, content_type);
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = body;
    req.prepare_payload();
    for (int attempt = 0;; ++attempt) {
      try {
        http::write(socket_, req);
        http::response<http::string_body> res;
        http::read(socket_, buffer_, res);
        Reply reply{res.result_int(), std::move(res.body()), {}};
        if (auto it = res.find(http::field::retry_after); it != res.end())
          reply.retry_after = std::string(it->value());
        for (const auto& field : res)
          reply.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
        if (!res.keep_alive()) connect();
        return reply;
      } catch (const std::exception&) {
        if (attempt > 0) throw;
        connect();
      }
    }
  }

  int port_;
  std::string token_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
};

}  // namespace sandboxd::testing
