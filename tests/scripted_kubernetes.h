// A scripted Kubernetes API server for tests (the one stand-in besides the model): a
// real HTTPS server on loopback with a self-signed certificate (made with the openssl
// command) that checks a service-account bearer token and speaks the API's list and
// watch protocol for namespaces, pods, services and discovery.k8s.io/v1 endpoint
// slices: lists with metadata.resourceVersion (paged with limit/continue), watches
// from a resource version streaming one JSON event per line (ADDED, MODIFIED, DELETED,
// BOOKMARK when asked for with allowWatchBookmarks), and a watch from a version older
// than the compacted history answered with an ERROR event carrying a 410 Status, as the
// API server does. The test changes objects (each change is an event for the open
// watches), compacts the history, or stops the server (the API going away).
#pragma once

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/json.hpp>

#include <fcntl.h>

#include <array>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "eventually.h"
#include "server_harness.h"

namespace sandboxd::testing {

class ScriptedKubernetes {
  using tcp = boost::asio::ip::tcp;
  using Stream = boost::beast::ssl_stream<boost::beast::tcp_stream>;

 public:
  static constexpr const char* kToken = "scripted-service-account-token";

  ScriptedKubernetes() : tls_(boost::asio::ssl::context::tls_server) {
    std::string pattern = (std::filesystem::temp_directory_path() / "sandboxd-k8s-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    const std::string key = (dir_ / "key.pem").string();
    int status = 0;
    sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key + " -out " + ca_file() +
           " -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>&1",
       &status);
    if (status != 0) throw std::runtime_error("openssl could not make the API server's certificate");
    std::ofstream(token_file()) << kToken << "\n";
    tls_.use_certificate_chain_file(ca_file());
    tls_.use_private_key_file(key, boost::asio::ssl::context::pem);
    for (const char* resource : {"namespaces", "pods", "services", "endpointslices"}) resources_[resource];
    start();
  }
  ~ScriptedKubernetes() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  uint16_t port() const { return port_; }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  std::string ca_file() const { return (dir_ / "ca.crt").string(); }
  std::string token_file() const { return (dir_ / "token").string(); }

  // The YAML for sandboxd's `kubernetes:` section pointing at this server.
  std::string config_yaml(const std::string& own_namespace = "sandboxd") const {
    return "kubernetes:\n  apiServer: \"" + url() + "\"\n  caFile: \"" + ca_file() + "\"\n  tokenFile: \"" +
           token_file() + "\"\n  namespace: " + own_namespace + "\n";
  }

