// Server benchmark, over HTTP on loopback against a real `sandboxd serve`: cold
// executions (from the pre-started pools, and a burst that empties them) and warm ones,
// throughput with 32 connections (wrk; only checked 200 replies count), a 1 GiB upload and download
// against cp on the same disk (with the server's RSS growth), listing 10,000 files, and
// the server's overhead per tool round trip in /messages (scripted upstream model), and the
// server's instructions per call through MCP and /messages against the direct endpoints.
// Prints figures, the bars (docs/benchmarks.md) and ratios; asserts nothing.
//   usage: sandboxd_server_bench [SANDBOXD_BINARY]

#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "bench_util.h"
#include "http_client.h"
#include "instruction_stepper.h"
#include "scripted_upstream.h"
#include "tcp_echo.h"

namespace fs = std::filesystem;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using namespace sandboxd::bench;

namespace {

const char* kToken = "bench-token-123";
const char* kAdminToken = "bench-admin-token-0123456789";

struct Server {
  pid_t pid = -1;
  int port = 0;
  fs::path dir, log;
};

// `wrapper`: a command line the server runs under (valgrind), which starts it slowly.
Server start_server(const std::string& binary, const fs::path& dir, const std::string& extra_yaml,
                    const std::vector<std::string>& wrapper = {}) {
  Server s;
  s.dir = dir;
  s.log = dir / "server.log";
  std::ofstream(dir / "config.yaml") << "server:\n  listen: \"127.0.0.1:0\"\n  dataDir: \""
                                     << (dir / "data").string()
                                     << "\"\n  maxUploadSize: 2Gi\nauth:\n  tokens:\n    - { token: "
                                     << kToken << ", owner: bench }\n  adminToken: " << kAdminToken << "\n"
                                     << "workspace:\n  downloads:\n    uploadedResources: true\n"
                                     << extra_yaml;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, s.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::string config = (dir / "config.yaml").string();
  std::vector<std::string> words = wrapper;
  words.insert(words.end(), {binary, "serve", "--config", config});
  std::vector<char*> argv;
  for (auto& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  posix_spawn(&s.pid, argv[0], &actions, nullptr, argv.data(), environ);
  std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
  for (int i = 0; i < (wrapper.empty() ? 500 : 6000) && !s.port; ++i) {
    std::smatch m;
    std::string text = read_all(s.log);
    if (std::regex_search(text, m, listening))
      s.port = std::stoi(m[1]);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return s;
}

long rss_kib(pid_t pid, const char* field = "VmRSS:") {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == field) {
      long v;
      in >> v;
      return v;
    }
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

// A keep-alive client with the bench's token; the benchmark reads bodies only.
class Client {
 public:
  explicit Client(int port) : http_(port, kToken) {}
  std::string post(const std::string& target, const std::string& body) {
    return http_.post(target, body).body;
  }
  sandboxd::testing::HttpClient::Reply post_reply(const std::string& target, const std::string& body) {
    return http_.post(target, body);
  }
  std::string get(const std::string& target) { return http_.get(target).body; }

 private:
  sandboxd::testing::HttpClient http_;
};

// GET `target` and write the body to `path` with large reads and writes (curl writes
// its output in 16 KiB pieces, which would measure curl rather than the server).
// Returns the body size.
uint64_t download_to_file(int port, const std::string& target, const fs::path& path) {
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  std::string request = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + kToken +
                        "\r\nConnection: close\r\n\r\n";
  asio::write(socket, asio::buffer(request));
  std::vector<char> buf(4 << 20);
  std::string head;
  size_t header_end = std::string::npos;
  size_t n = 0;
  while (header_end == std::string::npos) {
    n = socket.read_some(asio::buffer(buf));
    head.append(buf.data(), n);
    header_end = head.find("\r\n\r\n");
  }
  FILE* out = std::fopen(path.c_str(), "wb");
  std::setvbuf(out, nullptr, _IONBF, 0);
  uint64_t total = head.size() - header_end - 4;
  std::fwrite(head.data() + header_end + 4, 1, total, out);
  boost::system::error_code ec;
  while ((n = socket.read_some(asio::buffer(buf), ec)) > 0 || !ec) {
    std::fwrite(buf.data(), 1, n, out);
    total += n;
    if (ec) break;
  }
  std::fclose(out);
  return total;
}

// User + system CPU time of a process so far.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A bash call counts as executed when its reply is a 200 whose JSON says the command
// exited 0 having printed `expected_stdout`.
bool executed(const sandboxd::testing::HttpClient::Reply& reply, const std::string& expected_stdout) {
  if (reply.status != 200) return false;
  boost::system::error_code ec;
  auto value = boost::json::parse(reply.body, ec);
  if (ec || !value.is_object()) return false;
  const auto& object = value.as_object();
  const auto* out = object.if_contains("stdout");
  const auto* code = object.if_contains("return_code");
  return out && out->is_string() && out->as_string() == expected_stdout && code && code->is_int64() &&
         code->as_int64() == 0;
}

// Nanoseconds a task has run on a CPU (user + system), from its schedstat; 0 if gone.
uint64_t schedstat_ns(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/schedstat");
  uint64_t ns = 0;
  in >> ns;
  return ns;
}

// User and system CPU seconds of a whole process (every thread, those gone included).
std::pair<double, double> user_system_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty()) return {0, 0};
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  return {static_cast<double>(utime) / tick, static_cast<double>(stime) / tick};
}

std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t child; in >> child;) out.push_back(child);
  return out;
}

// The host pid of the PID 1 of `container`'s sandbox, from the admin listing.
pid_t pid1_of(int port, const std::string& container) {
  sandboxd::testing::HttpClient admin(port, kAdminToken);
  boost::system::error_code ec;
  auto listing = boost::json::parse(admin.get("/admin/sandboxes").body, ec);
  if (ec || !listing.is_object() || !listing.as_object().contains("data")) return -1;
  for (const auto& entry : listing.at("data").as_array())
    if (entry.at("container").as_string() == container)
      return static_cast<pid_t>(entry.at("pid").to_number<int64_t>());
  return -1;
}

// What `command` prints, whole.
std::string output_of(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  std::string out;
  char buf[4096];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  if (p) pclose(p);
  return out;
}

