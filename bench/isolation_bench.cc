// The price of the gvisor tier: a warm `true` (one command after another in one running
// sandbox, through the runtime as the service drives it) and a cold start (a new sandbox
// and its first `true`) on each tier, same machine, same run. Prints figures and the
// gvisor/native ratios; asserts nothing. Needs root and, for the gvisor half, runsc.
//   BENCH_WARM, BENCH_COLD: iteration counts (default 200, 10); BENCH_MEMORY, BENCH_FORK:
//   rounds of the memory and fork measures (default 5, 3); BENCH_GVISOR_PLATFORM (default
//   ptrace).

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <filesystem>

#include "bench_util.h"
#include "runtime/gvisor_launcher.h"
#include "runtime/runtime.h"
#include "sandbox_harness.h"  // run_sync

namespace fs = std::filesystem;
namespace rt = sandboxd::runtime;
namespace asio = boost::asio;
using namespace sandboxd::bench;
using sandboxd::testing::run_sync;

namespace {

// One tier's runtime over a folder of the benchmark's own (the container's three
// folders, owned by the sandbox's user), and the options of its next sandbox.
struct Bench {
  Bench(rt::Isolation isolation, uint32_t host_uid, const std::string& tag)
      : runtime(runtime_options(isolation, host_uid, tag)) {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-isobench-XXXXXX").string();
    root = mkdtemp(pattern.data());
    for (const char* sub : {"workspace", "uploads", "outputs"}) {
      fs::create_directories(root / sub);
      (void)!chown((root / sub).c_str(), host_uid, host_uid);
    }
  }
  ~Bench() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  static rt::RuntimeOptions runtime_options(rt::Isolation isolation, uint32_t host_uid,
                                            const std::string& tag) {
    rt::RuntimeOptions options;
    options.init_path = SANDBOXD_INIT_PATH;
    options.instance = "isobench-" + std::to_string(getpid()) + tag;
    options.host_uid = options.host_gid = host_uid;
    options.isolation = isolation;
    if (const char* platform = std::getenv("BENCH_GVISOR_PLATFORM")) options.gvisor.platform = platform;
    return options;
  }
  rt::SandboxOptions sandbox_options() {
    rt::SandboxOptions o;
    o.name = "i" + std::to_string(++counter);
    o.workspace_dir = root / "workspace";
    o.uploads_dir = root / "uploads";
    o.outputs_dir = root / "outputs";
    return o;
  }
  rt::Runtime runtime;
  asio::io_context io;
  fs::path root;
  int counter = 0;
};

struct Figures {
  Stats cold, warm;
};

Figures measure(rt::Isolation isolation, uint32_t host_uid, int cold_n, int warm_n) {
  Bench bench(isolation, host_uid, isolation == rt::Isolation::kGvisor ? "g" : "n");
  auto& runtime = bench.runtime;
  auto& io = bench.io;
  auto sandbox_options = [&] { return bench.sandbox_options(); };
  rt::ExecRequest true_cmd;
  true_cmd.command = "true";
  std::vector<double> cold, warm;
  for (int i = 0; i < cold_n; ++i) {
    auto start = Clock::now();
    auto sandbox = run_sync(io, runtime.start(io.get_executor(), sandbox_options()));
    auto result = run_sync(io, sandbox->exec(true_cmd));
    cold.push_back(ms_since(start));
    run_sync(io, sandbox->stop());
    if (result.return_code != 0) std::fprintf(stderr, "cold run failed: %s\n", result.stderr_text.c_str());
  }
  auto sandbox = run_sync(io, runtime.start(io.get_executor(), sandbox_options()));
  for (int i = 0; i < warm_n + 5; ++i) {
    auto start = Clock::now();
    auto result = run_sync(io, sandbox->exec(true_cmd));
    if (i >= 5) warm.push_back(ms_since(start));  // (the first few warm the caches)
    if (result.return_code != 0) std::fprintf(stderr, "warm run failed: %s\n", result.stderr_text.c_str());
  }
  run_sync(io, sandbox->stop());
  return {summarize(cold), summarize(warm)};
}

// The gvisor tier's memory: a sandbox holding a Python process with 100 MiB of data is
// checkpointed (pause) and restored with a first `true` (resume), N times.
struct MemoryFigures {
  Stats pause, resume;
  double image_mib = 0;
};

MemoryFigures measure_memory(uint32_t host_uid, int n) {
  Bench bench(rt::Isolation::kGvisor, host_uid, "m");
  auto& runtime = bench.runtime;
  auto& io = bench.io;
  const fs::path& root = bench.root;
  auto sandbox_options = [&] { return bench.sandbox_options(); };
  rt::ExecRequest true_cmd;
  true_cmd.command = "true";
  rt::ExecRequest wait_for_data;  // the process has its 100 MiB once the file is there
  wait_for_data.command = "for i in $(seq 600); do [ -e /tmp/filled ] && exit 0; sleep 0.1; done; exit 1";
  MemoryFigures figures;
  std::vector<double> pause, resume;
  auto sandbox = run_sync(io, runtime.start(io.get_executor(), sandbox_options()));
  rt::ProcessRequest holder;
  holder.argv = {"/usr/bin/python3", "-c",
                 "import os, sys\ndata = bytearray(os.urandom(100 << 20))\nopen('/tmp/filled', 'w').close()\n"
                 "sys.stdin.read()"};
  auto channel = run_sync(io, sandbox->start_process(holder));
  if (run_sync(io, sandbox->exec(wait_for_data)).return_code != 0)
    std::fprintf(stderr, "the data never came\n");
  for (int i = 0; i < n; ++i) {
    const fs::path image = root / ("image-" + std::to_string(i));
    fs::create_directories(image);
    auto start = Clock::now();
    run_sync(io, runtime.checkpoint(sandbox, image.string()));
    run_sync(io, sandbox->stop());
    pause.push_back(ms_since(start));
    uint64_t bytes = 0;
    for (const auto& entry : fs::recursive_directory_iterator(image))
      if (entry.is_regular_file()) bytes += entry.file_size();
    figures.image_mib = static_cast<double>(bytes) / (1 << 20);
    auto options_now = sandbox_options();
    options_now.restore_from = image.string();
    start = Clock::now();
    sandbox = run_sync(io, runtime.start(io.get_executor(), options_now));
    auto result = run_sync(io, sandbox->exec(true_cmd));
    resume.push_back(ms_since(start));
    if (result.return_code != 0) std::fprintf(stderr, "resume run failed: %s\n", result.stderr_text.c_str());
    fs::remove_all(image);
  }
  for (int fd : {channel.stdin_write, channel.stdout_read, channel.stderr_read}) close(fd);
  run_sync(io, sandbox->stop());
  figures.pause = summarize(pause);
  figures.resume = summarize(resume);
  return figures;
}

// E2B's fork on the gvisor tier, as the service makes one (service/container_snapshots.cc):
// the source checkpointed once and restored in place, then 4 sandboxes restored from that
// checkpoint, each with a first `true`; against 4 cold starts (start + `true`), N times.
// The runtime's part only: the volume's frozen copy and its copies for the forks (a pass
// over the image's allocated extents each) come on top.
struct ForkFigures {
  Stats fork4, cold4;
};

ForkFigures measure_fork(uint32_t host_uid, int n) {
  constexpr int kForks = 4;
  Bench bench(rt::Isolation::kGvisor, host_uid, "f");
  auto& runtime = bench.runtime;
  auto& io = bench.io;
  rt::ExecRequest true_cmd;
  true_cmd.command = "true";
  std::vector<double> fork4, cold4;
  auto start_and_true = [&](rt::SandboxOptions options) {
    auto sandbox = run_sync(io, runtime.start(io.get_executor(), std::move(options)));
    if (auto result = run_sync(io, sandbox->exec(true_cmd)); result.return_code != 0)
      std::fprintf(stderr, "a first true failed: %s\n", result.stderr_text.c_str());
    return sandbox;
  };
  for (int i = 0; i < n; ++i) {
    auto source = start_and_true(bench.sandbox_options());
    const fs::path image = bench.root / ("fork-" + std::to_string(i));
    fs::create_directories(image);
    std::vector<std::shared_ptr<rt::Sandbox>> made;
    auto start = Clock::now();
    run_sync(io, runtime.checkpoint(source, image.string()));
    run_sync(io, source->stop());
    auto restored = [&] {
      auto options = bench.sandbox_options();
      options.restore_from = image.string();
      return options;
    };
    source = run_sync(io, runtime.start(io.get_executor(), restored()));
    for (int k = 0; k < kForks; ++k) made.push_back(start_and_true(restored()));
    fork4.push_back(ms_since(start));
    for (auto& sandbox : made) run_sync(io, sandbox->stop());
    run_sync(io, source->stop());
    made.clear();
    start = Clock::now();
    for (int k = 0; k < kForks; ++k) made.push_back(start_and_true(bench.sandbox_options()));
    cold4.push_back(ms_since(start));
    for (auto& sandbox : made) run_sync(io, sandbox->stop());
    fs::remove_all(image);
  }
  return {summarize(fork4), summarize(cold4)};
}

}  // namespace

