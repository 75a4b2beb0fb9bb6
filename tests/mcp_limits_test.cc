// One token must not take the server's memory through /mcp or /messages: attacks from
// the attacker's side over real HTTP, each with the server's RSS (/proc/PID/status)
// measured before, during and after, and another owner (Bob) answered meanwhile.
//   - a JSON-RPC batch of tools/list (it multiplied memory by its answers);
//   - a batch whose members run while it holds a large ping's parameters;
//   - download_file of a large output (base64 twice, held for a slow reader);
//   - JSON bodies of small values, parsed at ten times their size, four at once.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "eventually.h"
#include "http_client.h"
#include "loopback.h"
#include "process_stats.h"
#include "server_harness.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

// The highest RSS the server reaches while it is sampled (every 20 ms).
class PeakRss {
 public:
  explicit PeakRss(pid_t pid)
      : pid_(pid), thread_([this] {
          while (!stop_) {
            peak_ = std::max(peak_.load(), rss_kib(pid_));
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }) {}
  ~PeakRss() { finish(); }
  long finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return peak_;
  }

 private:
  pid_t pid_;
  std::atomic<bool> stop_{false};
  std::atomic<long> peak_{0};
  std::thread thread_;
};

// A POST of a large body on its own connection, written while the answer is read: a
// server that answers before it has read the body (a refusal) and closes is heard,
// where a client that writes the whole body first would see only the reset.
HttpClient::Reply post_raw(int port, const std::string& token, const std::string& target,
                           const std::string& body, const HttpClient::Headers& headers = {}) {
  HttpClient::Reply reply;
  const int fd = connect_loopback(port);
  if (fd < 0) return reply;
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  std::string request =
      "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + token +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  for (const auto& [name, value] : headers) request += name + ": " + value + "\r\n";
  request += "\r\n";
  const std::string_view parts[2] = {request, body};
  size_t part = 0, offset = 0;
  bool sending = true;
  std::string in;
  size_t head_end = std::string::npos, length = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, static_cast<short>(POLLIN | (sending ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 1000) < 0) break;
    if (sending && (p.revents & POLLOUT)) {
      const auto rest = parts[part].substr(offset, 1 << 20);
      const ssize_t n = ::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN) sending = false;
      if (n > 0 && (offset += static_cast<size_t>(n)) == parts[part].size()) {
        offset = 0;
        sending = ++part < 2;
      }
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[65536];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0 && !(n < 0 && errno == EAGAIN)) break;
      if (n > 0) in.append(buf, static_cast<size_t>(n));
    }
    if (head_end == std::string::npos && (head_end = in.find("\r\n\r\n")) != std::string::npos) {
      std::istringstream lines(in.substr(0, head_end));
      std::string line;
      std::getline(lines, line);
      reply.status = static_cast<unsigned>(std::atoi(line.c_str() + 9));
      while (std::getline(lines, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string name = line.substr(0, colon), value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        if (boost::beast::iequals(name, "content-length")) length = std::stoul(value);
        if (boost::beast::iequals(name, "retry-after")) reply.retry_after = value;
        reply.headers.emplace_back(name, value);
      }
    }
    if (head_end != std::string::npos && in.size() >= head_end + 4 + length) break;
  }
  ::close(fd);
  if (head_end != std::string::npos) reply.body = in.substr(head_end + 4, length);
  return reply;
}

const HttpClient::Headers kAccept{{"Accept", "application/json, text/event-stream"}};

// An MCP session of `token` at `version`: its id.
std::string open_session(HttpClient& client, const std::string& version) {
  auto reply =
      client.post("/mcp",
                  bj::serialize(bj::object{{"jsonrpc", "2.0"},
                                           {"id", 0},
                                           {"method", "initialize"},
                                           {"params",
                                            {{"protocolVersion", version},
                                             {"capabilities", bj::object{}},
                                             {"clientInfo", {{"name", "limits"}, {"version", "1"}}}}}}),
                  "application/json", kAccept);
  EXPECT_EQ(reply.status, 200u) << reply.body;
  return reply.header("Mcp-Session-Id");
}

HttpClient::Headers session_headers(const std::string& session) {
  auto headers = kAccept;
  headers.emplace_back("Mcp-Session-Id", session);
  return headers;
}

