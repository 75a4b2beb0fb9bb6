// E2B's surfaces from the attacker's side: one key holder trying to take the server's
// memory or descriptors through envd's processes (concurrent starts, stdin nobody
// reads), /files (uploads of many small parts, trickled), /execute (a client that
// stops reading a cell's large outputs) and bodies built to cost far more parsed than
// sent; each bounded, answered in Connect's or E2B's shape, and another owner served
// meanwhile. Raw HTTP with curl and sockets against a real `sandboxd serve`.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <regex>
#include <thread>

#include "base/base64.h"
#include "eventually.h"
#include "server_harness.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

const std::string kAlice = "secret-alice";
const std::string kBob = "secret-bob-x";

size_t open_descriptors(pid_t pid) { return static_cast<size_t>(count_fds(pid)); }

// The server's resident memory, in MiB.
double rss_mib(pid_t pid) { return rss_kib(pid) / 1024.0; }

// A Connect envelope around one JSON message.
std::string envelope(const std::string& json) {
  std::string out(5, '\0');
  const uint32_t n = static_cast<uint32_t>(json.size());
  out[1] = static_cast<char>(n >> 24);
  out[2] = static_cast<char>(n >> 16);
  out[3] = static_cast<char>(n >> 8);
  out[4] = static_cast<char>(n);
  return out + json;
}

class E2bLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    sandbox_ = create_sandbox(kAlice);
    ASSERT_FALSE(sandbox_.empty());
  }
  void TearDown() override {
    if (!sandbox_.empty()) server_.curl("-X DELETE " + server_.url("/e2b/sandboxes/" + sandbox_), kAlice);
  }

  std::string create_sandbox(const std::string& token) {
    auto made = server_.curl_json("-X POST " + server_.url("/e2b/sandboxes") +
                                      " -H 'Content-Type: application/json' -d "
                                      "'{\"templateID\": \"base\", \"timeout\": 600}'",
                                  token);
    if (!made.is_object() || !made.as_object().contains("sandboxID")) {
      ADD_FAILURE() << bj::serialize(made);
      return "";
    }
    return std::string(made.at("sandboxID").as_string());
  }
  // curl arguments that address the sandbox's envd (or its code interpreter).
  std::string addressed(uint16_t port = 49983) const {
    return " -H 'E2b-Sandbox-Id: " + sandbox_ + "' -H 'E2b-Sandbox-Port: " + std::to_string(port) + "' ";
  }
  std::string rpc(const std::string& service_method) const {
    return server_.url("/e2b/sandbox/" + service_method);
  }
  fs::path write(const std::string& name, const std::string& body) const {
    fs::path path = server_.dir() / name;
    std::ofstream(path, std::ios::binary) << body;
    return path;
  }
  // A server-streaming call (its whole answer, within `seconds`).
  std::string stream_call(const std::string& method, const std::string& message, int seconds,
                          const std::string& name = "stream.body") const {
    auto body = write(name, envelope(message));
    return server_.curl("-N -m " + std::to_string(seconds) + " -X POST " + rpc(method) + addressed() +
                            " -H 'Content-Type: application/connect+json' --data-binary @" + body.string(),
                        kAlice);
  }
  // A unary call: "<status>\n<body>".
  std::string unary_call(const std::string& method, const fs::path& body, int seconds = 20) const {
    const std::string out =
        server_.curl("-m " + std::to_string(seconds) + " -w '\\n%{http_code}' -X POST " + rpc(method) +
                         addressed() + " -H 'Content-Type: application/json' --data-binary @" + body.string(),
                     kAlice);
    const auto cut = out.rfind('\n');
    return out.substr(cut + 1) + "\n" + out.substr(0, cut);
  }
  uint32_t started_pid(const std::string& stream) const {
    std::smatch m;
    if (!std::regex_search(stream, m, std::regex("\"start\":\\{\"pid\":([0-9]+)"))) {
      ADD_FAILURE() << "no start event in " << stream.substr(0, 300);
      return 0;
    }
    return static_cast<uint32_t>(std::stoul(m[1]));
  }
  size_t listed_processes() const {
    auto body = write("list.json", "{}");
    const std::string out = unary_call("process.Process/List", body);
    auto listing = json(out.substr(out.find('\n') + 1));
    return listing.at("processes").as_array().size();
  }
  // A connection to the server with one socket option set first (-1 on a failure).
  int connect_to_server(int option, const void* value, socklen_t size) const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, option, value, size);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server_.port()));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }
  // The descriptor count once it has stayed the same for half a second.
  size_t settled_descriptors() const {
    size_t now = open_descriptors(server_.pid());
    int steady = 0;
    eventually([&] {
      const size_t n = open_descriptors(server_.pid());
      steady = n == now ? steady + 1 : 0;
      now = n;
      return steady >= 10;
    });
    return now;
  }

  ServerProcess server_{"runtime:\n  prestartedSandboxes: 0\n"};
  std::string sandbox_;
};