double seconds_of(const std::function<void()>& f) {
  auto start = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A server under callgrind whose counts are read phase by phase: each dump holds what
// the server did since the one before (a dump zeroes the counters).
struct TracedServer {
  Server server;
  fs::path dir;
  std::vector<fs::path> dumps_seen;
};

TracedServer start_traced_server(const std::string& binary, const fs::path& dir,
                                 const std::string& extra_yaml) {
  TracedServer traced;
  traced.dir = dir;
  fs::create_directories(dir);
  traced.server = start_server(binary, dir, extra_yaml,
                               {"/usr/bin/valgrind", "--tool=callgrind", "--trace-children=no",
                                "--log-file=" + (dir / "valgrind.log").string(),
                                "--callgrind-out-file=" + (dir / "callgrind.out").string()});
  return traced;
}

// The instructions of every thread of the server since the last dump (or zeroing), or
// -1 when no dump came.
double dump_instructions(TracedServer& traced) {
  output_of("/usr/bin/callgrind_control --dump " + std::to_string(traced.server.pid) + " 2>&1");
  for (const auto& entry : fs::directory_iterator(traced.dir)) {
    const fs::path path = entry.path();
    if (!path.filename().string().starts_with("callgrind.out") ||
        std::find(traced.dumps_seen.begin(), traced.dumps_seen.end(), path) != traced.dumps_seen.end())
      continue;
    traced.dumps_seen.push_back(path);
    std::smatch m;
    const std::string dumped = read_all(path);
    if (std::regex_search(dumped, m, std::regex("\ntotals: ([0-9]+)"))) return std::stod(m[1]);
  }
  return -1;
}

// Under valgrind the server may not finish its shutdown: a minute, then SIGKILL (its
// sandboxes end with their control sockets; their mounts below `dir` are let go here).
void stop_server_under_valgrind(pid_t pid, const fs::path& dir) {
  kill(pid, SIGTERM);
  bool exited = false;
  for (int i = 0; i < 600 && !exited; ++i) {
    exited = waitpid(pid, nullptr, WNOHANG) == pid;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (exited) return;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::vector<std::string> left;
  std::ifstream mounts("/proc/self/mountinfo");
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream fields(line);
    std::string skip, point;
    fields >> skip >> skip >> skip >> skip >> point;
    if (point.starts_with(dir.string())) left.push_back(point);
  }
  std::sort(left.rbegin(), left.rend());  // the deepest first
  for (const auto& point : left) umount2(point.c_str(), MNT_DETACH);
}

void stop_traced_server(TracedServer& traced) { stop_server_under_valgrind(traced.server.pid, traced.dir); }

// An MCP session on `client` (initialize, then notifications/initialized): the headers
// each call in it sends.
sandboxd::testing::HttpClient::Headers open_mcp_session(sandboxd::testing::HttpClient& client) {
  using Headers = sandboxd::testing::HttpClient::Headers;
  const Headers accept{{"Accept", "application/json, text/event-stream"}};
  auto init =
      client.post("/mcp",
                  R"({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25",)"
                  R"("capabilities":{},"clientInfo":{"name":"bench","version":"1"}}})",
                  "application/json", accept);
  Headers in_session = accept;
  in_session.emplace_back("Mcp-Session-Id", init.header("Mcp-Session-Id"));
  in_session.emplace_back("MCP-Protocol-Version", "2025-11-25");
  client.post("/mcp", R"({"jsonrpc":"2.0","method":"notifications/initialized"})", "application/json",
              in_session);
  return in_session;
}

}  // namespace

