// Idle sandboxes benchmark, over HTTP against a real `sandboxd serve`: N containers
// (default 1,000; SANDBOXD_BENCH_IDLE=N), each with a running sandbox and its own volume
// mounted, all at once on this host. Reports host memory per sandbox (MemAvailable's
// drop), the server's RSS, loop devices, mounts and cgroups; a command's latency in the
// first container against the last; and what is left after stopping every sandbox
// (admin API) and then the server (which closes every container): no loop device, mount
// or cgroup should be. Prints figures; asserts nothing (tests/idle_sandboxes_test.cc
// checks the leftovers with a small count).
//   usage: sandboxd_idle_bench [SANDBOXD_BINARY]

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "bench_util.h"
#include "host_leftovers.h"
#include "http_client.h"

namespace fs = std::filesystem;
namespace host = sandboxd::testing::host;
using namespace sandboxd::bench;

namespace {

const char* kToken = "idle-bench-token-1";
const char* kAdminToken = "idle-bench-admin-token-1";

long meminfo_kib(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string name, unit;
  long value;
  while (in >> name >> value >> unit)
    if (name == key) return value;
  return 0;
}

long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      long v;
      in >> v;
      return v;
    }
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

bool ok_reply(const sandboxd::testing::HttpClient::Reply& reply, const std::string& expected) {
  if (reply.status != 200) return false;
  boost::system::error_code ec;
  auto value = boost::json::parse(reply.body, ec);
  return !ec && value.is_object() && value.as_object().contains("stdout") && value.at("stdout").is_string() &&
         value.at("stdout").as_string() == expected;
}