// Bob's work, again and again until `stop`: a command in his own container and /health.
struct OtherOwner {
  explicit OtherOwner(const ServerProcess& server) : server(server) {
    worker = std::thread([this] {
      int n = 0;
      while (!stop || n < 2) {
        auto echo = this->server.curl_json("-m 30 -X POST '" + this->server.base() +
                                               "/containers/bob-e2b/tools/bash_code_execution' -d "
                                               "'{\"command\": \"echo bob-ok\"}'",
                                           kBob);
        const bool ok = echo.is_object() && echo.as_object().contains("stdout") &&
                        echo.at("stdout") == "bob-ok\n" &&
                        this->server.status(this->server.url("/health")) == 200;
        if (ok)
          ++answered;
        else if (++failed == 1)
          failure = bj::serialize(echo);
        ++n;
      }
    });
  }
  void finish() {
    stop = true;
    worker.join();
    EXPECT_EQ(failed.load(), 0) << failure;
    EXPECT_GE(answered.load(), 2);
  }
  const ServerProcess& server;
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0}, failed{0};
  std::string failure;
  std::thread worker;
};

// 200 concurrent Starts of a long process in one sandbox: no more than its 64 run (the
// rest are refused with resource_exhausted), and the server's descriptors grow by what
// 64 processes hold, not 200.
TEST_F(E2bLimits, ConcurrentStartsStayWithinTheSandboxsShare) {
  // A first process starts the sandbox (its descriptors are the baseline's).
  const std::string warm = stream_call("process.Process/Start", R"({"process": {"cmd": "/bin/true"}})", 30);
  ASSERT_NE(warm.find("\"end\""), std::string::npos) << warm.substr(0, 300);
  const size_t before = settled_descriptors();

  // The sandbox is stopped: every start waits on its start again, together, which is
  // where a count taken before the start and kept after it let them all through.
  server_.curl("-X POST " + server_.base() + "/containers/" + sandbox_ + "/stop", kAlice);
  // 200 requests on 200 connections, all sent before any answer is read.
  const std::string body = envelope(R"({"process": {"cmd": "/bin/sleep", "args": ["60"]}})");
  const std::string request =
      "POST /e2b/sandbox/process.Process/Start HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Authorization: Bearer " +
      kAlice + "\r\nE2b-Sandbox-Id: " + sandbox_ +
      "\r\nE2b-Sandbox-Port: 49983\r\nContent-Type: application/connect+json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  std::vector<int> clients;
  for (int i = 0; i < 200; ++i) {
    timeval wait{30, 0};
    const int fd = connect_to_server(SO_RCVTIMEO, &wait, sizeof wait);
    ASSERT_GE(fd, 0);
    clients.push_back(fd);
  }
  for (int fd : clients)
    ASSERT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  int started = 0, refused = 0;
  for (int fd : clients) {
    std::string answer;
    char buffer[4096];
    for (;;) {
      const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      answer.append(buffer, static_cast<size_t>(n));
      if (answer.find("\"start\"") != std::string::npos ||
          answer.find("resource_exhausted") != std::string::npos)
        break;
    }
    if (answer.find("\"start\"") != std::string::npos)
      ++started;
    else if (answer.find("resource_exhausted") != std::string::npos)
      ++refused;
    else
      ADD_FAILURE() << "a start answered neither: " << answer.substr(0, 300);
  }
  for (int fd : clients) close(fd);
  EXPECT_LE(started, 64);
  EXPECT_GE(refused, 136);
  EXPECT_EQ(started + refused, 200);
  EXPECT_LE(listed_processes(), 64u);
  // Each running process holds its pipes; the clients' connections are closed.
  const size_t after = settled_descriptors();
  EXPECT_LE(after, before + 64 * 4 + 16) << "from " << before;
}