int main() {
  const int warm_n = env_int("BENCH_WARM", 200), cold_n = env_int("BENCH_COLD", 10);
  std::printf("isolation tiers (%ld cores)\n", sysconf(_SC_NPROCESSORS_ONLN));
  Figures native = measure(rt::Isolation::kNative, 101000, cold_n, warm_n);
  print_row("native cold: start + true", native.cold);
  print_row("native warm: true", native.warm);
  if (rt::find_runsc().empty()) {
    std::printf("gvisor: runsc is not installed\n");
    return 0;
  }
  Figures gvisor = measure(rt::Isolation::kGvisor, 1000, cold_n, warm_n);
  print_row("gvisor cold: start + true", gvisor.cold);
  print_row("gvisor warm: true", gvisor.warm);
  std::printf("\nratios gvisor/native (p50): warm %.1fx, cold %.1fx\n",
              gvisor.warm.p50_ms / native.warm.p50_ms, gvisor.cold.p50_ms / native.cold.p50_ms);
  const MemoryFigures memory = measure_memory(1000, env_int("BENCH_MEMORY", 5));
  std::printf("\ngvisor memory: a Python process holding 100 MiB (image %.1f MiB)\n", memory.image_mib);
  print_row("gvisor pause: checkpoint + stop", memory.pause);
  print_row("gvisor resume: restore + true", memory.resume);
  std::printf("ratio resume / gvisor cold start (p50): %.2fx (goal <= 1)\n",
              memory.resume.p50_ms / gvisor.cold.p50_ms);
  // E2B's published figures (its docs: about 4 s per GiB of memory to pause, about 1 s to
  // resume), scaled to this image for a side-by-side reading; not measured here.
  std::printf(
      "E2B's published figures, for reference: pause ~%.0f ms for this image (4 s/GiB), resume ~1000 ms\n",
      memory.image_mib / 1024.0 * 4000.0);
  const ForkFigures forks = measure_fork(1000, env_int("BENCH_FORK", 3));
  std::printf("\ngvisor fork of 4 (E2B's fork: one checkpoint, the source restored, 4 restores)\n");
  print_row("gvisor fork of 4: checkpoint + 5 restores", forks.fork4);
  print_row("gvisor 4 cold starts: 4 x (start + true)", forks.cold4);
  std::printf("ratio fork of 4 / 4 cold starts (p50): %.2fx\n", forks.fork4.p50_ms / forks.cold4.p50_ms);
  return 0;
}