  // Adds or replaces an object (ADDED or MODIFIED to the open watches).
  void put(const std::string& resource, boost::json::object object) {
    run([&] { change(resource, std::move(object), false); });
  }
  void remove(const std::string& resource, const std::string& key) {
    run([&] {
      auto& r = resources_.at(resource);
      auto it = r.objects.find(key);
      if (it != r.objects.end()) change(resource, it->second, true);
    });
  }
  // Forgets the history: a watch from an older version gets 410 Gone and lists again.
  void compact() {
    run([&] { compacted_ = version_; });
  }
  // Forgets the history and ends every open watch: the clients watch again from a
  // version now too old, get 410 Gone, and must list again.
  void expire_watches() {
    run([&] {
      compacted_ = ++version_;
      for (auto& [name, r] : resources_) {
        for (auto& watch : r.watches) boost::beast::get_lowest_layer(*watch->stream).close();
        r.watches.clear();
      }
    });
  }
  // Sends a BOOKMARK with the current version to every open watch that asked for them.
  void bookmark() {
    run([&] {
      for (auto& [name, r] : resources_)
        for (auto& watch : r.watches)
          if (watch->bookmarks)
            send(*watch,
                 event("BOOKMARK",
                       boost::json::object{{"kind", kind_of(name)},
                                           {"apiVersion", api_version_of(name)},
                                           {"metadata", {{"resourceVersion", std::to_string(version_)}}}}));
    });
  }
  // The API going away: the listener and every connection closed.
  void stop() {
    if (!thread_.joinable()) return;
    run([this] {
      boost::system::error_code ignored;
      acceptor_->close(ignored);
      for (auto& [name, r] : resources_) r.watches.clear();
      for (auto& weak : connections_)
        if (auto stream = weak.lock()) boost::beast::get_lowest_layer(*stream).close();
      connections_.clear();
    });
    io_.stop();
    thread_.join();
    io_.restart();
  }
  // Serves again on the same port (after stop()).
  void start() {
    acceptor_ = std::make_unique<tcp::acceptor>(io_);
    tcp::endpoint at(boost::asio::ip::make_address("127.0.0.1"), port_);
    acceptor_->open(at.protocol());
    // Not inherited by the processes the test starts (sandboxd itself, a shell), which
    // would keep the port after stop().
    fcntl(acceptor_->native_handle(), F_SETFD, FD_CLOEXEC);
    acceptor_->set_option(tcp::acceptor::reuse_address(true));
    // Serving again on the same port: a connection the clients were making may hold it
    // for a moment.
    boost::system::error_code bound;
    eventually([&] {
      acceptor_->bind(at, bound);
      return !bound;
    });
    if (bound) throw boost::system::system_error(bound, "bind");
    acceptor_->listen();
    port_ = acceptor_->local_endpoint().port();
    boost::asio::co_spawn(io_, accept_loop(), boost::asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }

  int lists() const { return lists_.load(); }
  int watches_opened() const { return watches_opened_.load(); }
  int gone_answers() const { return gone_.load(); }
  int unauthorized() const { return unauthorized_.load(); }

 private:
  struct Watch {
    std::shared_ptr<Stream> stream;
    bool bookmarks = false;
    std::deque<std::string> pending;
    bool writing = false;
  };
  struct Resource {
    std::map<std::string, boost::json::object> objects;  // by namespace/name
    struct Event {
      uint64_t version;
      std::string line;
    };
    std::vector<Event> history;
    std::vector<std::shared_ptr<Watch>> watches;
  };

  static std::string kind_of(const std::string& resource) {
    if (resource == "namespaces") return "Namespace";
    if (resource == "pods") return "Pod";
    if (resource == "services") return "Service";
    return "EndpointSlice";
  }
  static std::string api_version_of(const std::string& resource) {
    return resource == "endpointslices" ? "discovery.k8s.io/v1" : "v1";
  }
  static std::string key_of(const boost::json::object& object) {
    const auto& metadata = object.at("metadata").as_object();
    std::string ns = metadata.contains("namespace") ? std::string(metadata.at("namespace").as_string()) : "";
    return ns + "/" + std::string(metadata.at("name").as_string());
  }
  static std::string event(const std::string& type, const boost::json::object& object) {
    return boost::json::serialize(boost::json::object{{"type", type}, {"object", object}}) + "\n";
  }

  // Runs `fn` on the server's thread and waits for it.
  template <typename F>
  void run(F fn) {
    std::promise<void> done;
    boost::asio::post(io_, [&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  }

  void change(const std::string& resource, boost::json::object object, bool deleted) {
    auto& r = resources_.at(resource);
    const std::string key = key_of(object);
    object["kind"] = kind_of(resource);
    object["apiVersion"] = api_version_of(resource);
    object["metadata"].as_object()["resourceVersion"] = std::to_string(++version_);
    const bool existed = r.objects.count(key) > 0;
    if (deleted)
      r.objects.erase(key);
    else
      r.objects[key] = object;
    std::string line = event(deleted ? "DELETED" : existed ? "MODIFIED" : "ADDED", object);
    r.history.push_back({version_, line});
    for (auto& watch : r.watches) send(*watch, line);
  }

  void send(Watch& watch, std::string line) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", line.size());
    watch.pending.push_back(size + line + "\r\n");
    if (watch.writing) return;
    // Find the shared_ptr of this watch to keep it alive while writing.
    for (auto& [name, r] : resources_)
      for (auto& w : r.watches)
        if (w.get() == &watch) boost::asio::co_spawn(io_, flush(w), boost::asio::detached);
  }

  boost::asio::awaitable<void> flush(std::shared_ptr<Watch> watch) {
    watch->writing = true;
    while (!watch->pending.empty()) {
      std::string data = std::move(watch->pending.front());
      watch->pending.pop_front();
      auto [ec, n] = co_await boost::asio::async_write(*watch->stream, boost::asio::buffer(data),
                                                       boost::asio::as_tuple(boost::asio::use_awaitable));
      if (ec) break;
    }
    watch->writing = false;
  }

  boost::asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_->async_accept(boost::asio::as_tuple(boost::asio::use_awaitable));
      if (ec) co_return;
      fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
      auto stream = std::make_shared<Stream>(std::move(socket), tls_);
      std::erase_if(connections_, [](const std::weak_ptr<Stream>& weak) { return weak.expired(); });
      connections_.push_back(stream);
      boost::asio::co_spawn(io_, serve(std::move(stream)), boost::asio::detached);
    }
  }

  static std::map<std::string, std::string> query_of(const std::string& target) {
    std::map<std::string, std::string> out;
    auto q = target.find('?');
    if (q == std::string::npos) return out;
    std::string rest = target.substr(q + 1);
    size_t at = 0;
    while (at <= rest.size()) {
      auto amp = rest.find('&', at);
      std::string pair = rest.substr(at, amp == std::string::npos ? std::string::npos : amp - at);
      auto eq = pair.find('=');
      if (eq != std::string::npos) out[pair.substr(0, eq)] = pair.substr(eq + 1);
      if (amp == std::string::npos) break;
      at = amp + 1;
    }
    return out;
  }

  boost::asio::awaitable<void> respond(std::shared_ptr<Stream> stream, boost::beast::http::status status,
                                       const boost::json::value& body) {
    boost::beast::http::response<boost::beast::http::string_body> res(status, 11);
    res.set(boost::beast::http::field::content_type, "application/json");
    res.set(boost::beast::http::field::connection, "close");
    res.body() = boost::json::serialize(body);
    res.prepare_payload();
    co_await boost::beast::http::async_write(*stream, res, boost::asio::as_tuple(boost::asio::use_awaitable));
    co_await stream->async_shutdown(boost::asio::as_tuple(boost::asio::use_awaitable));
  }