// Stdin sent to a process that never reads it: what waits is bounded (2 MiB), a write
// beyond it is answered at once with resource_exhausted and nothing of it is kept; a
// process that reads gets every byte taken, in order, and its end of file after them.
TEST_F(E2bLimits, StdinThatIsNotReadIsBoundedAndAnswered) {
  // The stream ends at -m; the process runs on.
  const std::string start = stream_call(
      "process.Process/Start", R"({"process": {"cmd": "/bin/sleep", "args": ["600"]}, "stdin": true})", 3);
  const uint32_t pid = started_pid(start);
  ASSERT_NE(pid, 0u);
  const std::string data = sandboxd::base64_encode(std::string(1536 * 1024, 'x'));
  auto input = write("input.json", "{\"process\": {\"pid\": " + std::to_string(pid) +
                                       "}, \"input\": {\"stdin\": \"" + data + "\"}}");
  const double rss_before = rss_mib(server_.pid());
  const std::string first = unary_call("process.Process/SendInput", input, 10);
  EXPECT_EQ(first.substr(0, 4), "200\n") << first.substr(0, 300);
  for (int i = 0; i < 30; ++i) {
    const std::string refused = unary_call("process.Process/SendInput", input, 10);
    ASSERT_EQ(refused.substr(0, 4), "429\n") << "call " << i << ": " << refused.substr(0, 300);
    EXPECT_NE(refused.find("\"code\":\"resource_exhausted\""), std::string::npos) << refused.substr(0, 300);
    EXPECT_NE(refused.find("bytes of stdin waiting"), std::string::npos) << refused.substr(0, 300);
  }
  EXPECT_LT(rss_mib(server_.pid()) - rss_before, 40.0) << "what was refused is not kept";

  // A process that reads: every byte of each write it was given, in order, then EOF.
  std::string counted;
  std::thread reader([&] {
    counted = stream_call(
        "process.Process/Start",
        R"({"process": {"cmd": "/bin/sh", "args": ["-c", "md5sum"]}, "tag": "md5", "stdin": true})", 60,
        "start-md5.body");
  });
  auto selector = write("md5.json", R"({"process": {"tag": "md5"}})");
  ASSERT_TRUE(eventually([&] {
    return unary_call("process.Process/List", write("l.json", "{}")).find("md5") != std::string::npos;
  }));
  std::string sent;
  for (int i = 0; i < 6; ++i) {
    const std::string piece(700 * 1024, static_cast<char>('a' + i));
    auto part = write("md5-input.json", "{\"process\": {\"tag\": \"md5\"}, \"input\": {\"stdin\": \"" +
                                            sandboxd::base64_encode(piece) + "\"}}");
    std::string answer;
    // A write that does not fit while the process is still reading is sent again.
    ASSERT_TRUE(eventually([&] {
      answer = unary_call("process.Process/SendInput", part, 10);
      return answer.substr(0, 4) != "429\n";
    })) << answer.substr(0, 300);
    ASSERT_EQ(answer.substr(0, 4), "200\n") << answer.substr(0, 300);
    sent += piece;
  }
  const std::string closed = unary_call("process.Process/CloseStdin", selector);
  EXPECT_EQ(closed.substr(0, 4), "200\n") << closed;
  reader.join();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(counted, m, std::regex("\"stdout\":\"([A-Za-z0-9+/=]+)\"")))
      << counted.substr(0, 400);
  const auto printed = sandboxd::base64_decode(m[1].str());
  ASSERT_TRUE(printed);
  // md5sum of what was sent, computed here the same way.
  write("sent.bin", sent);
  const std::string local = sh("md5sum < " + (server_.dir() / "sent.bin").string());
  EXPECT_EQ(*printed, local);
}

