// Runtime benchmark: sandbox start and command latency through the library, side by
// side with bubblewrap, plain fork+exec and (when an engine runs) Docker, plus the host
// memory an idle sandbox costs. Prints figures and ratios; asserts nothing.
//   BENCH_COLD, BENCH_WARM, BENCH_IDLE: iteration counts (default 200, 2000, 200).

#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "bench_util.h"
#include "runtime/runtime.h"
#include "sandbox_harness.h"  // run_sync

namespace fs = std::filesystem;
namespace rt = sandboxd::runtime;
namespace asio = boost::asio;
using namespace sandboxd::bench;
using sandboxd::testing::run_sync;

namespace {

long mem_available_kib() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  long value;
  while (in >> key >> value >> unit)
    if (key == "MemAvailable:") return value;
  return 0;
}

struct Container {
  fs::path root;
  explicit Container(uint32_t id) {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-bench-XXXXXX").string();
    root = mkdtemp(pattern.data());
    for (const char* sub : {"workspace", "uploads", "outputs"}) {
      fs::create_directories(root / sub);
      (void)!chown((root / sub).c_str(), id, id);
    }
  }
  ~Container() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

}  // namespace

int main() {
  const int cold_n = env_int("BENCH_COLD", 200), warm_n = env_int("BENCH_WARM", 2000);
  const int idle_n = env_int("BENCH_IDLE", 200);
  rt::RuntimeOptions options;
  options.init_path = SANDBOXD_INIT_PATH;
  options.instance = "bench-" + std::to_string(getpid());
  rt::Runtime runtime(options);
  asio::io_context io;
  Container container(options.host_uid);
  int counter = 0;
  auto sandbox_options = [&](const Container& c) {
    rt::SandboxOptions o;
    o.name = "b" + std::to_string(++counter);
    o.workspace_dir = c.root / "workspace";
    o.uploads_dir = c.root / "uploads";
    o.outputs_dir = c.root / "outputs";
    return o;
  };
  rt::ExecRequest true_cmd;
  true_cmd.command = "true";

  std::printf("sandboxd runtime benchmark (cgroup %s, %ld cores)\n", runtime.cgroups().version().c_str(),
              sysconf(_SC_NPROCESSORS_ONLN));

  // Cold: a new sandbox, `true`, stop.
  std::vector<double> cold_first, cold_total;
  for (int i = 0; i < cold_n; ++i) {
    auto start = Clock::now();
    auto sandbox = run_sync(io, runtime.start(io.get_executor(), sandbox_options(container)));
    auto result = run_sync(io, sandbox->exec(true_cmd));
    cold_first.push_back(ms_since(start));
    run_sync(io, sandbox->stop());
    cold_total.push_back(ms_since(start));
    if (result.return_code != 0) {
      std::fprintf(stderr, "cold run failed: %s\n", result.stderr_text.c_str());
      return 1;
    }
  }
  // Warm: `true` in a running sandbox.
  auto warm_sandbox = run_sync(io, runtime.start(io.get_executor(), sandbox_options(container)));
  std::vector<double> warm;
  for (int i = 0; i < warm_n; ++i) {
    auto start = Clock::now();
    auto result = run_sync(io, warm_sandbox->exec(true_cmd));
    warm.push_back(ms_since(start));
    if (result.return_code != 0) return 1;
  }
  run_sync(io, warm_sandbox->stop());

  // Peers, same machine, same run.
  bool bwrap_ok = false;
  // bwrap with the same mounts, running the same `bash -c true` a sandbox runs.
  const std::string sandbox_bash = sandboxd::bench::sandbox_bash();
  Stats bwrap =
      time_command(bwrap_argv((container.root / "workspace").string(), (container.root / "uploads").string(),
                              (container.root / "outputs").string(), {sandbox_bash, "-c", "true"}),
                   cold_n, &bwrap_ok);
  Stats fork_exec = time_command({"/bin/true"}, warm_n);
  // The peer of a warm call runs the very binary a sandbox runs for `bash -c`.
  Stats fork_bash = time_command({sandbox_bash, "-c", "true"}, warm_n);
  const std::string fork_bash_label = "fork+exec " + sandbox_bash + " -c true";
  // Docker (scripts/bench.sh starts an engine and imports a minimal image for the run).
  DockerPeer docker = measure_docker(20, 50);
  const bool docker_ok = docker.ok;
  const Stats docker_run = docker.run, docker_exec = docker.exec;

  Stats cold1 = summarize(cold_first), cold2 = summarize(cold_total), warm_s = summarize(warm);
  std::printf("\nlatency\n");
  print_row("sandboxd cold: start + true (first result)", cold1);
  print_row("sandboxd cold: start + true + stop", cold2);
  print_row("sandboxd warm: true in a running sandbox", warm_s);
  if (bwrap_ok)
    print_row("bwrap --unshare-all, same mounts, bash -c true", bwrap);
  else
    std::printf("  bwrap: not usable here\n");
  print_row("fork+exec /bin/true", fork_exec);
  print_row(fork_bash_label.c_str(), fork_bash);
  if (docker_ok) {
    print_row("docker run --rm --network none ... true", docker_run);
    print_row("docker exec ... true", docker_exec);
  } else {
    std::printf("  docker: not measured (scripts/bench.sh provides the engine and image)\n");
  }
  std::printf("\nratios and targets (p50)\n");
  if (bwrap_ok)
    std::printf("  cold (start+true+stop) / bwrap         %6.2fx   (bar <= 1.3x)\n",
                cold2.p50_ms / bwrap.p50_ms);
  std::printf("  warm / fork+exec bash -c true          %6.2fx   (bar <= 1.5x; both sides run %s -c true)\n",
              warm_s.p50_ms / fork_bash.p50_ms, sandbox_bash.c_str());
  std::printf("  warm / fork+exec /bin/true             %6.2fx\n", warm_s.p50_ms / fork_exec.p50_ms);
  std::printf(
      "  warm p50 %.3f ms; sandboxd's own share over the same bare %s -c true: %.3f ms   (target <= 1 ms)\n",
      warm_s.p50_ms, sandbox_bash.c_str(), warm_s.p50_ms - fork_bash.p50_ms);
  if (docker_ok) {
    std::printf("  docker run --rm / sandboxd cold        %6.2fx   (sandboxd is that many times faster)\n",
                docker_run.p50_ms / cold2.p50_ms);
    std::printf("  docker exec / sandboxd warm            %6.2fx\n", docker_exec.p50_ms / warm_s.p50_ms);
  }

  // Idle memory: many running sandboxes at once, each having served one command.
  sync();
  long before = mem_available_kib();
  std::vector<std::shared_ptr<rt::Sandbox>> idle;
  std::vector<std::unique_ptr<Container>> idle_containers;
  for (int i = 0; i < idle_n; ++i) {
    idle_containers.push_back(std::make_unique<Container>(options.host_uid));
    idle.push_back(run_sync(io, runtime.start(io.get_executor(), sandbox_options(*idle_containers.back()))));
  }
  for (auto& sandbox : idle) run_sync(io, sandbox->exec(true_cmd));
  usleep(200'000);
  long after = mem_available_kib();
  uint64_t charged = 0;
  for (auto& sandbox : idle) charged += sandbox->memory_usage();
  std::printf("\nidle sandboxes (%d running at once)\n", idle_n);
  std::printf("  host MemAvailable drop per sandbox     %8.1f KiB  (target <= 2048 KiB)\n",
              static_cast<double>(before - after) / idle_n);
  std::printf("  memory cgroup charge per sandbox       %8.1f KiB\n",
              static_cast<double>(charged) / 1024.0 / idle_n);
  for (auto& sandbox : idle) run_sync(io, sandbox->stop());
  runtime.cleanup_stale();
  return 0;
}
