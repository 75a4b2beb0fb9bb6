// Load: 200 concurrent clients for 30 s (SANDBOXD_LOAD_SECONDS to change it) mixing
// executions, editor calls, uploads, listings and metadata reads against one server
// with a small execution capacity. Every answer must be a success or a documented
// refusal (429/503 with Retry-After); the server must not crash; its file descriptors
// and memory must stay within the bounds stated below.

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "eventually.h"
#include "http_client.h"
#include "process_stats.h"
#include "server_harness.h"

using namespace sandboxd::testing;

namespace {

constexpr int kClients = 200;
// Stated bounds: descriptors at most one per client connection plus this many (sandbox
// control sockets, pipes, the database, logs, the listening socket...); memory growth
// over the run at most this much.
constexpr long kSpareDescriptors = 400;
constexpr long kMaxRssGrowthKib = 256 * 1024;

TEST(Load, TwoHundredClientsGetOnlySuccessesOrDocumentedRefusals) {
  ServerProcess server("capacity:\n  maxConcurrentExecutions: 8\n  queueTimeoutSec: 1\n  retryAfterSec: 1\n");
  const char* env = std::getenv("SANDBOXD_LOAD_SECONDS");
  const int seconds = env ? std::max(1, std::atoi(env)) : 30;
  const std::string base = "/api/gpt/v1";

  // Warm up: the containers exist and their sandboxes run before the baseline.
  for (const char* token : {"secret-alice", "secret-bob-x"}) {  // each owner has its own containers
    HttpClient warm(server.port(), token);
    for (int c = 0; c < 20; ++c)
      ASSERT_EQ(warm.post(base + "/containers/load-" + std::to_string(c) + "/tools/bash_code_execution",
                          R"({"command":"true"})")
                    .status,
                200u);
  }
  const long fds_before = count_fds(server.pid());
  const long rss_before = rss_kib(server.pid());

  std::mutex mutex;
  std::map<unsigned, long> statuses;
  std::vector<std::string> problems;
  std::atomic<long> requests{0};
  std::atomic<long> max_fds{0};
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      try {
        HttpClient client(server.port(), t % 2 ? "secret-alice" : "secret-bob-x");
        const std::string container = "load-" + std::to_string(t % 20);
        const std::string tools = base + "/containers/" + container + "/tools/";
        for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
          HttpClient::Reply reply;
          switch ((t + i) % 5) {
            case 0:
              reply = client.post(tools + "bash_code_execution",
                                  R"({"command":"echo $((6*7)) > /dev/null; true"})");
              break;
            case 1:
              reply = client.post(
                  tools + "text_editor_code_execution",
                  R"({"command":"create","path":"n)" + std::to_string(t) + R"(.txt","file_text":"x\ny\n"})");
              break;
            case 2:
              reply = client.put(base + "/files/in/" + std::to_string(t) + ".bin?scope_id=" + container,
                                 std::string(4096, static_cast<char>('a' + t % 26)));
              break;
            case 3:
              reply = client.get(base + "/files?scope_id=" + container + "&limit=50");
              break;
            default:
              reply = client.get(base + "/containers/" + container);
          }
          ++requests;
          std::lock_guard lock(mutex);
          ++statuses[reply.status];
          const bool refused = reply.status == 429 || reply.status == 503;
          if (reply.status != 200 && !refused && problems.size() < 20)
            problems.push_back(std::to_string(reply.status) + ": " + reply.body.substr(0, 200));
          if (refused && reply.retry_after.empty() && problems.size() < 20)
            problems.push_back(std::to_string(reply.status) + " without Retry-After");
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex);
        problems.push_back(std::string("client failed: ") + e.what());
      }
    });
  }
  // Sample the server's descriptors while the clients run.
  while (std::chrono::steady_clock::now() < until) {
    max_fds = std::max(max_fds.load(), count_fds(server.pid()));
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  for (auto& c : clients) c.join();

  for (const auto& p : problems) ADD_FAILURE() << p;
  std::string summary;
  for (const auto& [status, n] : statuses) summary += " " + std::to_string(status) + "x" + std::to_string(n);
  EXPECT_GT(statuses[200], 0) << summary;
  EXPECT_EQ(waitpid(server.pid(), nullptr, WNOHANG), 0) << "the server is alive";
  EXPECT_EQ(server.status(server.url("/health")), 200);
  EXPECT_LE(max_fds.load(), fds_before + kClients + kSpareDescriptors) << "fds before " << fds_before;
  const long rss_after = rss_kib(server.pid());
  EXPECT_LE(rss_after - rss_before, kMaxRssGrowthKib)
      << "RSS " << rss_before << " -> " << rss_after << " KiB";
  // Once the clients are gone, their connections are too.
  EXPECT_TRUE(eventually([&] { return count_fds(server.pid()) <= fds_before + kSpareDescriptors; }))
      << count_fds(server.pid()) << " descriptors, " << fds_before << " before";
  std::printf("load: %ld requests in %d s:%s; fds %ld before, %ld at most; RSS %ld -> %ld KiB\n",
              requests.load(), seconds, summary.c_str(), fds_before, max_fds.load(), rss_before, rss_after);
}

}  // namespace