// Each surface's message has the size it needs, and what costs far more parsed than sent
// (many small values) is refused before it is parsed.
TEST_F(E2bLimits, MessagesAreBoundedPerSurfaceBeforeTheyAreParsed) {
  // Past each call's size: 413, in Connect's shape (resource_exhausted) or E2B's.
  const std::string list =
      unary_call("process.Process/List", write("big-list.json", std::string(100 * 1024, ' ') + "{}"));
  EXPECT_EQ(list.substr(0, 4), "413\n") << list.substr(0, 300);
  EXPECT_NE(list.find("resource_exhausted"), std::string::npos) << list.substr(0, 300);
  const std::string input =
      unary_call("process.Process/SendInput",
                 write("big-input.json", "{\"process\": {\"pid\": 1}, \"input\": {\"stdin\": \"" +
                                             std::string(3u << 20, 'A') + "\"}}"));
  EXPECT_EQ(input.substr(0, 4), "413\n") << input.substr(0, 300);
  const std::string start = stream_call(
      "process.Process/Start",
      "{\"process\": {\"cmd\": \"/bin/true\", \"args\": [\"" + std::string(1100 * 1024, 'a') + "\"]}}", 20,
      "big-start.body");
  EXPECT_NE(start.find("resource_exhausted"), std::string::npos) << start.substr(0, 300);
  auto big_cell = write("big-cell.json", "{\"code\": \"" + std::string(2200 * 1024, '#') + "\"}");
  const std::string cell =
      server_.curl("-w '\\n%{http_code}' -X POST " + server_.url("/e2b/sandbox/execute") + addressed(49999) +
                       " -H 'Content-Type: application/json' --data-binary @" + big_cell.string(),
                   kAlice);
  EXPECT_EQ(cell.substr(cell.rfind('\n') + 1), "413") << cell.substr(0, 300);

  // Within the sizes, but 100,000 values: refused with 400 before parsing.
  std::string zeros;
  for (int i = 0; i < 100'000; ++i) zeros += "0,";
  zeros += "0";
  const std::string bomb_start =
      stream_call("process.Process/Start", "{\"process\": {\"cmd\": \"/bin/true\"}, \"x\": [" + zeros + "]}",
                  20, "bomb-start.body");
  EXPECT_NE(bomb_start.find("invalid_argument"), std::string::npos) << bomb_start.substr(0, 300);
  EXPECT_NE(bomb_start.find("more than 16384 JSON values"), std::string::npos) << bomb_start.substr(0, 300);
  auto bomb_cell = write("bomb-cell.json", "{\"code\": \"1\", \"x\": [" + zeros + "]}");
  const std::string bomb =
      server_.curl("-w '\\n%{http_code}' -X POST " + server_.url("/e2b/sandbox/execute") + addressed(49999) +
                       " -H 'Content-Type: application/json' --data-binary @" + bomb_cell.string(),
                   kAlice);
  EXPECT_EQ(bomb.substr(bomb.rfind('\n') + 1), "400") << bomb.substr(0, 300);
  EXPECT_NE(bomb.find("more than 16384 JSON values"), std::string::npos) << bomb.substr(0, 300);
  const std::string bomb_create =
      server_.curl("-w '\\n%{http_code}' -X POST " + server_.url("/e2b/sandboxes") +
                       " -H 'Content-Type: application/json' -d '{\"templateID\": \"base\", \"x\": [" +
                       zeros.substr(0, 60'000) + "]}'",
                   kAlice);
  EXPECT_EQ(bomb_create.substr(bomb_create.rfind('\n') + 1), "400") << bomb_create.substr(0, 300);

  // What a real call needs still passes: a 100 KB argument.
  const std::string echoed = stream_call(
      "process.Process/Start",
      "{\"process\": {\"cmd\": \"/bin/sh\", \"args\": [\"-c\", \"printf %s \\\"$0\\\" | wc -c\", \"" +
          std::string(100'000, 'a') + "\"]}}",
      30, "echo-start.body");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(echoed, m, std::regex("\"stdout\":\"([A-Za-z0-9+/=]+)\"")))
      << echoed.substr(0, 300);
  EXPECT_EQ(sandboxd::base64_decode(m[1].str()).value_or(""), "100000\n");
}

// Ten uploads of 300 empty files each, sent slowly at once: the server holds one file
// open per upload, not every part of every upload; every file is written, and another
// owner is served meanwhile.
TEST_F(E2bLimits, UploadsOfManyPartsHoldFewDescriptorsAndOthersAreServedMeanwhile) {
  const std::string boundary = "sandboxd-many-parts";
  for (int u = 0; u < 10; ++u) {
    std::string body;
    for (int i = 0; i < 300; ++i)
      body += "--" + boundary +
              "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/up" +
              std::to_string(u) + "-" + std::to_string(i) + ".txt\"\r\n\r\n\r\n";
    body += "--" + boundary + "--\r\n";
    write("upload-" + std::to_string(u) + ".body", body);
  }
  // The sandbox is up (its volume mounted) before the baseline.
  ASSERT_NE(stream_call("process.Process/Start", R"({"process": {"cmd": "/bin/true"}})", 30).find("\"end\""),
            std::string::npos);
  const size_t before = settled_descriptors();
  OtherOwner bob(server_);
  std::vector<std::string> replies(10);
  std::vector<std::thread> uploads;
  std::atomic<int> running{10};
  for (int u = 0; u < 10; ++u)
    uploads.emplace_back([&, u] {
      replies[u] = server_.curl(
          "-m 120 -w '\\n%{http_code}' --limit-rate 20k -X POST '" + server_.url("/e2b/sandbox/files") + "'" +
              addressed() + " -H 'Content-Type: multipart/form-data; boundary=" + boundary +
              "' --data-binary @" + (server_.dir() / ("upload-" + std::to_string(u) + ".body")).string(),
          kAlice);
      --running;
    });
  size_t peak = 0;
  while (running > 0) {
    peak = std::max(peak, open_descriptors(server_.pid()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& t : uploads) t.join();
  bob.finish();
  for (const auto& reply : replies) {
    ASSERT_EQ(reply.substr(reply.rfind('\n') + 1), "200") << reply.substr(0, 300);
    EXPECT_EQ(json(reply.substr(0, reply.rfind('\n'))).as_array().size(), 300u);
  }
  // Ten connections, each upload's one open file (two descriptors), and Bob's.
  EXPECT_LE(peak, before + 10 * 3 + 40) << "from " << before;
  auto listed = write("listdir.json", R"({"path": "/home/user"})");
  const std::string listing = unary_call("filesystem.Filesystem/ListDir", listed);
  size_t files = 0;
  for (size_t at = 0; (at = listing.find("\"name\":\"up", at)) != std::string::npos; ++at) ++files;
  EXPECT_EQ(files, 3000u);
}

// A client that asks for a cell of large outputs and stops reading: what waits for it
// is bounded (a few lines, not the cell's outputs), another owner is served meanwhile,
// and once the clients go their cells stop and their descriptors and memory come back.
TEST_F(E2bLimits, ExecuteForAClientThatStopsReadingHoldsLittleAndOthersAreServedMeanwhile) {
  const std::string cell =
      server_.curl("-m 120 -X POST " + server_.url("/e2b/sandbox/execute") + addressed(49999) +
                       " -H 'Content-Type: application/json' -d '{\"code\": \"1 + 1\"}'",
                   kAlice);
  ASSERT_NE(cell.find("end_of_execution"), std::string::npos) << cell.substr(0, 300);
  // Three cells at once: the default context and two more (a context runs one cell at
  // a time), each kernel started first, and Bob's sandbox too, before the baseline.
  std::vector<std::string> contexts{""};
  for (int i = 0; i < 2; ++i) {
    auto made = server_.curl_json("-X POST " + server_.url("/e2b/sandbox/contexts") + addressed(49999) +
                                      " -H 'Content-Type: application/json' -d '{}'",
                                  kAlice);
    ASSERT_TRUE(made.is_object() && made.as_object().contains("id")) << bj::serialize(made);
    contexts.push_back(std::string(made.at("id").as_string()));
    const std::string warm =
        server_.curl("-m 120 -X POST " + server_.url("/e2b/sandbox/execute") + addressed(49999) +
                         " -H 'Content-Type: application/json' -d "
                         "'{\"code\": \"1\", \"context_id\": \"" +
                         contexts.back() + "\"}'",
                     kAlice);
    ASSERT_NE(warm.find("end_of_execution"), std::string::npos) << warm.substr(0, 300);
  }
  server_.curl("-X POST '" + server_.base() +
                   "/containers/bob-e2b/tools/bash_code_execution' -d "
                   "'{\"command\": \"true\"}'",
               kBob);
  const size_t fds_before = settled_descriptors();
  const double rss_before = rss_mib(server_.pid());
  // Each display is a JSON of two million numbers (about 16 MB as text).
  const std::string code =
      "from IPython.display import display, JSON\\nv = {'v': list(range(2000000))}\\nfor i in range(100): "
      "display(JSON(v))";
  OtherOwner bob(server_);
  std::vector<int> clients;
  for (const auto& context : contexts) {
    const std::string body = "{\"code\": \"" + code + "\"" +
                             (context.empty() ? std::string() : ", \"context_id\": \"" + context + "\"") +
                             "}";
    const std::string request =
        "POST /e2b/sandbox/execute HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + kAlice +
        "\r\nE2b-Sandbox-Id: " + sandbox_ +
        "\r\nE2b-Sandbox-Port: 49999\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    int small = 4096;  // a client that reads nothing holds little in its own buffer
    const int fd = connect_to_server(SO_RCVBUF, &small, sizeof small);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    clients.push_back(fd);
  }
  // The cells run and stop at what their clients hold back; the memory they take
  // meanwhile stays near what a frame and two lines cost (about 100 MB for each client
  // here; with a cell's outputs kept as they came, over 300 MB each).
  double peak = 0;
  for (int i = 0; i < 200; ++i) {
    peak = std::max(peak, rss_mib(server_.pid()) - rss_before);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_LT(peak, 600.0) << "MiB over " << rss_before;
  std::cout << "the server's memory while the clients did not read: +" << peak << " MiB over " << rss_before
            << " MiB\n";
  for (int fd : clients) close(fd);
  bob.finish();
  // Once the clients are gone their cells are stopped and their connections closed.
  EXPECT_TRUE(
      eventually([&] { return open_descriptors(server_.pid()) <= fds_before + 8; }, std::chrono::seconds(60)))
      << open_descriptors(server_.pid()) << " descriptors, from " << fds_before;
  // The kernel is free again: the next cell runs.
  const std::string next =
      server_.curl("-m 120 -X POST " + server_.url("/e2b/sandbox/execute") + addressed(49999) +
                       " -H 'Content-Type: application/json' -d '{\"code\": \"6 * 7\"}'",
                   kAlice);
  EXPECT_NE(next.find("\"text\":\"42\""), std::string::npos) << next.substr(0, 300);
  // What the cells took is given back to the kernel, not kept by the server's allocator.
  EXPECT_TRUE(eventually([&] { return rss_mib(server_.pid()) < rss_before + 96; }, std::chrono::seconds(30)))
      << "RSS " << rss_mib(server_.pid()) << " MiB, before " << rss_before << " MiB";
  std::cout << "the server's memory after the clients left: " << rss_mib(server_.pid()) << " MiB (before "
            << rss_before << " MiB)\n";
}

}  // namespace
