// Attacks at the HTTP/JSON level, each from the attacker's side (code in a sandbox
// naming files, or a client with an owner's token), each showing that it is contained
// and that another owner's work goes on: response header injection, invalid UTF-8 in
// JSON, slow request bodies and connection floods, active content, a NUL in a command,
// Range overflows. Plus the transport's last line of defence against a handler that
// puts a control byte in a header, driven in-process.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <thread>

#include "eventually.h"
#include "loopback.h"
#include "server/auth.h"
#include "server/http_server.h"
#include "server_harness.h"
#include "shared_server_suite.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

// A connected loopback socket (blocking), or -1.
int connect_to(int port) { return connect_loopback(port); }

// Everything the server sends until it closes the connection (or 30 s of silence).
std::string read_until_closed(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 30000) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Sends raw bytes on a new connection; returns all the server answered.
std::string raw_exchange(int port, const std::string& request) {
  int fd = connect_to(port);
  if (fd < 0) return "";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string reply = read_until_closed(fd);
  ::close(fd);
  return reply;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

// The header block of the first response in `raw` (up to the blank line).
std::string head_of(const std::string& raw) { return raw.substr(0, raw.find("\r\n\r\n") + 2); }

class HardeningTest : public SharedServerSuite {
 protected:
  static void SetUpTestSuite() {
    start_server(
        "server:\n  bodyMinRateBytesPerSec: 2000\n  bodyRateGraceSec: 2\n  bodyIdleTimeoutSec: 30\n"
        "  maxConnectionsPerOwner: 40\n  maxConnections: 1000\n");
  }
  void SetUp() override { name_container("h"); }
  bj::object bash(const std::string& command, const std::string& owner_token = "secret-alice",
                  const std::string& in_container = "") {
    std::ofstream(*work / "body.json") << bj::serialize(bj::object{{"command", command}});
    return server
        ->curl_json("-X POST " + server->base() + "/containers/" +
                        (in_container.empty() ? container : in_container) +
                        "/tools/bash_code_execution -d @" + (*work / "body.json").string(),
                    owner_token)
        .as_object();
  }
  std::string files(const std::string& path, const std::string& query = "") const {
    return "'" + server->base() + "/files" + path + "?scope_id=" + container + query + "'";
  }
  // A request line and headers for alice, on the raw wire.
  std::string raw_request(const std::string& method, const std::string& target,
                          const std::string& extra = "") const {
    return method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer secret-alice\r\n" +
           extra;
  }
  // Bob, another owner, gets on with his work: a command and a file round trip.
  void expect_bob_works() {
    auto r = bash("echo bob-ok > /mnt/user-data/outputs/b.txt && cat /mnt/user-data/outputs/b.txt",
                  "secret-bob-x", "bob-box");
    EXPECT_EQ(r.at("stdout"), "bob-ok\n") << bj::serialize(r);
    std::string id = file_id("/mnt/user-data/outputs/b.txt");
    EXPECT_EQ(
        server->curl("'" + server->base() + "/files/" + id + "/content?scope_id=bob-box'", "secret-bob-x"),
        "bob-ok\n");
  }
};

// --- 1. response header injection --------------------------------------------------

TEST_F(HardeningTest, FileNamesWithControlBytesNeverBreakHeaders) {
  // Code in the sandbox names files to smuggle headers, end the header block early or
  // smuggle a whole response (no '/' in a name: "HTTP-1.1"), with CRLF, bare CR, bare
  // LF, other controls.
  const std::vector<std::string> names = {"a\r\nSet-Cookie: x=1", "b\rSet-Cookie: y=2", "c\nSet-Cookie: z=3",
                                          "d\r\n\r\nHTTP-1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
                                          "e\x01\x1f\x7f.txt"};
  std::string script = "cd /mnt/user-data/outputs";
  for (size_t i = 0; i < names.size(); ++i) {
    std::string escaped;
    for (unsigned char c : names[i]) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\%03o", c);
      escaped += buf;
    }
    // (The x keeps command substitution from eating trailing newlines.)
    script += " && n=\"$(printf '" + escaped + "x')\" && printf 'x' > \"${n%x}\"";
  }
  auto made = bash(script + " && find . -maxdepth 1 -type f -printf x | wc -c");
  ASSERT_EQ(std::string(made.at("stdout").as_string()), std::to_string(names.size()) + "\n")
      << bj::serialize(made);

  for (const auto& name : names) {
    const std::string path = "/mnt/user-data/outputs/" + name;
    const std::string b64 = file_id(path);
    const std::string target = "/api/gpt/v1/files/" + b64 + "?scope_id=" + container;
    // HEAD then a pipelined GET /health on one keep-alive connection: exactly two
    // responses come back, and no header line the file name made.
    std::string raw =
        raw_exchange(server->port(), raw_request("HEAD", target, "\r\n") +
                                         "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(raw.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << raw;
    EXPECT_EQ(count(raw, "HTTP/1.1 "), 2u) << raw;
    // (The name's text is in the encoded value; it never starts a line.)
    EXPECT_EQ(count(raw, "\nSet-Cookie") + count(raw, "\rSet-Cookie"), 0u) << raw;
    EXPECT_EQ(count(raw, "\r\nX-File-Filename: "), 1u) << raw;
    EXPECT_EQ(count(raw, "\nHTTP-1.1") + count(raw, "\rHTTP-1.1"), 0u) << raw;
    EXPECT_EQ(count(raw, "\r\nContent-Length: "), 2u) << raw;
    // Every header line of the HEAD answer is printable ASCII.
    std::string head = head_of(raw);
    for (unsigned char c : head) EXPECT_TRUE(c == '\r' || c == '\n' || (c >= 0x20 && c < 0x7f)) << head;
    EXPECT_NE(head.find("X-File-Filename: " + name.substr(0, 1) + "%"), std::string::npos) << head;
    // The download: Content-Disposition encoded, the body exact.
    std::string get = raw_exchange(
        server->port(), raw_request("GET", "/api/gpt/v1/files/" + b64 + "/content?scope_id=" + container,
                                    "Connection: close\r\n\r\n"));
    EXPECT_EQ(get.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << get;
    EXPECT_EQ(count(get, "\nSet-Cookie") + count(get, "\rSet-Cookie"), 0u) << get;
    EXPECT_NE(get.find("filename*=UTF-8''" + name.substr(0, 1) + "%"), std::string::npos) << get;
    EXPECT_EQ(get.substr(get.find("\r\n\r\n") + 4), "x");
  }
  expect_bob_works();
}

// A handler that forgets to encode (any future one) cannot smuggle: the transport
// refuses to send a header value with CR, LF, NUL or another control byte.
TEST(HardeningTransport, AHeaderWithAControlByteIsNeverSent) {
  namespace server = sandboxd::server;
  boost::asio::io_context io;
  server::HttpServer http(io, server::ServerLimits{});
  const std::vector<std::string> values = {"a\r\nSet-Cookie: x=1", "b\rc", "d\ne", std::string("f\0g", 3),
                                           "h\x01i"};
  http.route(server::http::verb::get, "/bad/{n}", "bad",
             [&](server::RequestContext& ctx) -> boost::asio::awaitable<sandboxd::Result<server::Response>> {
               server::StringResponse res{server::http::status::ok, 11};
               res.set("X-Name", values.at(std::stoul(ctx.params["n"])));
               res.body() = "should not be sent";
               co_return server::Response(std::move(res));
             },
             {.authenticated = false});
  http.route(server::http::verb::get, "/good", "good",
             [](server::RequestContext&) -> boost::asio::awaitable<sandboxd::Result<server::Response>> {
               co_return server::Response(server::json_response(server::http::status::ok, "{\"ok\":true}"));
             },
             {.authenticated = false});
  auto endpoint = http.listen("127.0.0.1", 0);
  std::thread runner([&] { io.run(); });
  for (size_t n = 0; n < values.size(); ++n) {
    // The refused response, then the next request on the same connection still works.
    std::string raw =
        raw_exchange(endpoint.port(), "GET /bad/" + std::to_string(n) +
                                          " HTTP/1.1\r\nHost: x\r\n\r\nGET /good HTTP/1.1\r\nHost: x\r\n"
                                          "Connection: close\r\n\r\n");
    EXPECT_EQ(raw.rfind("HTTP/1.1 500 ", 0), 0u) << raw;
    EXPECT_EQ(raw.find("X-Name"), std::string::npos) << raw;
    EXPECT_EQ(raw.find("Set-Cookie"), std::string::npos) << raw;
    EXPECT_EQ(raw.find("should not be sent"), std::string::npos) << raw;
    EXPECT_NE(raw.find("\"type\":\"api_error\""), std::string::npos) << raw;
    EXPECT_NE(raw.find("{\"ok\":true}"), std::string::npos) << raw;
  }
  http.stop_accepting();
  io.stop();
  runner.join();
}

// The transport writes a string answer's header itself: its own fields once (a
// handler's request-id or nosniff replaced, as set() would), Content-Length right for
// GET and HEAD, "Connection: close" when the connection ends, and answers whose framing
// the handler chose (a 204, its own Content-Length) left as the handler made them.
TEST(HardeningTransport, AStringAnswerIsFramedOnceWithTheTransportsOwnFields) {
  namespace server = sandboxd::server;
  boost::asio::io_context io;
  server::HttpServer http(io, server::ServerLimits{});
  http.route(server::http::verb::get, "/json", "json",
             [](server::RequestContext&) -> boost::asio::awaitable<sandboxd::Result<server::Response>> {
               auto res = server::json_response(server::http::status::ok, "{\"ok\":true}");
               res.set("request-id", "spoofed");
               res.set("X-Content-Type-Options", "spoofed");
               res.set("X-Own", "kept");
               co_return server::Response(std::move(res));
             },
             {.authenticated = false});
  http.route(server::http::verb::get, "/empty", "empty",
             [](server::RequestContext&) -> boost::asio::awaitable<sandboxd::Result<server::Response>> {
               co_return server::Response(server::StringResponse{server::http::status::no_content, 11});
             },
             {.authenticated = false});
  http.route(server::http::verb::get, "/sized", "sized",
             [](server::RequestContext&) -> boost::asio::awaitable<sandboxd::Result<server::Response>> {
               server::StringResponse res{server::http::status::ok, 11};
               res.body() = "abc";
               res.content_length(3);
               co_return server::Response(std::move(res));
             },
             {.authenticated = false});
  auto endpoint = http.listen("127.0.0.1", 0);
  std::thread runner([&] { io.run(); });
  // GET, HEAD, the 204 and the handler's own length, pipelined on one connection.
  std::string raw = raw_exchange(endpoint.port(),
                                 "GET /json HTTP/1.1\r\nHost: x\r\n\r\nHEAD /json HTTP/1.1\r\nHost: x\r\n\r\n"
                                 "GET /empty HTTP/1.1\r\nHost: x\r\n\r\n"
                                 "GET /sized HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(count(raw, "HTTP/1.1 200 OK\r\n"), 3u) << raw;
  EXPECT_EQ(count(raw, "HTTP/1.1 204 No Content\r\n"), 1u) << raw;
  EXPECT_EQ(count(raw, "spoofed"), 0u) << raw;
  EXPECT_EQ(count(raw, "\r\nrequest-id: req_"), 4u) << raw;
  EXPECT_EQ(count(raw, "\r\nX-Content-Type-Options: nosniff\r\n"), 4u) << raw;
  EXPECT_EQ(count(raw, "\r\nX-Own: kept\r\n"), 2u) << raw;
  // The GET's body and the HEAD's header announce the same 11 bytes; only the GET sends them.
  EXPECT_EQ(count(raw, "\r\nContent-Length: 11\r\n"), 2u) << raw;
  EXPECT_EQ(count(raw, "{\"ok\":true}"), 1u) << raw;
  EXPECT_EQ(count(raw, "\r\nContent-Length: 3\r\n"), 1u) << raw;
  // The 204 (Beast's framing, as before) has no body: the next answer follows its header.
  EXPECT_NE(raw.find("\r\n\r\nHTTP/1.1 200 OK\r\n", raw.find("204 No Content")), std::string::npos) << raw;
  EXPECT_EQ(count(raw, "\r\nConnection: close\r\n"), 1u) << raw;
  EXPECT_EQ(raw.substr(raw.size() - 7), "\r\n\r\nabc") << raw;
  http.stop_accepting();
  io.stop();
  runner.join();
}

// What a route declares beyond its pattern (server::RouteOptions), and the credential
// headers a surface adds: another API's error shape answers every error of its route
// (authentication's included) and, for a path under its prefix that no route matches, the
// prefix's; a route's own credential is asked first and declines a request that carries
// none of it; a token comes in x-api-key, an added header or a bearer Authorization, and
// in no other header.
TEST(HardeningTransport, RouteOptionsShapeErrorsAndAcceptTheirOwnCredential) {
  namespace server = sandboxd::server;
  using sandboxd::ApiError;
  using sandboxd::Result;
  boost::asio::io_context io;
  server::HttpServer http(io, server::ServerLimits{});
  http.accept_credential_header("x-other-token");
  http.set_authenticator([](server::RequestContext& ctx) -> Result<void> {
    if (server::presented_token(ctx) != "t1") return ApiError::authentication("no token");
    ctx.owner = "token-owner";
    return {};
  });
  // The other API's shape: a 418 whose body names the message.
  auto other_shape = [](const ApiError& error) -> server::Response {
    return server::Response(server::json_response(static_cast<server::http::status>(418),
                                                  "{\"shaped\":\"" + error.message + "\"}"));
  };
  // The prefix's own shape, told apart from the route's by its body.
  http.shape_errors("/other", [](const ApiError& error) -> server::Response {
    return server::Response(server::json_response(static_cast<server::http::status>(418),
                                                  "{\"prefix\":\"" + error.message + "\"}"));
  });
  auto echo_owner = [](server::RequestContext& ctx) -> boost::asio::awaitable<Result<server::Response>> {
    if (ctx.query_value("fail")) co_return ApiError::not_found("handler said no");
    co_return server::Response(
        server::json_response(server::http::status::ok, "{\"owner\":\"" + ctx.owner + "\"}"));
  };
  server::RouteOptions signed_route{.error_shape = other_shape};
  signed_route.credential = [](server::RequestContext& ctx) -> std::optional<Result<void>> {
    const auto sig = ctx.query_value("sig");
    if (!sig) return std::nullopt;
    if (*sig != "good") return Result<void>(ApiError::authentication("bad signature"));
    ctx.owner = "signer";
    return Result<void>();
  };
  http.route(server::http::verb::get, "/other/signed", "other.signed", echo_owner, signed_route);
  http.route(server::http::verb::get, "/plain", "plain", echo_owner);
  auto endpoint = http.listen("127.0.0.1", 0);
  std::thread runner([&] { io.run(); });
  auto get = [&](const std::string& target, const std::string& fields = "") {
    return raw_exchange(endpoint.port(),
                        "GET " + target + " HTTP/1.1\r\nHost: x\r\n" + fields + "Connection: close\r\n\r\n");
  };
  // The route's shape for authentication, the credential's refusal and the handler's error.
  std::string raw = get("/other/signed");
  EXPECT_EQ(raw.rfind("HTTP/1.1 418 ", 0), 0u) << raw;
  EXPECT_NE(raw.find("{\"shaped\":\"no token\"}"), std::string::npos) << raw;
  raw = get("/other/signed?sig=bad", "x-api-key: t1\r\n");
  EXPECT_NE(raw.find("{\"shaped\":\"bad signature\"}"), std::string::npos) << raw;
  raw = get("/other/signed?fail=1", "x-api-key: t1\r\n");
  EXPECT_NE(raw.find("{\"shaped\":\"handler said no\"}"), std::string::npos) << raw;
  // The route's credential names the owner; without one the server's authenticator does.
  raw = get("/other/signed?sig=good");
  EXPECT_NE(raw.find("{\"owner\":\"signer\"}"), std::string::npos) << raw;
  raw = get("/other/signed", "x-other-token: t1\r\n");
  EXPECT_NE(raw.find("{\"owner\":\"token-owner\"}"), std::string::npos) << raw;
  // No route under the prefix: the prefix's shape; outside it, sandboxd's own.
  raw = get("/other/missing");
  EXPECT_EQ(raw.rfind("HTTP/1.1 418 ", 0), 0u) << raw;
  EXPECT_NE(raw.find("{\"prefix\":\"No route for GET /other/missing\"}"), std::string::npos) << raw;
  raw = get("/plain?fail=1", "x-api-key: t1\r\n");
  EXPECT_EQ(raw.rfind("HTTP/1.1 404 ", 0), 0u) << raw;
  EXPECT_NE(raw.find("\"type\":\"not_found_error\""), std::string::npos) << raw;
  // The added header and a bearer carry a token on every route; an unknown header does not.
  raw = get("/plain", "x-other-token: t1\r\n");
  EXPECT_NE(raw.find("{\"owner\":\"token-owner\"}"), std::string::npos) << raw;
  raw = get("/plain", "Authorization: Bearer t1\r\n");
  EXPECT_NE(raw.find("{\"owner\":\"token-owner\"}"), std::string::npos) << raw;
  raw = get("/plain", "x-access-token: t1\r\n");
  EXPECT_EQ(raw.rfind("HTTP/1.1 401 ", 0), 0u) << raw;
  // The sig query is not a credential where the route declares none.
  raw = get("/plain?sig=good");
  EXPECT_EQ(raw.rfind("HTTP/1.1 401 ", 0), 0u) << raw;
  http.stop_accepting();
  io.stop();
  runner.join();
}

// --- 2. invalid UTF-8 never reaches JSON ---------------------------------------------

TEST_F(HardeningTest, NonUtf8FileNamesListAsReplacementAndIdsStayExact) {
  auto made = bash(
      "cd /mnt/user-data/outputs && printf 'raw' > \"$(printf 'n\\377\\376.txt')\" && "
      "printf 'ok' > fine.txt && ls | wc -l");
  ASSERT_EQ(made.at("stdout"), "2\n") << bj::serialize(made);
  // A multipart upload whose filename is not UTF-8 either (sent raw on the wire).
  std::string body =
      "--XB\r\nContent-Disposition: form-data; name=\"file\"; "
      "filename=\"u\xff\xfe.bin\"\r\n\r\nuploaded\r\n--XB--\r\n";
  std::string up =
      raw_exchange(server->port(), raw_request("POST", "/api/gpt/v1/files?scope_id=" + container,
                                               "Content-Type: multipart/form-data; boundary=XB\r\n"
                                               "Connection: close\r\nContent-Length: " +
                                                   std::to_string(body.size()) + "\r\n\r\n" + body));
  ASSERT_EQ(up.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << up;
  auto uploaded = json(up.substr(up.find("\r\n\r\n") + 4));  // Boost.JSON refuses invalid UTF-8
  EXPECT_EQ(uploaded.at("filename"), "u\xEF\xBF\xBD\xEF\xBF\xBD.bin");
  EXPECT_EQ(std::string(uploaded.at("id").as_string()), file_id("/mnt/user-data/uploads/u\xff\xfe.bin"));

  // The listing parses strictly; names show U+FFFD, ids carry the exact bytes.
  std::string listing = server->curl(files(""));
  auto listed = json(listing);
  std::map<std::string, std::string> by_name;
  for (const auto& f : listed.at("data").as_array())
    by_name[std::string(f.at("filename").as_string())] = std::string(f.at("id").as_string());
  ASSERT_EQ(by_name.count("n\xEF\xBF\xBD\xEF\xBF\xBD.txt"), 1u) << listing;
  const std::string id = by_name["n\xEF\xBF\xBD\xEF\xBF\xBD.txt"];
  EXPECT_EQ(id, file_id("/mnt/user-data/outputs/n\xff\xfe.txt"));
  // Metadata, download and delete by that id reach the file with the exact name.
  auto meta = server->curl_json(files("/" + id));
  EXPECT_EQ(meta.at("filename"), "n\xEF\xBF\xBD\xEF\xBF\xBD.txt");
  EXPECT_EQ(server->curl(files("/" + id + "/content")), "raw");
  // An error message naming the missing file is valid JSON too.
  std::string other = file_id("/mnt/user-data/outputs/m\xff.txt");
  EXPECT_NO_THROW(json(server->curl(files("/" + other))));
  EXPECT_EQ(server->status("-X DELETE " + files("/" + id)), 200);
  EXPECT_EQ(bash("ls /mnt/user-data/outputs").at("stdout"), "fine.txt\n");
  EXPECT_EQ(bash("cat \"/mnt/user-data/uploads/$(printf 'u\\377\\376.bin')\"").at("stdout"), "uploaded");
  // An id that percent-decodes to bytes that are not UTF-8: the error that names it is
  // valid JSON, and the audit log (JSON lines) still parses line by line.
  std::string odd = raw_exchange(
      server->port(),
      raw_request("GET", "/api/gpt/v1/files/%FF%FE?scope_id=" + container, "Connection: close\r\n\r\n"));
  EXPECT_EQ(odd.rfind("HTTP/1.1 400 ", 0), 0u) << odd;
  EXPECT_NO_THROW(json(odd.substr(odd.find("\r\n\r\n") + 4)));
  EXPECT_NE(odd.find("Invalid file id"), std::string::npos) << odd;
  std::istringstream audit(read_file(server->data_dir() / "audit.log"));
  size_t lines = 0;
  for (std::string line; std::getline(audit, line); ++lines) EXPECT_NO_THROW(json(line)) << line;
  EXPECT_GT(lines, 0u);
  expect_bob_works();
}

// --- 3. slow bodies and connection caps ---------------------------------------------

TEST_F(HardeningTest, SlowBodiesAreCutOffAndHealthKeepsAnswering) {
  // Alice opens 200 uploads that each promise 1 MB and trickle a byte a second. Her
  // connections past her cap (40) are refused at once with 429; the rest are cut off
  // when they fall below the minimum rate. /health and Bob are served throughout.
  constexpr int kConnections = 200;
  std::vector<int> fds;
  const std::string header = raw_request("PUT", "/api/gpt/v1/files/slow.bin?scope_id=" + container,
                                         "Content-Length: 1000000\r\n\r\n");
  for (int i = 0; i < kConnections; ++i) {
    int fd = connect_to(server->port());
    ASSERT_GE(fd, 0);
    ::send(fd, header.data(), header.size(), MSG_NOSIGNAL);
    fds.push_back(fd);
  }
  std::vector<std::string> replies(kConnections);
  std::vector<bool> closed(kConnections, false);
  int open = kConnections, health_ok = 0, rounds = 0;
  // Trickle until the server has closed every one (bounded: 90 rounds of ~1 s).
  while (open > 0 && rounds++ < 90) {
    for (int i = 0; i < kConnections; ++i) {
      if (closed[i]) continue;
      ::send(fds[i], "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      char buf[4096];
      ssize_t n;
      while ((n = ::recv(fds[i], buf, sizeof buf, MSG_DONTWAIT)) > 0)
        replies[i].append(buf, static_cast<size_t>(n));
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        closed[i] = true;
        --open;
      }
    }
    if (rounds <= 3) {
      // While they are held: /health answers, Bob works.
      if (server->status("--max-time 10 " + server->url("/health")) == 200) ++health_ok;
      if (rounds == 1) expect_bob_works();
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  EXPECT_EQ(open, 0) << "the server cut off every trickling body";
  EXPECT_EQ(health_ok, 3);
  int refused = 0;
  for (const auto& reply : replies)
    if (reply.rfind("HTTP/1.1 429 ", 0) == 0 &&
        reply.find("Too many open connections for this owner") != std::string::npos)
      ++refused;
  EXPECT_GE(refused, kConnections - 40) << "past the owner's cap, connections are refused";
  for (int fd : fds) ::close(fd);
  // The slow upload never landed; Alice can upload normally again.
  EXPECT_EQ(server->status("-X PUT " + files("/slow.bin") + " -d done"), 200);
  expect_bob_works();
}

TEST(HardeningConnections, PastTheTotalCapConnectionsGetA503AndTheServerRecovers) {
  ServerProcess server("server:\n  maxConnections: 20\n");
  std::vector<int> idle;
  for (int i = 0; i < 20; ++i) idle.push_back(connect_to(server.port()));
  // Make sure the server has taken all twenty (each answered one request and stays open).
  for (int fd : idle) {
    std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 10000), 1);
    ASSERT_GT(::recv(fd, buf, sizeof buf, 0), 0);
  }
  std::string refused = raw_exchange(server.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(refused.rfind("HTTP/1.1 503 ", 0), 0u) << refused;
  EXPECT_NE(refused.find("Too many open connections"), std::string::npos) << refused;
  for (int fd : idle) ::close(fd);
  // The closed ones leave the count: the server answers again.
  int status = 0;
  for (int i = 0; i < 50 && status != 200; ++i) {
    status = server.status(server.url("/health"));
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(status, 200);
}

TEST(HardeningConnections, OutOfDescriptorsWaitingClientsAreClosedAndTheServerRecovers) {
  ServerProcess server("server:\n  maxConnections: 100000\n");
  // The server may hold only a few more descriptors than it has open once it has settled
  // (its start fills the pre-started pool, with descriptors of its own for a while).
  auto open_descriptors = [&] {
    size_t n = 0;
    for ([[maybe_unused]] const auto& entry :
         fs::directory_iterator("/proc/" + std::to_string(server.pid()) + "/fd"))
      ++n;
    return n;
  };
  size_t open_now = open_descriptors();
  int steady = 0;
  ASSERT_TRUE(eventually([&] {
    const size_t n = open_descriptors();
    steady = n == open_now ? steady + 1 : 0;
    open_now = n;
    return steady >= 10;  // the same count for half a second
  }));
  const size_t limit = open_now + 10;
  int rc = 0;
  sh("prlimit --pid " + std::to_string(server.pid()) + " --nofile=" + std::to_string(limit) + ":" +
         std::to_string(limit) + " 2>&1",
     &rc);
  ASSERT_EQ(rc, 0);
  // 40 keep-alive clients: those the server can take are answered (and stay open);
  // the rest are taken off the queue and closed, never left hanging.
  std::vector<int> fds;
  for (int i = 0; i < 40; ++i) {
    int fd = connect_to(server.port());
    ASSERT_GE(fd, 0);
    std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    fds.push_back(fd);
  }
  int answered = 0, closed = 0, hanging = 0;
  for (int fd : fds) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20000) != 1) {
      ++hanging;
      continue;
    }
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0 && std::string_view(buf, static_cast<size_t>(n)).substr(0, 12) == "HTTP/1.1 200")
      ++answered;
    else if (n <= 0)
      ++closed;
  }
  EXPECT_EQ(hanging, 0);
  EXPECT_GT(answered, 0);
  EXPECT_GT(closed, 0) << "some clients met a server out of descriptors";
  EXPECT_EQ(answered + closed, 40);
  EXPECT_NE(server.log().find("accept: Too many open files"), std::string::npos);
  for (int fd : fds) ::close(fd);
  // Descriptors free again: the server answers as before.
  int status = 0;
  for (int i = 0; i < 50 && status != 200; ++i) {
    status = server.status(server.url("/health"));
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(status, 200);
}

// --- 4. active content ------------------------------------------------------------

TEST_F(HardeningTest, ActiveContentIsSandboxedAndNeverSniffed) {
  bash(
      "cd /mnt/user-data/outputs && printf '<html><script>alert(document.cookie)</script></html>' > x.html "
      "&& "
      "printf '<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(1)</script></svg>' > x.svg");
  for (const char* name : {"x.html", "x.svg"}) {
    std::string id = file_id(std::string("/mnt/user-data/outputs/") + name);
    std::string headers =
        server->curl("-D - -o /dev/null " + files("/" + id + "/content", "&disposition=inline"));
    EXPECT_NE(headers.find("Content-Security-Policy: sandbox\r\n"), std::string::npos) << headers;
    EXPECT_NE(headers.find("X-Content-Type-Options: nosniff\r\n"), std::string::npos) << headers;
    EXPECT_NE(headers.find("Content-Disposition: inline;"), std::string::npos) << headers;
  }
  // Every other answer is nosniff too (JSON, errors).
  std::string json_headers = server->curl("-D - -o /dev/null " + files(""));
  EXPECT_NE(json_headers.find("X-Content-Type-Options: nosniff\r\n"), std::string::npos) << json_headers;
  std::string error_headers = server->curl("-D - -o /dev/null " + server->url("/nowhere"));
  EXPECT_NE(error_headers.find("X-Content-Type-Options: nosniff\r\n"), std::string::npos) << error_headers;
}

// --- 5. NUL in a command --------------------------------------------------------------

TEST_F(HardeningTest, ACommandWithNulIsInvalidInputAndTheSandboxKeepsRunning) {
  EXPECT_EQ(bash("echo kept > /tmp/marker; sleep 300 >/dev/null 2>&1 & echo started").at("stdout"),
            "started\n");
  auto refused = bash(std::string("echo a\0b", 8));
  EXPECT_EQ(refused.at("type"), "bash_code_execution_tool_result_error") << bj::serialize(refused);
  EXPECT_EQ(refused.at("error_code"), "invalid_tool_input") << bj::serialize(refused);
  EXPECT_NE(bj::serialize(refused).find("NUL"), std::string::npos) << bj::serialize(refused);
  // The same sandbox: its /tmp and its background process are still there.
  EXPECT_EQ(bash("cat /tmp/marker; pgrep -c sleep").at("stdout"), "kept\n1\n");
  expect_bob_works();
}

// --- 6. Range overflows ---------------------------------------------------------------

TEST_F(HardeningTest, RangeOverflowsClampOrAreUnsatisfiable) {
  bash("printf 0123456789 > /mnt/user-data/outputs/r.txt");
  std::string url = files("/" + file_id("/mnt/user-data/outputs/r.txt") + "/content");
  for (const char* range : {"bytes=0-18446744073709551615", "bytes=0-18446744073709551616",
                            "bytes=0-99999999999999999999999999999", "bytes=0-9"}) {
    std::string out = server->curl("-D - " + url + " -H 'Range: " + range + "'");
    EXPECT_EQ(out.rfind("HTTP/1.1 206 ", 0), 0u) << range << "\n" << out;
    EXPECT_NE(out.find("Content-Range: bytes 0-9/10\r\n"), std::string::npos) << range << "\n" << out;
    EXPECT_EQ(out.substr(out.find("\r\n\r\n") + 4), "0123456789") << range;
  }
  EXPECT_EQ(server->curl(url + " -H 'Range: bytes=-99999999999999999999999'"), "0123456789");
  EXPECT_EQ(server->curl(url + " -H 'Range: bytes=3-18446744073709551615'"), "3456789");
  for (const char* range : {"bytes=10-", "bytes=18446744073709551615-", "bytes=99999999999999999999999-",
                            "bytes=99999999999999999999999-99999999999999999999999"})
    EXPECT_EQ(server->status(url + " -H 'Range: " + range + "'"), 416) << range;
  EXPECT_EQ(server->status(url + " -H 'Range: bytes=5-3'"), 200) << "an invalid range is ignored";
}

}  // namespace