// Bob's work, again and again until stopped: a command and /health, each answered.
class BobWorks {
 public:
  explicit BobWorks(const ServerProcess& server)
      : thread_([this, &server] {
          HttpClient bob(server.port(), "secret-bob-x");
          while (!stop_ || answered_ < 3) {
            auto echo = bob.post("/api/gpt/v1/containers/bob-limits/tools/bash_code_execution",
                                 R"({"command": "echo ok"})");
            const bool ok = echo.status == 200 &&
                            echo.body.find("\"stdout\":\"ok\\n\"") != std::string::npos &&
                            bob.get("/health").status == 200;
            if (ok) {
              ++answered_;
            } else {
              std::lock_guard lock(mutex_);
              if (failure_.empty()) failure_ = std::to_string(echo.status) + " " + echo.body.substr(0, 300);
            }
          }
        }) {}
  ~BobWorks() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int answered() const { return answered_; }
  std::string failure() {
    std::lock_guard lock(mutex_);
    return failure_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> answered_{0};
  std::mutex mutex_;
  std::string failure_;
  std::thread thread_;
};

// Warms the server (Bob's container and sandbox exist) and waits until its RSS settles.
long settled_rss(const ServerProcess& server) {
  HttpClient bob(server.port(), "secret-bob-x");
  EXPECT_EQ(bob.post("/api/gpt/v1/containers/bob-limits/tools/bash_code_execution", R"({"command": "true"})")
                .status,
            200u);
  long rss = rss_kib(server.pid());
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const long now = rss_kib(server.pid());
    if (std::abs(now - rss) < 512) break;
    rss = now;
  }
  return rss_kib(server.pid());
}

// An attack on a settled server: its RSS and descriptors before, its peak RSS during,
// and Bob working all along.
class Attack {
 public:
  explicit Attack(const ServerProcess& server)
      : server_(server),
        rss_before_(settled_rss(server)),
        fds_before_(count_fds(server.pid())),
        bob_(server),
        peak_(server.pid()) {}
  // The attack is over: its peak growth is at most `max_growth_mib`; then RSS and
  // descriptors come back near where they were, and Bob was served throughout.
  void over(const std::string& what, long max_growth_mib) {
    const long peak = peak_.finish();
    std::cout << "[ figures ] " << what << ": RSS before " << rss_before_ / 1024 << " MiB, peak "
              << peak / 1024 << " MiB\n";
    EXPECT_LT(peak - rss_before_, max_growth_mib * 1024)
        << what << " grew the server by " << (peak - rss_before_) / 1024 << " MiB";
    bob_.stop();
    EXPECT_EQ(bob_.failure(), "");
    EXPECT_GE(bob_.answered(), 3);
    const pid_t pid = server_.pid();
    EXPECT_TRUE(eventually([&] { return rss_kib(pid) < rss_before_ + 96 * 1024; }))
        << "RSS " << rss_kib(pid) << " KiB, before " << rss_before_ << " KiB";
    EXPECT_TRUE(eventually([&] { return count_fds(pid) <= fds_before_ + 8; }))
        << count_fds(pid) << " descriptors, before " << fds_before_;
    std::cout << "[ figures ] after: RSS " << rss_kib(pid) / 1024 << " MiB, " << count_fds(pid)
              << " descriptors (before: " << rss_before_ / 1024 << " MiB, " << fds_before_
              << "); Bob answered " << bob_.answered() << " times meanwhile\n";
  }

 private:
  const ServerProcess& server_;
  const long rss_before_, fds_before_;
  BobWorks bob_;
  PeakRss peak_;
};

std::string repeated(const std::string& item, size_t count) {
  std::string out;
  out.reserve((item.size() + 1) * count + 2);
  out += '[';
  for (size_t i = 0; i < count; ++i) {
    if (i) out += ',';
    out += item;
  }
  out += ']';
  return out;
}