  // A list, paged: the continue token is the offset into the list.
  boost::json::value list_body(const std::string& resource, std::map<std::string, std::string>& query) {
    ++lists_;
    auto& r = resources_.at(resource);
    size_t limit = query.count("limit") ? std::stoul(query["limit"]) : 0;
    size_t offset = query.count("continue") ? std::stoul(query["continue"]) : 0;
    boost::json::array items;
    size_t i = 0;
    for (const auto& [key, object] : r.objects) {
      if (i++ < offset) continue;
      if (limit && items.size() == limit) break;
      boost::json::object item = object;
      item.erase("kind");  // a list's items do not repeat kind and apiVersion
      item.erase("apiVersion");
      items.push_back(std::move(item));
    }
    boost::json::object metadata{{"resourceVersion", std::to_string(version_)}};
    if (limit && offset + items.size() < r.objects.size())
      metadata["continue"] = std::to_string(offset + items.size());
    return boost::json::object{{"kind", kind_of(resource) + "List"},
                               {"apiVersion", api_version_of(resource)},
                               {"metadata", std::move(metadata)},
                               {"items", std::move(items)}};
  }

  std::string gone_event(uint64_t from) const {
    return event("ERROR", status_object(410, "Expired",
                                        "too old resource version: " + std::to_string(from) + " (" +
                                            std::to_string(compacted_) + ")"));
  }

  static std::string chunked_header() {
    return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  }

  static boost::json::object status_object(int code, const std::string& reason, const std::string& message) {
    return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", boost::json::object{}},
            {"status", "Failure"}, {"message", message}, {"reason", reason},
            {"code", code}};
  }

  boost::asio::awaitable<void> serve(std::shared_ptr<Stream> stream) {
    namespace http = boost::beast::http;
    constexpr auto tuple = boost::asio::as_tuple(boost::asio::use_awaitable);
    auto [hs] = co_await stream->async_handshake(boost::asio::ssl::stream_base::server, tuple);
    if (hs) co_return;
    boost::beast::flat_buffer buffer;
    http::request<http::empty_body> req;
    auto [rd, n] = co_await http::async_read(*stream, buffer, req, tuple);
    if (rd) co_return;
    if (req[http::field::authorization] != std::string("Bearer ") + kToken) {
      ++unauthorized_;
      // (Bodies are made outside the coroutine's own expressions: GCC 12 mishandles
      // Boost.JSON's initializer lists of string literals inside a coroutine.)
      const boost::json::value body = status_object(401, "Unauthorized", "Unauthorized");
      co_await respond(stream, http::status::unauthorized, body);
      co_return;
    }
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));
    std::string resource;
    if (path == "/api/v1/namespaces")
      resource = "namespaces";
    else if (path == "/api/v1/pods")
      resource = "pods";
    else if (path == "/api/v1/services")
      resource = "services";
    else if (path == "/apis/discovery.k8s.io/v1/endpointslices")
      resource = "endpointslices";
    if (resource.empty() || req.method() != http::verb::get) {
      const boost::json::value body =
          status_object(404, "NotFound", "the server could not find the requested resource");
      co_await respond(stream, http::status::not_found, body);
      co_return;
    }
    auto query = query_of(target);
    auto& r = resources_.at(resource);
    if (query["watch"] != "true" && query["watch"] != "1") {
      const boost::json::value body = list_body(resource, query);
      co_await respond(stream, http::status::ok, body);
      co_return;
    }
    ++watches_opened_;
    const uint64_t from = query.count("resourceVersion") && !query["resourceVersion"].empty()
                              ? std::stoull(query["resourceVersion"])
                              : version_;
    const std::string head = chunked_header();
    auto [wh, wn] = co_await boost::asio::async_write(*stream, boost::asio::buffer(head), tuple);
    if (wh) co_return;
    auto watch = std::make_shared<Watch>();
    watch->stream = stream;
    watch->bookmarks = query["allowWatchBookmarks"] == "true";
    r.watches.push_back(watch);
    if (from < compacted_) {
      ++gone_;
      send(*watch, gone_event(from));
      send(*watch, "");  // the last chunk: the watch ends
    } else {
      for (const auto& e : r.history)
        if (e.version > from) send(*watch, e.line);
    }
    // Until the client goes away: read (nothing comes) to notice it.
    auto byte = std::make_unique<std::array<char, 1>>();
    co_await stream->async_read_some(boost::asio::buffer(*byte), tuple);
    std::erase(r.watches, watch);
  }

  std::filesystem::path dir_;
  boost::asio::io_context io_;
  boost::asio::ssl::context tls_;
  std::unique_ptr<tcp::acceptor> acceptor_;
  std::thread thread_;
  uint16_t port_ = 0;
  std::map<std::string, Resource> resources_;       // on the server's thread
  std::vector<std::weak_ptr<Stream>> connections_;  // every open one, closed by stop()
  uint64_t version_ = 100, compacted_ = 0;
  std::atomic<int> lists_{0}, watches_opened_{0}, gone_{0}, unauthorized_{0};
};

}  // namespace sandboxd::testing