int main(int argc, char** argv) {
  std::string binary = argc > 1 ? argv[1] : SANDBOXD_PATH;
  std::string pattern = (fs::current_path() / "bench-server-XXXXXX").string();  // same disk as the build
  fs::path dir = mkdtemp(pattern.data());
  // The scripted upstream model, in this process, answers at once.
  sandboxd::testing::ScriptedUpstream upstream;
  // An allow-listed service for the relay benchmark, in this process.
  sandboxd::testing::TcpEcho echo;
  Server server =
      start_server(binary, dir,
                   "model:\n  baseUrl: \"" + upstream.base_url() +
                       "\"\n  maxToolIterations: 100\n"
                       "external:\n  opensandbox:\n    codeExecution:\n      internal:\n        services:\n"
                       "          - { name: echo, host: 127.0.0.1, port: " +
                       std::to_string(echo.port()) + " }\n");
  if (!server.port) {
    std::fprintf(stderr, "server did not start:\n%s\n", read_all(server.log).c_str());
    return 1;
  }
  std::printf("sandboxd server benchmark (HTTP on loopback, %ld cores)\n", sysconf(_SC_NPROCESSORS_ONLN));
  const std::string tools = "/api/gpt/v1/containers/";
  const std::string true_body = R"({"command":"true"})";
  // Every timed execution runs `echo ok` and its reply is checked (a fast error reply
  // must not count as a fast execution).
  const std::string ok_body = R"({"command":"echo ok"})";
  Client client(server.port);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // let the spare volumes get formatted

  // One new container's execution, timed; failed ones are counted and left out.
  int failed_cold = 0;
  auto cold_once = [&](const std::string& container, std::vector<double>& samples) {
    auto start = Clock::now();
    auto reply = client.post_reply(tools + container + "/tools/bash_code_execution", ok_body);
    double ms = ms_since(start);
    if (executed(reply, "ok\n")) {
      samples.push_back(ms);
    } else {
      ++failed_cold;
      std::fprintf(stderr, "cold %s: %u %s\n", container.c_str(), reply.status, reply.body.c_str());
    }
  };
  // Cold from the pools: a new container each time, 40 ms apart so that the spare
  // volume and the pre-started sandbox it takes are replaced before the next one.
  std::vector<double> cold_pooled;
  for (int i = 0; i < 40; ++i) {
    cold_once("cold-" + std::to_string(i), cold_pooled);
    std::this_thread::sleep_for(std::chrono::milliseconds(40));  // the pools refill
  }
  // Cold in a burst: 50 new containers back to back, no pause, so that after the first
  // few the pools are empty and a container pays for its own volume and sandbox.
  constexpr int kBurst = 50;
  std::vector<double> cold_burst;
  auto burst_start = Clock::now();
  for (int i = 0; i < kBurst; ++i) cold_once("burst-" + std::to_string(i), cold_burst);
  const double burst_ms = ms_since(burst_start);
  // Warm: the same container.
  std::vector<double> warm;
  int failed_warm = 0;
  client.post(tools + "warm/tools/bash_code_execution", ok_body);
  for (int i = 0; i < 1000; ++i) {
    auto start = Clock::now();
    auto reply = client.post_reply(tools + "warm/tools/bash_code_execution", ok_body);
    double ms = ms_since(start);
    if (executed(reply, "ok\n"))
      warm.push_back(ms);
    else if (++failed_warm <= 3)
      std::fprintf(stderr, "warm: %u %s\n", reply.status, reply.body.c_str());
  }
  Stats cold_s = summarize(cold_pooled), burst_s = summarize(cold_burst), warm_s = summarize(warm);
  std::printf("\nexecutions over HTTP (`echo ok`, each reply checked: 200, stdout \"ok\\n\", exit 0)\n");
  print_row("cold, pooled: new container 40 ms apart", cold_s);
  print_row("cold, burst: 50 new containers, no pause", burst_s);
  std::printf("  %-44s %8.1f ms for %d containers = %.1f containers/s\n", "cold, burst: the whole burst",
              burst_ms, kBurst, kBurst * 1000 / burst_ms);
  print_row("warm: echo ok in a running sandbox", warm_s);
  std::printf("  failed replies (not counted above): cold %d of %d, warm %d of 1000\n", failed_cold,
              40 + kBurst, failed_warm);
  std::printf(
      "  published peers: Daytona create->first command 110 ms (%.0fx ours), E2B 440 ms (%.0fx ours)\n",
      110 / cold_s.p50_ms, 440 / cold_s.p50_ms);

  // Peers on this machine, now: the same bash spawned bare (what a warm call costs at
  // the least), bubblewrap with the same mounts running it (a cold start at the least),
  // and Docker (scripts/bench.sh provides an engine and a minimal imported image).
  const std::string bash = sandbox_bash();
  const std::vector<std::string> bare_echo = {bash, "-c", "echo ok"};
  fs::path peer_dirs = dir / "peer";
  for (const char* sub : {"workspace", "uploads", "outputs"}) fs::create_directories(peer_dirs / sub);
  Stats bare_s = time_command(bare_echo, 1000);
  bool bwrap_ok = false;
  Stats bwrap_s =
      time_command(bwrap_argv((peer_dirs / "workspace").string(), (peer_dirs / "uploads").string(),
                              (peer_dirs / "outputs").string(), bare_echo),
                   90, &bwrap_ok);
  DockerPeer docker = measure_docker(20, 50);
  std::printf("\npeers, same machine, same run (each runs %s -c 'echo ok' as the sandbox does)\n",
              bash.c_str());
  print_row("bare spawn of the same bash", bare_s);
  if (bwrap_ok)
    print_row("bwrap --unshare-all, same mounts", bwrap_s);
  else
    std::printf("  bwrap: not usable here\n");
  if (docker.ok) {
    print_row("docker run --rm --network none IMAGE true", docker.run);
    print_row("docker exec CONTAINER true", docker.exec);
  } else {
    std::printf("  docker: not measured (scripts/bench.sh provides the engine and image)\n");
  }
  std::printf("  ratios (p50):\n");
  std::printf("    warm over HTTP / bare spawn               %6.2fx   (bar <= 1.5x)\n",
              warm_s.p50_ms / bare_s.p50_ms);
  if (bwrap_ok) {
    std::printf(
        "    cold, pooled / bwrap                      %6.2fx   (bar <= 1.3x; p99 %.2fx, bar <= 3x)\n",
        cold_s.p50_ms / bwrap_s.p50_ms, cold_s.p99_ms / bwrap_s.p99_ms);
    std::printf(
        "    cold, burst of %d / bwrap                 %6.2fx   (bar <= 1.3x; p99 %.2fx, bar <= 3x)\n",
        kBurst, burst_s.p50_ms / bwrap_s.p50_ms, burst_s.p99_ms / bwrap_s.p99_ms);
  }
  if (docker.ok) {
    std::printf(
        "    docker run / sandboxd cold, pooled        %6.2fx   (how many times faster sandboxd is)\n",
        docker.run.p50_ms / cold_s.p50_ms);
    std::printf("    docker run / sandboxd cold, burst         %6.2fx\n", docker.run.p50_ms / burst_s.p50_ms);
    std::printf("    docker exec / sandboxd warm               %6.2fx\n", docker.exec.p50_ms / warm_s.p50_ms);
  }

  // SANDBOXD_BENCH_ONLY=messages measures the executions above and /messages only;
  // =relay adds the relay; =throughput and =transfer measure the executions and that.
  const char* only_env = std::getenv("SANDBOXD_BENCH_ONLY");
  const std::string only = only_env ? only_env : "";
  const bool everything = only.empty();

  if (everything || only == "python") {
    // The persistent Python: a code_execution cell of `x + 1` in a warm kernel over HTTP,
    // against the same expression in a new python3 process spawned bare (what a call
    // would cost without a kernel). Every reply is checked: stdout "2\n", return_code 0.
    const std::string cell_path = tools + "python/tools/code_execution";
    client.post(cell_path, R"({"code":"x = 1"})");  // starts the sandbox and the kernel
    std::vector<double> cells;
    int failed_cells = 0;
    for (int i = 0; i < 300; ++i) {
      auto start = Clock::now();
      auto reply = client.post_reply(cell_path, R"({"code":"x + 1"})");
      double ms = ms_since(start);
      if (executed(reply, "2\n"))
        cells.push_back(ms);
      else if (++failed_cells <= 3)
        std::fprintf(stderr, "python: %u %s\n", reply.status, reply.body.c_str());
    }
    Stats cell_s = summarize(cells);
    Stats python_s = time_command({"/usr/bin/python3", "-c", "x=1; print(x+1)"}, 100);
    std::printf("\npersistent Python (code_execution)\n");
    print_row("warm kernel over HTTP: x + 1", cell_s);
    print_row("bare spawn of python3 -c 'x=1; print(x+1)'", python_s);
    if (failed_cells) std::printf("  (%d failed cells left out)\n", failed_cells);
    std::printf("  ratio (p50) warm kernel / bare python3     %6.2fx   (goal <= 0.5x)\n",
                cell_s.p50_ms / python_s.p50_ms);
  }

  if (everything || only == "messages" || only == "relay") {
    // /messages: one turn with K tool round trips against one with none; the difference
    // per round trip is what a round trip costs: the tool loop, one upstream call (HTTP
    // to the scripted model, which answers at once), the JSON on both sides, and the
    // tool itself. With the editor viewing a small file the tool costs next to nothing,
    // so that round trip is the server's own overhead; with bash `true` it includes
    // running a command in the sandbox.
    constexpr int kRounds = 5;
    using Up = sandboxd::testing::ScriptedUpstream;
    const std::string turn_body =
        R"({"model":"default","max_tokens":64,"container":"loop","messages":[{"role":"user","content":"go"}],)"
        R"("tools":[{"name":"code_execution","type":"code_execution_v1"}]})";
    auto one_turn = [&](int rounds, const std::string& tool, const boost::json::object& input) {
      static int n = 0;
      ++n;
      for (int r = 0; r < rounds; ++r)
        upstream.push_message(
            Up::message({Up::tool_use("toolu_b" + std::to_string(n) + "_" + std::to_string(r), tool, input)},
                        "tool_use"));
      upstream.push_message(Up::message({Up::text_block("done")}, "end_turn"));
      auto start = Clock::now();
      std::string out = client.post("/api/gpt/v1/messages", turn_body);
      double ms = ms_since(start);
      if (out.find("\"end_turn\"") == std::string::npos) std::fprintf(stderr, "messages: %s\n", out.c_str());
      return ms;
    };
    const boost::json::object bash_true{{"command", "true"}};
    const boost::json::object view{{"command", "view"}, {"path", "small.txt"}};
    one_turn(1, "text_editor_code_execution",
             {{"command", "create"}, {"path", "small.txt"}, {"file_text", "one\ntwo\n"}});
    one_turn(1, "bash_code_execution", bash_true);  // the container's sandbox starts here
    std::vector<double> plain, edited, bashed;
    for (int i = 0; i < 60; ++i) {
      plain.push_back(one_turn(0, "", {}));
      edited.push_back(one_turn(kRounds, "text_editor_code_execution", view));
      bashed.push_back(one_turn(kRounds, "bash_code_execution", bash_true));
    }
    Stats plain_s = summarize(plain), edited_s = summarize(edited), bashed_s = summarize(bashed);
    std::printf("\n/messages with a scripted upstream that answers at once\n");
    print_row("turn without tools (1 upstream call)", plain_s);
    print_row("turn with 5 editor views (6 calls)", edited_s);
    print_row("turn with 5 bash `true` (6 calls)", bashed_s);
    std::printf("  per tool round trip: %.3f ms with the editor = the server's overhead (bar <= 3 ms)\n",
                (edited_s.p50_ms - plain_s.p50_ms) / kRounds);
    std::printf(
        "                       %.3f ms with bash `true` (a command in the sandbox; direct warm echo ok: "
        "%.3f ms)\n",
        (bashed_s.p50_ms - plain_s.p50_ms) / kRounds, warm_s.p50_ms);
    std::printf("  published per-call round trip of hosted sandboxes ~70 ms: %.0fx ours with bash\n",
                70 / ((bashed_s.p50_ms - plain_s.p50_ms) / kRounds));
  }  // messages

  if (everything || only == "mcp") {
    // MCP: a warm `true` through tools/call (JSON-RPC on the Streamable HTTP transport, in
    // a session) against the same command through POST .../tools/bash_code_execution, in
    // one container, the two alternating on connections of their own.
    using Headers = sandboxd::testing::HttpClient::Headers;
    sandboxd::testing::HttpClient mcp_client(server.port, kToken), direct_client(server.port, kToken);
    const Headers in_session = open_mcp_session(mcp_client);
    const std::string call =
        R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash_code_execution",)"
        R"("arguments":{"command":"true","container":"mcp-bench"}}})";
    const std::string direct_target = tools + "mcp-bench/tools/bash_code_execution";
    auto ran = [](const sandboxd::testing::HttpClient::Reply& reply) {
      return reply.status == 200 && reply.body.find("\"return_code\":0") != std::string::npos &&
             reply.body.find("\"isError\"") == std::string::npos;
    };
    // 2026-07-28 (stateless: no session, the headers mirror the body), the same call; and
    // made a task (the client declares the Tasks extension): tools/call answered with the
    // task, then tasks/get until it has completed (start + result).
    sandboxd::testing::HttpClient modern_client(server.port, kToken), task_client(server.port, kToken);
    auto modern_meta = [](bool tasks) {
      return std::string(R"("_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",)"
                         R"("io.modelcontextprotocol/clientInfo":{"name":"bench","version":"0"},)"
                         R"("io.modelcontextprotocol/clientCapabilities":)") +
             (tasks ? R"({"extensions":{"io.modelcontextprotocol/tasks":{}}}})" : "{}}");
    };
    auto modern_headers = [](std::string method, std::string name) {
      return Headers{{"Accept", "application/json, text/event-stream"},
                     {"MCP-Protocol-Version", "2026-07-28"},
                     {"Mcp-Method", method},
                     {"Mcp-Name", name}};
    };
    const std::string modern_call =
        R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash_code_execution",)"
        R"("arguments":{"command":"true","container":"mcp-bench"},)" +
        modern_meta(false) + "}}";
    const std::string task_call =
        R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash_code_execution",)"
        R"("arguments":{"command":"true","container":"mcp-bench"},)" +
        modern_meta(true) + "}}";
    const Headers modern_call_headers = modern_headers("tools/call", "bash_code_execution");
    // A task started and asked for until it completed: whether it ran `true` well.
    auto run_task = [&]() -> bool {
      auto started = task_client.post("/mcp", task_call, "application/json", modern_call_headers);
      const auto at = started.body.find("\"taskId\":\"");
      if (started.status != 200 || at == std::string::npos) {
        std::fprintf(stderr, "task: %u %s\n", started.status, started.body.c_str());
        return false;
      }
      const auto begin = at + 10;
      const std::string id = started.body.substr(begin, started.body.find('"', begin) - begin);
      const std::string get = R"({"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":")" + id +
                              "\"," + modern_meta(true) + "}}";
      const Headers get_headers = modern_headers("tasks/get", id);
      for (int poll = 0; poll < 100000; ++poll) {
        auto got = task_client.post("/mcp", get, "application/json", get_headers);
        if (got.status != 200) return false;
        if (got.body.find("\"status\":\"working\"") != std::string::npos) continue;
        return got.body.find("\"status\":\"completed\"") != std::string::npos &&
               got.body.find("\"return_code\":0") != std::string::npos;
      }
      return false;
    };
    for (int i = 0; i < 20; ++i) {  // the sandbox starts; every path warms up
      direct_client.post(direct_target, true_body);
      mcp_client.post("/mcp", call, "application/json", in_session);
      modern_client.post("/mcp", modern_call, "application/json", modern_call_headers);
      run_task();
    }
    std::vector<double> direct_ms, mcp_ms, modern_ms, task_ms;
    int failed_mcp = 0, failed_direct = 0, failed_modern = 0, failed_task = 0;
    for (int i = 0; i < 1000; ++i) {
      auto modern_start = Clock::now();
      auto via_modern = modern_client.post("/mcp", modern_call, "application/json", modern_call_headers);
      const double modern_took = ms_since(modern_start);
      if (ran(via_modern))
        modern_ms.push_back(modern_took);
      else if (++failed_modern <= 3)
        std::fprintf(stderr, "mcp 2026-07-28: %u %s\n", via_modern.status, via_modern.body.c_str());
      auto task_start = Clock::now();
      const bool task_ran = run_task();
      const double task_took = ms_since(task_start);
      if (task_ran)
        task_ms.push_back(task_took);
      else
        ++failed_task;
      auto start = Clock::now();
      auto direct = direct_client.post(direct_target, true_body);
      double ms = ms_since(start);
      if (ran(direct))
        direct_ms.push_back(ms);
      else if (++failed_direct <= 3)
        std::fprintf(stderr, "direct: %u %s\n", direct.status, direct.body.c_str());
      start = Clock::now();
      auto via_mcp = mcp_client.post("/mcp", call, "application/json", in_session);
      ms = ms_since(start);
      if (ran(via_mcp))
        mcp_ms.push_back(ms);
      else if (++failed_mcp <= 3)
        std::fprintf(stderr, "mcp: %u %s\n", via_mcp.status, via_mcp.body.c_str());
    }
    Stats direct_s = summarize(direct_ms), mcp_s = summarize(mcp_ms), modern_s = summarize(modern_ms),
          task_s = summarize(task_ms);
    std::printf("\nMCP tools/call against the HTTP tool endpoint (warm `true`, alternating, 1000 each)\n");
    print_row("POST .../tools/bash_code_execution", direct_s);
    print_row("MCP tools/call bash_code_execution", mcp_s);
    print_row("MCP 2026-07-28 tools/call", modern_s);
    print_row("MCP 2026-07-28 task (start + result)", task_s);
    std::printf("  failed replies (not counted above): direct %d, mcp %d, 2026-07-28 %d, task %d\n",
                failed_direct, failed_mcp, failed_modern, failed_task);
    std::printf("  ratio (p50): MCP / HTTP tool endpoint      %6.2fx   (goal <= 1.2x)\n",
                mcp_s.p50_ms / direct_s.p50_ms);
    std::printf("  ratio (p50): 2026-07-28 / HTTP endpoint    %6.2fx   (goal <= 1.2x)\n",
                modern_s.p50_ms / direct_s.p50_ms);
    std::printf("  ratio (p50): task / HTTP endpoint          %6.2fx\n", task_s.p50_ms / direct_s.p50_ms);
  }  // mcp

  if (everything || only == "surfaces") {
    // The server's user-space instructions per call through each surface against the
    // same work through its direct HTTP endpoint, counted by callgrind in a server of
    // its own (counts do not depend on the machine's load): an MCP tools/call of `true`
    // against POST .../tools/bash_code_execution, and a /messages tool round trip with
    // the editor viewing a small file (a turn with 5 views less a turn with none, over
    // 5: the loop, one upstream call, the JSON both ways) against POST
    // .../tools/text_editor_code_execution viewing the same file (and the same round trip
    // with bash `true` against the direct `true`).
    constexpr int kCalls = 100, kTurns = 20, kRounds = 5;
    using Up = sandboxd::testing::ScriptedUpstream;
    using Headers = sandboxd::testing::HttpClient::Headers;
    if (access("/usr/bin/valgrind", X_OK) != 0 || access("/usr/bin/callgrind_control", X_OK) != 0) {
      std::printf("\nthrough each surface: valgrind is not installed (scripts/setup.sh installs it)\n");
    } else {
      TracedServer traced = start_traced_server(
          binary, dir / "surfaces",
          "model:\n  baseUrl: \"" + upstream.base_url() + "\"\n  maxToolIterations: 100\n");
      if (!traced.server.port) {
        std::printf("\nthrough each surface: the server did not start under valgrind:\n%s\n",
                    read_all(traced.dir / "valgrind.log").c_str());
      } else {
        sandboxd::testing::HttpClient direct(traced.server.port, kToken), mcp(traced.server.port, kToken);
        const std::string bash_target = tools + "loop/tools/bash_code_execution";
        const std::string editor_target = tools + "loop/tools/text_editor_code_execution";
        const std::string view_body = R"({"command":"view","path":"small.txt"})";
        const Headers in_session = open_mcp_session(mcp);
        const std::string mcp_call =
            R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash_code_execution",)"
            R"("arguments":{"command":"true","container":"loop"}}})";
        const std::string turn_body =
            R"({"model":"default","max_tokens":64,"container":"loop","messages":[{"role":"user","content":"go"}],)"
            R"("tools":[{"name":"code_execution","type":"code_execution_v1"}]})";
        int failed = 0;
        auto check = [&failed](const char* what, const sandboxd::testing::HttpClient::Reply& reply, bool ok) {
          if (!ok && ++failed <= 3)
            std::fprintf(stderr, "%s: %u %s\n", what, reply.status, reply.body.c_str());
        };
        auto direct_true = [&] {
          auto reply = direct.post(bash_target, true_body);
          check("direct", reply, executed(reply, ""));
        };
        auto mcp_true = [&] {
          auto reply = mcp.post("/mcp", mcp_call, "application/json", in_session);
          check("mcp", reply,
                reply.status == 200 && reply.body.find("\"return_code\":0") != std::string::npos &&
                    reply.body.find("\"isError\"") == std::string::npos);
        };
        bool editor_refused = false;
        auto direct_view = [&] {
          auto reply = direct.post(editor_target, view_body);
          // valgrind refuses the system call the editor opens files with (openat2), so
          // the view answers an error block here: the same block through both paths.
          check("view", reply,
                reply.status == 200 &&
                    reply.body.find("\"type\":\"text_editor_code_execution_") != std::string::npos);
          editor_refused = reply.body.find("_tool_result_error") != std::string::npos;
        };
        int turn_number = 0;
        const boost::json::object view{{"command", "view"}, {"path", "small.txt"}};
        const boost::json::object bash_true{{"command", "true"}};
        auto turn = [&](int rounds, const char* tool, const boost::json::object& input) {
          ++turn_number;
          for (int r = 0; r < rounds; ++r)
            upstream.push_message(
                Up::message({Up::tool_use("toolu_s" + std::to_string(turn_number) + "_" + std::to_string(r),
                                          tool, input)},
                            "tool_use"));
          upstream.push_message(Up::message({Up::text_block("done")}, "end_turn"));
          auto reply = direct.post("/api/gpt/v1/messages", turn_body);
          check("messages", reply,
                reply.status == 200 && reply.body.find("\"end_turn\"") != std::string::npos);
        };
        direct.post(editor_target, R"({"command":"create","path":"small.txt","file_text":"one\ntwo\n"})");
        for (int i = 0; i < 30; ++i) {  // the sandbox starts, the pools refill, every path warms up
          direct_true();
          mcp_true();
          direct_view();
          if (i % 10 == 0) turn(i % 20 == 0 ? kRounds : 0, "text_editor_code_execution", view);
          if (i % 10 == 5) turn(kRounds, "bash_code_execution", bash_true);
        }
        std::this_thread::sleep_for(std::chrono::seconds(2));
        failed = 0;
        dump_instructions(traced);  // everything before counts nowhere
        auto per_call = [&](int calls, const std::function<void()>& call) {
          for (int i = 0; i < calls; ++i) call();
          return dump_instructions(traced) / calls;
        };
        const double direct_true_i = per_call(kCalls, direct_true);
        const double mcp_true_i = per_call(kCalls, mcp_true);
        const double direct_view_i = per_call(kCalls, direct_view);
        const double plain_turn_i = per_call(kTurns, [&] { turn(0, "", {}); });
        const double view_turn_i =
            per_call(kTurns, [&] { turn(kRounds, "text_editor_code_execution", view); });
        const double bash_turn_i = per_call(kTurns, [&] { turn(kRounds, "bash_code_execution", bash_true); });
        const double round_trip_i = (view_turn_i - plain_turn_i) / kRounds;
        const double bash_round_trip_i = (bash_turn_i - plain_turn_i) / kRounds;
        if (failed || direct_true_i < 0 || mcp_true_i < 0 || direct_view_i < 0 || plain_turn_i < 0 ||
            view_turn_i < 0 || bash_turn_i < 0) {
          std::printf("\nthrough each surface: no count (%d failed calls; dumps in %s)\n", failed,
                      traced.dir.c_str());
        } else {
          std::printf("\nthe server's user-space instructions per call through each surface (callgrind)\n");
          std::printf("  MCP tools/call: %.0f instructions per call, direct %.0f   ratio %.2fx (+%.0f)\n",
                      mcp_true_i, direct_true_i, mcp_true_i / direct_true_i, mcp_true_i - direct_true_i);
          std::printf(
              "  /messages editor round trip: %.0f instructions, direct view %.0f   ratio %.2fx (+%.0f)\n",
              round_trip_i, direct_view_i, round_trip_i / direct_view_i, round_trip_i - direct_view_i);
          if (editor_refused)
            std::printf(
                "    (valgrind refuses the editor's openat2: both paths answer the same error block)\n");
          std::printf(
              "  /messages bash `true` round trip: %.0f instructions, direct %.0f   ratio %.2fx (+%.0f)\n",
              bash_round_trip_i, direct_true_i, bash_round_trip_i / direct_true_i,
              bash_round_trip_i - direct_true_i);
          std::printf("    (a turn without tools %.0f, with %d views %.0f, with %d bash `true` %.0f)\n",
                      plain_turn_i, kRounds, view_turn_i, kRounds, bash_turn_i);
        }
      }
      stop_traced_server(traced);
    }
  }  // surfaces

  if (everything || only == "relay") {
    // 1 GiB each way through the relay to an allow-listed echo service (sandbox ->
    // listener in its namespace -> splice -> the service), against the same client on the
    // host straight to the service over loopback.
    const std::string client_py =
        "import socket, sys, threading, time\n"
        "host, port, total = sys.argv[1], int(sys.argv[2]), 1 << 30\n"
        "s = socket.create_connection((host, port))\n"
        "chunk = b'Z' * (1 << 20)\n"
        "def send():\n"
        "    for _ in range(total // len(chunk)): s.sendall(chunk)\n"
        "    s.shutdown(socket.SHUT_WR)\n"
        "start = time.monotonic()\n"
        "sender = threading.Thread(target=send); sender.start()\n"
        "buf = bytearray(1 << 20); got = 0\n"
        "while True:\n"
        "    n = s.recv_into(buf)\n"
        "    if not n: break\n"
        "    got += n\n"
        "sender.join()\n"
        "print(got, time.monotonic() - start)\n";
    std::ofstream(dir / "echo_client.py") << client_py;
    auto parse_run = [](const std::string& out) {
      std::istringstream in(out);
      uint64_t bytes = 0;
      double secs = 0;
      in >> bytes >> secs;
      return bytes == (1ull << 30) ? secs : -1.0;
    };
    auto median_of = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::vector<double> direct, relayed, relay_cpu;
    boost::json::object command{
        {"command", "python3 - echo " + std::to_string(echo.port()) + " <<'PY'\n" + client_py + "PY\n"},
        {"timeout", 300}};
    for (int i = 0; i < 3; ++i) {
      FILE* p =
          popen(("python3 " + (dir / "echo_client.py").string() + " 127.0.0.1 " + std::to_string(echo.port()))
                    .c_str(),
                "r");
      std::string out;
      char line[256];
      while (p && fgets(line, sizeof line, p)) out += line;
      if (p) pclose(p);
      direct.push_back(parse_run(out));
      const double cpu_before = cpu_seconds(server.pid);
      auto reply = boost::json::parse(
          client.post(tools + "relay/tools/bash_code_execution", boost::json::serialize(command)));
      relay_cpu.push_back(cpu_seconds(server.pid) - cpu_before);
      relayed.push_back(parse_run(std::string(reply.at("stdout").as_string())));
      if (relayed.back() < 0) std::fprintf(stderr, "relay: %s\n", boost::json::serialize(reply).c_str());
    }
    const double direct_s = median_of(direct), relayed_s = median_of(relayed);
    std::printf("\nrelay to an allow-listed service, 1 GiB each way at once (echo; median of 3)\n");
    std::printf("  host -> service over loopback   %6.2f s  %7.1f MiB/s each way\n", direct_s,
                1024 / direct_s);
    std::printf(
        "  sandbox -> relay -> service     %6.2f s  %7.1f MiB/s each way  = %3.0f%% of direct   (bar >= "
        "80%%)\n",
        relayed_s, 1024 / relayed_s, 100 * direct_s / relayed_s);
    std::printf(
        "  the server's CPU for it: %.2f s per 2 GiB relayed (kernel TCP work of the two extra loopback "
        "hops;\n"
        "  every process here shares 2 cores, so that CPU is what the relayed run loses)\n",
        median_of(relay_cpu));
  }

  if (everything || only == "cost") {
    // sandboxd's own cost per warm `true`: the CPU the server and the sandbox's PID 1 spend
    // on it (every thread of the server; PID 1 and its template process, which clones
    // each command's child), over 10,000 commands one after another, beside what a bare
    // spawn of the same bash costs its spawner and itself. Then the server's user-space
    // instructions per command, counted by callgrind in a second server that runs under
    // valgrind (counts do not depend on the machine's load). PID 1 cannot run under
    // valgrind (its children are raw clone(CLONE_VM) calls, which valgrind refuses), so
    // its share is the CPU time above.
    constexpr int kCostCommands = 10000;
    const std::string cost_target = tools + "cost/tools/bash_code_execution";
    for (int i = 0; i < 50; ++i) client.post(cost_target, true_body);  // started, pools refilled
    const pid_t pid1 = pid1_of(server.port, "cost");
    // The template is PID 1's child that outlives every command (each command's child is
    // a new one).
    const std::vector<pid_t> children_before = children_of(pid1);
    std::vector<uint64_t> child_ns_before;
    for (pid_t child : children_before) child_ns_before.push_back(schedstat_ns(child));
    const auto server_before = user_system_seconds(server.pid);
    const auto pid1_before = user_system_seconds(pid1);
    const uint64_t pid1_ns_before = schedstat_ns(pid1);
    std::vector<double> warm_true;
    int failed_cost = 0;
    for (int i = 0; i < kCostCommands; ++i) {
      auto start = Clock::now();
      auto reply = client.post_reply(cost_target, true_body);
      double ms = ms_since(start);
      if (executed(reply, ""))
        warm_true.push_back(ms);
      else if (++failed_cost <= 3)
        std::fprintf(stderr, "cost: %u %s\n", reply.status, reply.body.c_str());
    }
    const auto server_after = user_system_seconds(server.pid);
    const auto pid1_after = user_system_seconds(pid1);
    const uint64_t pid1_ns = schedstat_ns(pid1) - pid1_ns_before;
    uint64_t template_ns = 0;
    const std::vector<pid_t> children_after = children_of(pid1);
    for (size_t i = 0; i < children_before.size(); ++i)
      if (std::find(children_after.begin(), children_after.end(), children_before[i]) != children_after.end())
        template_ns += schedstat_ns(children_before[i]) - child_ns_before[i];
    // The peer: the same bash spawned bare, as many times, its CPU and its spawner's.
    rusage self_before{}, children_ru_before{}, self_after{}, children_ru_after{};
    getrusage(RUSAGE_SELF, &self_before);
    getrusage(RUSAGE_CHILDREN, &children_ru_before);
    Stats bare_true_s = time_command({bash, "-c", "true"}, kCostCommands);
    getrusage(RUSAGE_SELF, &self_after);
    getrusage(RUSAGE_CHILDREN, &children_ru_after);
    auto seconds_of_tv = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec / 1e6; };
    auto cpu_delta = [&](const rusage& before, const rusage& after) {
      return seconds_of_tv(after.ru_utime) - seconds_of_tv(before.ru_utime) + seconds_of_tv(after.ru_stime) -
             seconds_of_tv(before.ru_stime);
    };
    const double bare_us =
        1e6 * (cpu_delta(self_before, self_after) + cpu_delta(children_ru_before, children_ru_after)) /
        kCostCommands;
    const double n = static_cast<double>(kCostCommands);
    const double server_user_us = 1e6 * (server_after.first - server_before.first) / n;
    const double server_sys_us = 1e6 * (server_after.second - server_before.second) / n;
    const double pid1_user_us = 1e6 * (pid1_after.first - pid1_before.first) / n;
    const double pid1_sys_us = 1e6 * (pid1_after.second - pid1_before.second) / n;
    const double pid1_us = static_cast<double>(pid1_ns) / 1e3 / n,
                 template_us = static_cast<double>(template_ns) / 1e3 / n;
    const double server_us = server_user_us + server_sys_us;
    Stats warm_true_s = summarize(warm_true);
    std::printf("\nsandboxd's own CPU per warm `true` (%d commands one after another; user + system)\n",
                kCostCommands);
    std::printf("  server, every thread          %8.1f us   (user %.1f, system %.1f)\n", server_us,
                server_user_us, server_sys_us);
    std::printf("  PID 1                         %8.1f us   (user %.1f, system %.1f)\n", pid1_us,
                pid1_user_us, pid1_sys_us);
    std::printf("  PID 1's template (the clones) %8.1f us\n", template_us);
    std::printf("  bare spawn of %s -c true, spawner and bash: %.1f us\n", bash.c_str(), bare_us);
    std::printf(
        "  ratio sandboxd's own / bare   %8.2f    (goal <= 0.25; server %.2f, PID 1 and template %.2f)\n",
        (server_us + pid1_us + template_us) / bare_us, server_us / bare_us,
        (pid1_us + template_us) / bare_us);
    print_row("warm `true` over HTTP", warm_true_s);
    print_row("bare spawn of the same bash -c true", bare_true_s);
    std::printf("  ratio (p50) warm / bare       %8.2fx   (goal <= 1.3x)\n",
                warm_true_s.p50_ms / bare_true_s.p50_ms);
    if (failed_cost) std::printf("  (%d failed replies left out)\n", failed_cost);

    // PID 1's user-space instructions per warm `true`, and those of its template and of
    // each command's child until its execve: single-stepped under ptrace, since valgrind
    // cannot run them. Stepping makes each command take a fraction of a second, so a few.
    {
      constexpr int kStepped = 20;
      std::vector<pid_t> tasks{pid1};
      for (pid_t child : children_of(pid1)) tasks.push_back(child);  // the template, the ready child
      InstructionStepper stepper(tasks);
      int stepped_ok = 0;
      for (int i = 0; i < kStepped; ++i)
        stepped_ok += executed(client.post_reply(cost_target, true_body), "");
      const auto counts = stepper.stop();
      uint64_t pid1_instructions = 0, template_instructions = 0, child_instructions = 0;
      // The template is the task of those at the start that never called execve; every
      // other one is a command's child (the last may not have had its command yet).
      for (const auto& [task, instructions] : counts.by_pid) {
        const bool execed =
            std::find(counts.execed.begin(), counts.execed.end(), task) != counts.execed.end();
        const bool at_start = std::find(tasks.begin(), tasks.end(), task) != tasks.end();
        if (task == pid1)
          pid1_instructions += instructions;
        else if (at_start && !execed)
          template_instructions += instructions;
        else
          child_instructions += instructions;
      }
      std::printf(
          "\nPID 1's user-space instructions per warm `true` (single-stepped under ptrace, %d commands)\n",
          kStepped);
      if (stepped_ok != kStepped || pid1_instructions == 0) {
        std::printf("  no count (%d of %d commands ran%s%s)\n", stepped_ok, kStepped,
                    counts.error.empty() ? "" : "; ", counts.error.c_str());
      } else {
        std::printf("  PID 1                         %8.0f instructions per command   (goal <= 50000)\n",
                    static_cast<double>(pid1_instructions) / kStepped);
        std::printf("  its template (the clones)     %8.0f\n",
                    static_cast<double>(template_instructions) / kStepped);
        std::printf("  the command's child, to execve %7.0f   (%zu of them reached it)\n",
                    static_cast<double>(child_instructions) / kStepped, counts.execed.size());
      }
    }

    // Instructions: a second server under callgrind, zeroed after a warm-up, then
    // kTraced commands, dumped and divided.
    constexpr int kTraced = 300;
    if (access("/usr/bin/valgrind", X_OK) != 0 || access("/usr/bin/callgrind_control", X_OK) != 0) {
      std::printf("  instructions: valgrind is not installed (scripts/setup.sh installs it)\n");
    } else {
      const fs::path traced_dir = dir / "callgrind";
      fs::create_directories(traced_dir);
      const std::string out_base = (traced_dir / "callgrind.out").string();
      Server traced = start_server(
          binary, traced_dir, "",
          {"/usr/bin/valgrind", "--tool=callgrind", "--trace-children=no",
           "--log-file=" + (traced_dir / "valgrind.log").string(), "--callgrind-out-file=" + out_base});
      if (!traced.port) {
        std::printf("  instructions: the server did not start under valgrind:\n%s\n",
                    read_all(traced_dir / "valgrind.log").c_str());
      } else {
        Client traced_client(traced.port);
        const std::string target = tools + "traced/tools/bash_code_execution";
        for (int i = 0; i < 100; ++i) traced_client.post(target, true_body);
        std::this_thread::sleep_for(std::chrono::seconds(2));  // the pools' refills are done
        const std::string pid = std::to_string(traced.pid);
        output_of("/usr/bin/callgrind_control --zero " + pid + " 2>&1");
        int traced_ok = 0;
        for (int i = 0; i < kTraced; ++i)
          traced_ok += executed(traced_client.post_reply(target, true_body), "");
        output_of("/usr/bin/callgrind_control --dump=commands " + pid + " 2>&1");
        // The dump of the commands is the newest file of the run.
        fs::path dump;
        for (const auto& entry : fs::directory_iterator(traced_dir))
          if (entry.path().filename().string().starts_with("callgrind.out") &&
              (dump.empty() || fs::last_write_time(entry) > fs::last_write_time(dump)))
            dump = entry.path();
        std::smatch m;
        const std::string dumped = dump.empty() ? "" : read_all(dump);
        if (traced_ok != kTraced || !std::regex_search(dumped, m, std::regex("\ntotals: ([0-9]+)"))) {
          std::printf("  instructions: no count (%d of %d commands ran; dump %s)\n", traced_ok, kTraced,
                      dump.c_str());
        } else {
          const double per_command = std::stod(m[1]) / kTraced;
          // SANDBOXD_BENCH_CALLGRIND_OUT=FILE keeps the dump (the run's folder is removed),
          // for callgrind_annotate --tree=caller: who calls malloc per command.
          if (const char* keep = std::getenv("SANDBOXD_BENCH_CALLGRIND_OUT")) {
            std::error_code copy_error;
            fs::copy_file(dump, keep, fs::copy_options::overwrite_existing, copy_error);
            if (copy_error) std::printf("  (the dump was not kept: %s)\n", copy_error.message().c_str());
          }
          std::printf("\nthe server's user-space instructions per warm `true` (callgrind, %d commands)\n",
                      kTraced);
          std::printf("  %.0f instructions per command   (goal <= 100000)\n", per_command);
          // Where they go: the functions with the most instructions of their own, and the
          // ones whose calls cost the most in all.
          for (const char* inclusive : {"no", "yes"}) {
            std::printf("  top functions, %s (instructions per command):\n",
                        inclusive[0] == 'n' ? "own cost" : "with their callees");
            std::istringstream lines(
                output_of("/usr/bin/callgrind_annotate --inclusive=" + std::string(inclusive) +
                          " --threshold=100 " + dump.string() + " 2>/dev/null"));
            std::regex row("^\\s*([0-9,]+) \\([ 0-9.]+%\\)\\s+(.*)$");
            int shown = 0;
            for (std::string line; std::getline(lines, line) && shown < 25;) {
              std::smatch r;
              if (!std::regex_match(line, r, row)) continue;
              std::string count = r[1];
              std::erase(count, ',');
              std::string name = r[2];
              // Frames that were on a stack when the counters were zeroed (a thread's
              // start, main, the event loop) are reported with everything since: no
              // function of a command's own is near half of it.
              if (name.find("PROGRAM TOTALS") != std::string::npos ||
                  std::stod(count) > 0.4 * std::stod(m[1]))
                continue;
              if (name.size() > 110) name = name.substr(0, 110) + "...";
              std::printf("  %10.0f  %s\n", std::stod(count) / kTraced, name.c_str());
              ++shown;
            }
          }
        }
        stop_server_under_valgrind(traced.pid, traced_dir);
      }
    }
  }  // cost

  if (everything || only == "throughput" || only == "cost") {
    // Throughput: wrk, 32 connections over 8 containers, each running `echo ok`. The
    // script checks every reply (status 200, stdout "ok\n", exit 0); only those count as
    // executions, the rest are reported as errors.
    fs::path lua = dir / "post.lua";
    std::ofstream(lua)
        << "local n = 0\nok, wrong = 0, 0\nlocal threads = {}\n"
        << "function setup(thread) table.insert(threads, thread) end\n"
        << "request = function()\n  n = n + 1\n  return wrk.format('POST', '" << tools
        << "tp-' .. (n % 8) .. '/tools/bash_code_execution', {['Authorization']='Bearer " << kToken
        << "', ['Content-Type']='application/json'}, '" << ok_body << "')\nend\n"
        << "response = function(status, headers, body)\n"
        << "  if status == 200 and body:find('\"stdout\":\"ok\\\\n\"', 1, true)"
        << " and body:find('\"return_code\":0', 1, true) then ok = ok + 1 else wrong = wrong + 1 end\n"
        << "end\n"
        << "done = function(summary, latency, requests)\n  local good, bad = 0, 0\n"
        << "  for _, t in ipairs(threads) do good = good + t:get('ok'); bad = bad + t:get('wrong') end\n"
        << "  io.write(string.format('checked: %d ok %d wrong\\n', good, bad))\nend\n";
    for (int i = 0; i < 8; ++i)
      client.post(tools + "tp-" + std::to_string(i) + "/tools/bash_code_execution", ok_body);
    std::string wrk_cmd = "wrk -t2 -c32 -d10s -s " + lua.string() +
                          " http://127.0.0.1:" + std::to_string(server.port) + "/ 2>&1";
    FILE* p = popen(wrk_cmd.c_str(), "r");
    std::string wrk_out;
    char buf[4096];
    while (p && fgets(buf, sizeof buf, p)) wrk_out += buf;
    if (p) pclose(p);
    std::smatch m;
    double seconds = 0;
    long checked_ok = -1, checked_wrong = 0, socket_errors = 0;
    if (std::regex_search(wrk_out, m, std::regex("requests in ([0-9.]+)s"))) seconds = std::stod(m[1]);
    if (std::regex_search(wrk_out, m, std::regex("checked: ([0-9]+) ok ([0-9]+) wrong"))) {
      checked_ok = std::stol(m[1]);
      checked_wrong = std::stol(m[2]);
    }
    if (std::regex_search(
            wrk_out, m,
            std::regex("Socket errors: connect ([0-9]+), read ([0-9]+), write ([0-9]+), timeout ([0-9]+)")))
      socket_errors = std::stol(m[1]) + std::stol(m[2]) + std::stol(m[3]) + std::stol(m[4]);
    std::printf("\nthroughput, warm echo ok, 32 connections (wrk, 10 s; only checked 200 replies count)\n");
    // The peer: the same bash, spawned bare by 8 threads for as long.
    const double bare_rate = spawn_rate(bare_echo, 8, 10);
    if (checked_ok < 0 || seconds <= 0) {
      std::printf("  wrk gave no checked count:\n%s", wrk_out.c_str());
    } else {
      std::printf("  sandboxd over HTTP                  %7.0f executions/s\n", checked_ok / seconds);
      std::printf("  bare spawn of the same bash by 8 threads %7.0f runs/s\n", bare_rate);
      std::printf("  ratio sandboxd / bare               %7.2fx   (bar >= 1.0x)\n",
                  checked_ok / seconds / bare_rate);
      std::printf("  errors: %ld wrong replies, %ld socket errors (of %ld replies)\n", checked_wrong,
                  socket_errors, checked_ok + checked_wrong);
    }
  }  // throughput

  if (everything || only == "transfer") {
    // 1 GiB upload and download, against cp on the same disk. Uploads land in the
    // container's uploads folder (outside the size-limited volume); the download goes
    // through the thread endpoint (uploaded-resource downloads are enabled in the bench
    // configuration), the same streaming path as the Files API's content route.
    fs::path big = dir / "big.bin", copy = dir / "copy.bin", down = dir / "down.bin";
    run_quiet({"/bin/sh", "-c", "head -c 1G /dev/urandom > " + big.string()});
    sync();
    // Each transfer three times; the median (this disk's speed varies from run to run).
    auto median3 = [](const std::function<double()>& once) {
      std::vector<double> runs{once(), once(), once()};
      std::sort(runs.begin(), runs.end());
      return runs[1];
    };
    // The references and the upload take turns, round by round (this machine's load
    // changes from minute to minute: each side sees the same load).
    auto cp_once = [&] {
      double t = seconds_of([&] {
        run_quiet({"/bin/cp", big.string(), copy.string()});
        sync();
      });
      fs::remove(copy);
      return t;
    };
    // write() then fsync through the page cache, as dd does with conv=fsync (cp copies in
    // the kernel with copy_file_range, which no network receiver can use). For reference:
    // the server writes a body past 1 MiB with O_DIRECT (store/atomic_writer.cc).
    auto dd_once = [&] {
      double t = seconds_of([&] {
        run_quiet(
            {"/bin/dd", "if=" + big.string(), "of=" + copy.string(), "bs=1M", "conv=fsync", "status=none"});
      });
      fs::remove(copy);
      return t;
    };
    // MD5 is the one serial step the contract's `etag` forces on an upload: md5sum of the
    // same file is the other reference, and the slower of the two is the bar's.
    auto md5_once = [&] { return seconds_of([&] { run_quiet({"/usr/bin/md5sum", big.string()}); }); };
    long rss_before = rss_kib(server.pid);
    const std::string auth = std::string("Authorization: Bearer ") + kToken;
    const std::string origin = "http://127.0.0.1:" + std::to_string(server.port);
    auto up_once = [&] {
      return seconds_of([&] {
        run_quiet({"/usr/bin/curl", "-sS", "-X", "PUT", "-H", auth, "-H", "Expect:", "-T", big.string(),
                   origin + "/api/gpt/v1/files/big.bin?scope_id=files"});
        sync();
      });
    };
    std::vector<double> cp_runs, dd_runs, md5_runs, up_runs;
    for (int round = 0; round < 3; ++round) {
      cp_runs.push_back(cp_once());
      dd_runs.push_back(dd_once());
      md5_runs.push_back(md5_once());
      up_runs.push_back(up_once());
    }
    auto median_of = [](std::vector<double> runs) {
      std::sort(runs.begin(), runs.end());
      return runs[runs.size() / 2];
    };
    const double cp_s = median_of(cp_runs), dd_s = median_of(dd_runs), md5_s = median_of(md5_runs),
                 up_s = median_of(up_runs);
    const double reference_s = std::max(cp_s, md5_s);
    long rss_after_up = rss_kib(server.pid);
    double down_s = median3([&] {
      return seconds_of([&] {
        download_to_file(server.port,
                         "/api/v1/app/thread/files/download-file?path=/mnt/user-data/uploads/big.bin", down);
        sync();
      });
    });
    long rss_after = rss_kib(server.pid);
    bool same = fs::file_size(down) == fs::file_size(big) &&
                run_quiet({"/usr/bin/cmp", "-s", big.string(), down.string()}) == 0;
    fs::remove(big);
    fs::remove(down);
    std::printf("\nfile transfer, 1 GiB (same disk)\n");
    std::printf("  cp                   %6.2f s  %7.1f MiB/s\n", cp_s, 1024 / cp_s);
    std::printf(
        "  dd bs=1M conv=fsync  %6.2f s  %7.1f MiB/s  (write+fsync through the page cache; an upload past 1 "
        "MiB writes with O_DIRECT)\n",
        dd_s, 1024 / dd_s);
    std::printf("  md5sum               %6.2f s  %7.1f MiB/s\n", md5_s, 1024 / md5_s);
    std::printf(
        "  upload (PUT)         %6.2f s  %7.1f MiB/s  = %3.0f%% of the slower of cp and md5sum   (bar >= "
        "70%%)\n",
        up_s, 1024 / up_s, 100 * reference_s / up_s);
    std::printf(
        "  download (GET)       %6.2f s  %7.1f MiB/s  = %3.0f%% of the slower of cp and md5sum   (bar >= "
        "80%%)%s\n",
        down_s, 1024 / down_s, 100 * reference_s / down_s, same ? "" : "  CONTENT MISMATCH");
    std::printf(
        "  server RSS: %ld KiB before, %ld after upload, %ld after download: growth %ld KiB (bar <= 32768)\n",
        rss_before, rss_after_up, rss_after, std::max(rss_after_up, rss_after) - rss_before);

  }  // transfer

  if (everything) {
    // Listing 10,000 files.
    client.post(
        tools + "many/tools/bash_code_execution",
        R"({"command":"mkdir -p /mnt/user-data/outputs/m && cd /mnt/user-data/outputs/m && for i in $(seq 10000); do : > f$i.txt; done"})");
    client.get("/api/gpt/v1/files?scope_id=many&limit=1000");  // first sight: records made
    std::vector<double> list20, list1000;
    for (int i = 0; i < 50; ++i) {
      auto start = Clock::now();
      client.get("/api/gpt/v1/files?scope_id=many");
      list20.push_back(ms_since(start));
      start = Clock::now();
      client.get("/api/gpt/v1/files?scope_id=many&limit=1000");
      list1000.push_back(ms_since(start));
    }
    std::printf("\nlisting a container of 10,000 files\n");
    print_row("one page (default limit 20)", summarize(list20));
    print_row("one page of 1000", summarize(list1000));
    std::printf("  bar: p50 <= 20 ms\n");
  }  // everything

  kill(server.pid, SIGTERM);
  waitpid(server.pid, nullptr, 0);
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return 0;
}