void print_host(const char* when, const fs::path& data, pid_t server) {
  std::printf("  %-34s loop devices %5d   mounts %5d (host total %6d)   cgroups %6d%s\n", when,
              host::loop_devices(data), host::mounts(data), host::mounts(), host::cgroups(data),
              server > 0 ? ("   server RSS " + std::to_string(rss_kib(server) / 1024) + " MiB").c_str() : "");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string binary = argc > 1 ? argv[1] : SANDBOXD_PATH;
  const int n = env_int("SANDBOXD_BENCH_IDLE", 1000);
  std::string pattern = (fs::current_path() / "bench-idle-XXXXXX").string();
  const fs::path dir = mkdtemp(pattern.data());
  const fs::path data = dir / "data", log = dir / "server.log";
  std::ofstream(dir / "config.yaml") << "server:\n  listen: \"127.0.0.1:0\"\n  dataDir: \"" << data.string()
                                     << "\"\n"
                                     << "auth:\n  tokens:\n    - { token: " << kToken
                                     << ", owner: bench }\n  adminToken: \"" << kAdminToken << "\"\n"
                                     << "quotas: { runningSandboxesPerOwner: 0, containersPerOwner: 0 }\n"
                                     << "external: { opensandbox: { sessionTTLSeconds: 86400 } }\n";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::string config = (dir / "config.yaml").string();
  char* args[] = {const_cast<char*>(binary.c_str()), const_cast<char*>("serve"),
                  const_cast<char*>("--config"), config.data(), nullptr};
  pid_t server = -1;
  posix_spawn(&server, args[0], &actions, nullptr, args, environ);
  int port = 0;
  std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
  for (int i = 0; i < 500 && !port; ++i) {
    std::smatch m;
    std::string text = host::slurp(log.string());
    if (std::regex_search(text, m, listening))
      port = std::stoi(m[1]);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!port) {
    std::fprintf(stderr, "server did not start:\n%s\n", host::slurp(log.string()).c_str());
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the pools fill
  std::printf(
      "sandboxd idle sandboxes benchmark: %d containers, each with a running sandbox and its volume (%ld "
      "cores)\n",
      n, sysconf(_SC_NPROCESSORS_ONLN));
  print_host("before", data, server);
  sync();
  const long avail_before = meminfo_kib("MemAvailable:");
  auto kernel_kib = [] {
    return meminfo_kib("Slab:") + meminfo_kib("KernelStack:") + meminfo_kib("PageTables:");
  };
  const long kernel_before = kernel_kib();
  const long rss_before = rss_kib(server);

  sandboxd::testing::HttpClient client(port, kToken);
  const std::string tools = "/api/gpt/v1/containers/";
  const std::string body = R"({"command":"echo ok"})";
  std::vector<double> first_calls;
  int failed = 0;
  auto started = Clock::now();
  for (int i = 0; i < n; ++i) {
    auto start = Clock::now();
    auto reply = client.post(tools + "idle-" + std::to_string(i) + "/tools/bash_code_execution", body);
    first_calls.push_back(ms_since(start));
    if (!ok_reply(reply, "ok\n") && ++failed <= 3)
      std::fprintf(stderr, "container %d: %u %s\n", i, reply.status, reply.body.c_str());
    if ((i + 1) % 100 == 0) {
      std::printf("  %d running (%.1f s)\n", i + 1, ms_since(started) / 1000);
      std::fflush(stdout);
    }
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const long avail_after = meminfo_kib("MemAvailable:");
  const long kernel_after = kernel_kib();
  const long rss_after = rss_kib(server);
  std::printf("\n%d running at once (%d failed starts)\n", n - failed, failed);
  print_host("running", data, server);
  std::printf("  host MemAvailable drop per sandbox %8.1f KiB   (bar <= 2048 KiB)\n",
              static_cast<double>(avail_before - avail_after) / n);
  // Attributable figures beside MemAvailable (which every other process on the host
  // moves too): the memory charged to this server's sandboxes' cgroups, and the
  // kernel's own growth (slab: mounts, namespaces, ext4 and loop devices; stacks;
  // page tables).
  uint64_t charged = 0;
  for (const auto& instance : host::instance_dirs(data))
    if (instance.find("/memory/") != std::string::npos || host::instance_dirs(data).size() == 1)
      charged += std::strtoull(
          host::slurp(instance + (instance.find("/memory/") != std::string::npos ? "/memory.usage_in_bytes"
                                                                                 : "/memory.current"))
              .c_str(),
          nullptr, 10);
  std::printf("  memory charged to the sandboxes' cgroups %8.1f KiB per sandbox\n",
              static_cast<double>(charged) / 1024 / n);
  std::printf("  kernel growth (Slab + KernelStack + PageTables) %8.1f KiB per sandbox\n",
              static_cast<double>(kernel_after - kernel_before) / n);
  std::printf("  server RSS %ld MiB (was %ld MiB): %.1f KiB per sandbox\n", rss_after / 1024,
              rss_before / 1024, static_cast<double>(rss_after - rss_before) / n);

  // The first container's first command (a cold start) against the last one's, and then
  // warm commands in each, alternated so that both see the same machine.
  auto head = std::vector<double>(first_calls.begin(),
                                  first_calls.begin() + std::min<size_t>(20, first_calls.size()));
  auto tail =
      std::vector<double>(first_calls.end() - std::min<size_t>(20, first_calls.size()), first_calls.end());
  std::vector<double> warm_first, warm_last;
  for (int i = 0; i < 100; ++i)
    for (auto [container, samples] : {std::pair{0, &warm_first}, std::pair{n - 1, &warm_last}}) {
      auto start = Clock::now();
      auto reply =
          client.post(tools + "idle-" + std::to_string(container) + "/tools/bash_code_execution", body);
      if (ok_reply(reply, "ok\n")) samples->push_back(ms_since(start));
    }
  Stats head_s = summarize(head), tail_s = summarize(tail), first_s = summarize(warm_first),
        last_s = summarize(warm_last);
  print_row("cold: the first 20 containers", head_s);
  print_row("cold: the last 20 containers", tail_s);
  print_row("warm echo ok in the first container", first_s);
  print_row("warm echo ok in the last container", last_s);
  std::printf("  last / first (p50): cold %.2fx, warm %.2fx   (bar: as fast)\n",
              tail_s.p50_ms / head_s.p50_ms, last_s.p50_ms / first_s.p50_ms);

  // Stop every sandbox (admin API), then the server (every container closed).
  sandboxd::testing::HttpClient admin(port, kAdminToken);
  auto stop_start = Clock::now();
  for (int i = 0; i < n; ++i) admin.post("/admin/sandboxes/idle-" + std::to_string(i) + "/stop", "");
  std::printf("\nstopped %d sandboxes in %.1f s\n", n, ms_since(stop_start) / 1000);
  print_host("sandboxes stopped (volumes open)", data, server);
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  print_host("server stopped", data, -1);
  const bool clean = host::loop_devices(data) == 0 && host::mounts(data) == 0 && host::cgroups(data) == 0 &&
                     host::instance_dirs(data).empty();
  std::printf("  left behind: %s\n",
              clean ? "nothing (no loop device, mount or cgroup)" : "SOMETHING (see above)");
  std::error_code ec;
  fs::remove_all(dir, ec);
  return 0;
}