// 1. A batch of tools/list: its member count and its answers are bounded.
TEST(McpLimits, ABatchOfToolsListIsBoundedByCountAndAnswerSize) {
  ServerProcess server;
  Attack attack(server);
  HttpClient alice(server.port(), "secret-alice");
  const std::string session = open_session(alice, "2025-03-26");
  const std::string tools_list = R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})";
  // The attack's batch: 89,240 tools/list in 4.2 MB.
  const std::string huge = repeated(tools_list, 89240);
  ASSERT_GT(huge.size(), 4'000'000u);
  auto refused = alice.post("/mcp", huge, "application/json", session_headers(session));
  EXPECT_EQ(refused.status, 400u) << refused.body.substr(0, 300);
  auto error = json(refused.body);
  EXPECT_EQ(error.at("error").at("code"), -32600) << refused.body;
  EXPECT_NE(refused.body.find("at most 100 messages"), std::string::npos) << refused.body;
  // At the cap: 100 members, every one answered.
  auto full = alice.post("/mcp", repeated(tools_list, 100), "application/json", session_headers(session));
  ASSERT_EQ(full.status, 200u) << full.body.substr(0, 300);
  auto answers = json(full.body).as_array();
  ASSERT_EQ(answers.size(), 100u);
  for (const auto& answer : answers) EXPECT_TRUE(answer.as_object().contains("result"));
  // Answers past 8 MiB: a 3 MiB file is 4 MiB of base64; the third and later members
  // of a batch of five downloads get an error each, to be sent again on their own.
  ASSERT_EQ(alice
                .post("/api/gpt/v1/containers/limits/tools/bash_code_execution",
                      R"({"command": "head -c 3000000 /dev/urandom > /mnt/user-data/outputs/r.bin"})")
                .status,
            200u);
  std::string downloads = "[";
  for (int i = 0; i < 5; ++i)
    downloads +=
        std::string(i ? "," : "") + R"({"jsonrpc":"2.0","id":)" + std::to_string(i) +
        R"(,"method":"tools/call","params":{"name":"download_file","arguments":{"container":"limits","path":"/mnt/user-data/outputs/r.bin"}}})";
  downloads += "]";
  auto capped = alice.post("/mcp", downloads, "application/json", session_headers(session));
  ASSERT_EQ(capped.status, 200u) << capped.body.substr(0, 300);
  EXPECT_LE(capped.body.size(), 8u << 20);
  auto members = json(capped.body).as_array();
  ASSERT_EQ(members.size(), 5u);
  EXPECT_EQ(members[0].at("result").at("structuredContent").at("encoding"), "base64");
  EXPECT_EQ(members[4].at("error").at("code"), -32000);
  EXPECT_NE(bj::serialize(members[4]).find("send this request again on its own"), std::string::npos);
  attack.over("batches of tools/list", 192);
}

// 2. The attack's batches, [bash "sleep 25", a ping with a 30 MiB array], four at once:
// refused (a batch is at most 4 MiB) before they are parsed, so none holds anything
// while its command would run. A batch under the bound is answered, its ping's params
// dropped when classified (fuzz/targets/mcp_envelope.cc checks that no member keeps
// params its method does not read).
TEST(McpLimits, ABatchHoldsNoLargeBodyWhileItsMembersRun) {
  ServerProcess server;
  Attack attack(server);
  const std::string big =
      R"([{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash_code_execution","arguments":{"container":"limits","command":"sleep 25"}}},)"
      R"({"jsonrpc":"2.0","id":2,"method":"ping","params":{"junk":)" +
      repeated("[0]", 7'800'000) + "}}]";
  std::vector<std::thread> attackers;
  std::vector<HttpClient::Reply> replies(4);
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i)
    attackers.emplace_back([&, i] {
      HttpClient alice(server.port(), "secret-alice");
      const std::string session = open_session(alice, "2025-03-26");
      replies[i] = post_raw(server.port(), "secret-alice", "/mcp", big, session_headers(session));
    });
  for (auto& t : attackers) t.join();
  for (const auto& reply : replies) {
    EXPECT_EQ(reply.status, 413u) << reply.body.substr(0, 300);
    if (reply.status == 413u) {
      EXPECT_EQ(json(reply.body).at("error").at("code"), -32600);
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20)) << "answered, not run";
  // Under the bound: a command and a ping carrying 3 MB, both answered.
  HttpClient alice(server.port(), "secret-alice");
  const std::string session = open_session(alice, "2025-03-26");
  const std::string batch =
      R"([{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash_code_execution","arguments":{"container":"limits","command":"sleep 1; echo slept"}}},)"
      R"({"jsonrpc":"2.0","id":2,"method":"ping","params":{"junk":)" +
      repeated("\"" + std::string(30, 'j') + "\"", 100'000) + "}}]";
  auto answered = alice.post("/mcp", batch, "application/json", session_headers(session));
  ASSERT_EQ(answered.status, 200u) << answered.body.substr(0, 300);
  auto answers = json(answered.body).as_array();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0].at("result").at("structuredContent").at("stdout"), "slept\n");
  EXPECT_EQ(answers[1], json(R"({"jsonrpc":"2.0","id":2,"result":{}})"));
  attack.over("four [sleep 25, 30 MiB ping] batches, then a 3 MB one", 64);
}

// 5. download_file and resources/read: the content once, at most 3 MiB of file inline;
// beyond it a resource_link and the Files API's download.
TEST(McpLimits, DownloadsAreEncodedOnceAndLargeOnesAreLinks) {
  ServerProcess server;
  HttpClient alice(server.port(), "secret-alice");
  ASSERT_EQ(alice
                .post("/api/gpt/v1/containers/limits/tools/bash_code_execution",
                      R"({"command": "head -c 16000000 /dev/urandom > /mnt/user-data/outputs/big.bin; )"
                      R"(head -c 2000000 /dev/urandom > /mnt/user-data/outputs/small.bin; )"
                      R"(head -c 1000000 /dev/zero | tr '\\0' '\\1' > /mnt/user-data/outputs/ctl.txt"})")
                .status,
            200u);
  Attack attack(server);
  const std::string session = open_session(alice, "2025-11-25");
  auto call = [&](const std::string& path) {
    return alice.post(
        "/mcp",
        R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"download_file","arguments":{"container":"limits","path":")" +
            path + R"("}}})",
        "application/json", session_headers(session));
  };
  // 16 MB: a link, and where to download it.
  auto big = call("/mnt/user-data/outputs/big.bin");
  ASSERT_EQ(big.status, 200u);
  EXPECT_LT(big.body.size(), 4096u) << big.body.substr(0, 500);
  auto result = json(big.body).at("result");
  EXPECT_EQ(result.at("structuredContent").at("encoding"), "link");
  const std::string download(result.at("structuredContent").at("download").as_string());
  EXPECT_EQ(result.at("content").at(1).at("type"), "resource_link");
  EXPECT_EQ(result.at("content").at(1).at("uri"),
            "sandboxd://containers/limits/files/mnt/user-data/outputs/big.bin");
  EXPECT_EQ(result.at("content").at(1).at("size"), 16000000);
  EXPECT_EQ(server.curl("-o /dev/null -w '%{size_download}' '" + server.url(download) + "'"), "16000000");
  // resources/read of it: refused with the same advice.
  auto read = alice.post(
      "/mcp",
      R"({"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"sandboxd://containers/limits/files/mnt/user-data/outputs/big.bin"}})",
      "application/json", session_headers(session));
  EXPECT_EQ(json(read.body).at("error").at("code"), -32000) << read.body;
  EXPECT_NE(read.body.find(download), std::string::npos) << read.body;
  // 2 MB: inline, its base64 once in the answer.
  auto small = call("/mnt/user-data/outputs/small.bin");
  const size_t base64 = (2000000 + 2) / 3 * 4;
  EXPECT_GT(small.body.size(), base64);
  EXPECT_LT(small.body.size(), base64 + 4096) << "the content is in the answer once";
  EXPECT_EQ(json(small.body).at("result").at("content").at(1).at("type"), "resource_link");
  // A text of control bytes (six bytes each as JSON text) goes as base64 instead.
  auto ctl = call("/mnt/user-data/outputs/ctl.txt");
  EXPECT_EQ(json(ctl.body).at("result").at("structuredContent").at("encoding"), "base64");
  EXPECT_LT(ctl.body.size(), 1'400'000u);
  attack.over("download_file of 16 MB and 2 MB", 48);
}

// 7. JSON bodies of small values (ten times their size parsed), to /mcp and /messages,
// four at once: each refused by its owner's budget or the parse's own bound, never
// parsed whole; Bob is answered meanwhile. Large legitimate bodies still pass, and
// what one owner holds at once beyond its share is refused with 429 and Retry-After.
TEST(McpLimits, LargeJsonBodiesAreChargedToTheirOwnerAndOthersAreServedMeanwhile) {
  constexpr size_t kOwnerShareBytes = 256u << 20;  // api/json_body.h's kOwnerParseShare
  ServerProcess server;
  Attack attack(server);
  // Just under 32 MiB: {"jsonrpc":..., "params": {"name":"x","arguments":{"a":[[0],[0],...]}}}
  const std::string values = repeated("[0]", 8'300'000);
  const std::string mcp_body =
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"a":)" + values +
      "}}}";
  const std::string messages_body = R"({"model":"m","max_tokens":1,"messages":[],"x":)" + values + "}";
  ASSERT_LT(mcp_body.size(), 32u << 20);
  std::vector<std::thread> attackers;
  std::vector<HttpClient::Reply> replies(4);
  for (int i = 0; i < 4; ++i)
    attackers.emplace_back([&, i] {
      HttpClient alice(server.port(), "secret-alice");
      if (i < 3) {
        const std::string session = open_session(alice, "2025-06-18");
        replies[i] = post_raw(server.port(), "secret-alice", "/mcp", mcp_body, session_headers(session));
      } else {
        replies[i] = post_raw(server.port(), "secret-alice", "/api/gpt/v1/messages/validate", messages_body);
      }
    });
  for (auto& t : attackers) t.join();
  for (const auto& reply : replies) {
    std::cout << "[ figures ] a 32 MiB body of small arrays: " << reply.status << "\n";
    EXPECT_TRUE(reply.status == 413u || reply.status == 429u)
        << reply.status << " " << reply.body.substr(0, 300);
    if (reply.status == 429u) {
      EXPECT_EQ(reply.retry_after, "1");
    }
  }
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(json(replies[i].body).as_object().contains("error")) << replies[i].body;

  // Legitimate large bodies: a 30 MiB string is parsed (about its size). Twenty at once,
  // held while their commands run: more than the owner's 256 MiB share run (an owner
  // alone borrows what nobody else uses), and those past what leaves one share free for
  // others are refused with 429 and Retry-After. Once one is refused, another owner's
  // 30 MiB message is still taken: the share kept for others is there.
  const std::string junk(30u << 20, 'a');
  auto held_call = [&](const std::string& token, const std::string& container, const std::string& word) {
    HttpClient client(server.port(), token);
    const std::string session = open_session(client, "2025-06-18");
    return post_raw(
        server.port(), token, "/mcp",
        R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash_code_execution","arguments":{"container":")" +
            container + R"(","command":"sleep 3; echo )" + word + R"("},"_meta":{"junk":")" + junk +
            R"("}}})",
        session_headers(session));
  };
  constexpr int kHeld = 20;
  std::vector<HttpClient::Reply> held(kHeld);
  std::atomic<int> refusals{0};
  attackers.clear();
  for (int i = 0; i < kHeld; ++i)
    attackers.emplace_back([&, i] {
      held[i] = held_call("secret-alice", "limits", "held");
      if (held[i].status == 429u) ++refusals;
    });
  const bool some_refused = eventually([&] { return refusals.load() > 0; }, std::chrono::seconds(30));
  EXPECT_TRUE(some_refused) << "twenty 30 MiB messages held at once were all taken";
  HttpClient::Reply bobs;
  if (some_refused) bobs = held_call("secret-bob-x", "bob-held", "bob");
  for (auto& t : attackers) t.join();
  EXPECT_EQ(bobs.status, 200u) << bobs.body.substr(0, 300);
  if (bobs.status == 200u) {
    EXPECT_EQ(json(bobs.body).at("result").at("structuredContent").at("stdout"), "bob\n") << bobs.body;
  }
  int ran = 0, refused = 0;
  for (const auto& reply : held) {
    if (reply.status == 200u) {
      EXPECT_EQ(json(reply.body).at("result").at("structuredContent").at("stdout"), "held\n") << reply.body;
      ++ran;
    } else {
      EXPECT_EQ(reply.status, 429u) << reply.body.substr(0, 300);
      EXPECT_EQ(reply.retry_after, "1");
      EXPECT_EQ(json(reply.body).at("error").at("code"), -32000) << reply.body;
      ++refused;
    }
  }
  // Each such message holds about 60 MiB while it is parsed and used (its string as the
  // parser gathers it, then as the value), so the share alone would take four at most.
  EXPECT_GT(size_t(ran) * (60u << 20), kOwnerShareBytes + (30u << 20))
      << "an owner alone holds more than its share";
  EXPECT_GE(refused, 1);
  std::cout << "[ figures ] twenty 30 MiB messages held at once: " << ran << " ran, " << refused
            << " refused with 429; another owner's taken meanwhile\n";
  attack.over("four 32 MiB bodies of small arrays, then twenty-one 30 MiB messages", 800);
}

}  // namespace
