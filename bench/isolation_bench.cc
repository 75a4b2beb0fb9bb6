// The price of the gvisor tier: a warm `true` (one command after another in one running
// sandbox, through the runtime as the service drives it) and a cold start (a new sandbox
// and its first `true`) on each tier, same machine, same run, each against its own
// reference: the warm `true` against the same `bash -c true` run by a shell already inside
// the same sandbox (what the runtime's path to a command adds), the gvisor cold start
// against a bare `runsc run` of the very bundle the tier writes with that first command
// (what sandboxd adds to gVisor's own start). Then the memory (a pause held in place and
// its resume, a pause that checkpoints and the restore from it), E2B's fork,
// and the price of the second kernel for real work: a Python `import pandas` and a `du`
// of a 10,000-file tree on each tier. Prints figures and ratios; asserts nothing. Needs
// root and, for the gvisor half, runsc.
//   BENCH_WARM, BENCH_COLD: iteration counts (default 200, 10); BENCH_MEMORY, BENCH_FORK:
//   rounds of the memory and fork measures (default 5, 3); BENCH_WORK: rounds of each
//   work measure (default 5); BENCH_GVISOR_PLATFORM (default ptrace).

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "bench_util.h"
#include "runtime/gvisor_launcher.h"
#include "runtime/runtime.h"
#include "sandbox_harness.h"  // run_sync

namespace fs = std::filesystem;
namespace rt = sandboxd::runtime;
namespace asio = boost::asio;
using namespace sandboxd::bench;
using sandboxd::testing::run_sync;
using sandboxd::testing::Slots;

namespace {

// One tier's runtime over a folder of the benchmark's own (the container's three
// folders, owned by the sandbox's user), and the options of its next sandbox.
struct Bench {
  Bench(rt::Isolation isolation, uint32_t host_uid, const std::string& tag)
      : runtime(runtime_options(isolation, host_uid, tag)) {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-isobench-XXXXXX").string();
    root = mkdtemp(pattern.data());
    for (const char* sub : {"workspace", "uploads", "outputs", "skills"}) {
      fs::create_directories(root / sub);
      (void)!chown((root / sub).c_str(), host_uid, host_uid);
    }
  }
  ~Bench() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  static std::string instance_name(const std::string& tag) {
    return "isobench-" + std::to_string(getpid()) + tag;
  }
  static rt::RuntimeOptions runtime_options(rt::Isolation isolation, uint32_t host_uid,
                                            const std::string& tag) {
    rt::RuntimeOptions options;
    options.init_path = SANDBOXD_INIT_PATH;
    options.instance = instance_name(tag);
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

// gVisor's own start, the reference for the tier's cold start: the bundle the tier
// writes for a sandbox (its config.json and root skeleton, copied while that sandbox
// runs), its process replaced by the sandbox's first command (`bash -c true` as uid
// 1000), run with `runsc run` and the tier's flags, each until runsc exits.
class BareRunsc {
 public:
  explicit BareRunsc(uint32_t host_uid) : bench_(rt::Isolation::kGvisor, host_uid, "b") {
    auto& io = bench_.io;
    const auto options = bench_.sandbox_options();
    const fs::path state = "/run/sandboxd-gvisor/" + Bench::instance_name("b");
    auto sandbox = run_sync(io, bench_.runtime.start(io.get_executor(), options));
    fs::copy(state / "bundles" / options.name, bundle_,
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    run_sync(io, sandbox->stop());
    std::string config = read_all(bundle_ / "config.json");
    const std::string root_user = "\"user\":{\"uid\":0,\"gid\":0}";
    const auto args = config.find("\"args\":[");
    const auto args_end = config.find(']', args);
    if (args == std::string::npos || args_end == std::string::npos ||
        config.find(root_user) == std::string::npos)
      throw std::runtime_error("the tier's config.json has changed shape: no bare runsc figure");
    config.replace(args, args_end + 1 - args, "\"args\":[\"" + sandbox_bash() + "\",\"-c\",\"true\"]");
    config.replace(config.find(root_user), root_user.size(), "\"user\":{\"uid\":1000,\"gid\":1000}");
    std::ofstream(bundle_ / "config.json", std::ios::trunc) << config;
    fs::create_directories(state_);
  }
  // One `runsc run`, timed.
  void run_once() {
    const char* platform = std::getenv("BENCH_GVISOR_PLATFORM");
    const std::vector<std::string> argv = {
        rt::find_runsc(),
        "--root=" + state_.string(),
        std::string("--platform=") + (platform ? platform : "ptrace"),
        "--network=none",
        "--ignore-cgroups",
        "run",
        "--bundle",
        bundle_.string(),
        "bare-" + std::to_string(getpid()) + "-" + std::to_string(runs_.size())};
    const auto start = Clock::now();
    const int rc = run_quiet(argv);
    runs_.push_back(ms_since(start));
    if (rc != 0) std::fprintf(stderr, "bare runsc run exited %d\n", rc);
  }
  Stats figures() const { return summarize(runs_); }

 private:
  Bench bench_;
  fs::path bundle_ = bench_.root / "bare-bundle";
  fs::path state_ = bench_.root / "runsc-state";
  std::vector<double> runs_;
};

struct Figures {
  Stats cold, warm;
  // gvisor: a new container's first `true` in a pre-started sandbox (the pool's), and a
  // sandbox started for its container over its slots when the pool is empty.
  Stats cold_prestarted, cold_over_slots;
  Stats warm_inside;  // the same `bash -c true` from a shell inside the same sandbox
  Stats bare_cold;    // a bare `runsc run` (gvisor only)
};

// A shell inside `sandbox` runs the sandbox's `bash -c true` n times, timing each run by
// its own clock (bash's EPOCHREALTIME): no relay, no server, no runtime in the way.
void true_from_a_shell_inside(asio::io_context& io, rt::Sandbox& sandbox, int n, std::vector<double>& ms) {
  rt::ExecRequest loop;
  loop.command = "b=" + sandbox_bash() + "; for i in $(seq " + std::to_string(n) +
                 "); do s=$EPOCHREALTIME; $b -c true; e=$EPOCHREALTIME; echo $s $e; done";
  loop.timeout = std::chrono::minutes(10);
  const auto result = run_sync(io, sandbox.exec(loop));
  if (result.return_code != 0)
    std::fprintf(stderr, "the shell's loop failed: %s\n", result.stderr_text.c_str());
  std::istringstream lines(result.stdout_text);
  double start = 0, end = 0;
  while (lines >> start >> end) ms.push_back((end - start) * 1000.0);
}

// Each measure alternates with its reference (a cold start with a bare runsc run on the
// gvisor tier, every 10 warm commands with 10 runs of the shell inside), so that both
// meet the same load.
Figures measure(rt::Isolation isolation, uint32_t host_uid, int cold_n, int warm_n) {
  Bench bench(isolation, host_uid, isolation == rt::Isolation::kGvisor ? "g" : "n");
  std::unique_ptr<BareRunsc> bare;
  if (isolation == rt::Isolation::kGvisor) bare = std::make_unique<BareRunsc>(host_uid);
  auto& runtime = bench.runtime;
  auto& io = bench.io;
  auto sandbox_options = [&] { return bench.sandbox_options(); };
  rt::ExecRequest true_cmd;
  true_cmd.command = "true";
  std::vector<double> cold, warm, inside;
  for (int i = 0; i < cold_n; ++i) {
    auto start = Clock::now();
    auto sandbox = run_sync(io, runtime.start(io.get_executor(), sandbox_options()));
    auto result = run_sync(io, sandbox->exec(true_cmd));
    cold.push_back(ms_since(start));
    run_sync(io, sandbox->stop());
    if (result.return_code != 0) std::fprintf(stderr, "cold run failed: %s\n", result.stderr_text.c_str());
    if (bare) bare->run_once();
  }
  std::vector<double> prestarted, over_slots;
  if (runtime.starts_over_slots()) {
    Slots slots(bench.root / "workspace", bench.root / "uploads", bench.root / "outputs",
                bench.root / "skills", host_uid);
    for (int i = 0; i < cold_n; ++i) {
      // The pool's sandbox, started ahead (untimed); the container takes it: its folders
      // bound onto the slots, the sandbox told, its first command.
      auto waiting = run_sync(io, runtime.start(io.get_executor(), slots.over_slots(sandbox_options())));
      auto start = Clock::now();
      slots.bind();
      waiting->attach_folders();
      auto result = run_sync(io, waiting->exec(true_cmd));
      prestarted.push_back(ms_since(start));
      if (result.return_code != 0)
        std::fprintf(stderr, "pre-started run failed: %s\n", result.stderr_text.c_str());
      run_sync(io, waiting->stop());
      slots.unbind();
      // The pool empty: a sandbox started for the container over its slots.
      start = Clock::now();
      slots.bind();
      auto started = run_sync(io, runtime.start(io.get_executor(), slots.over_slots(sandbox_options())));
      started->attach_folders();
      result = run_sync(io, started->exec(true_cmd));
      over_slots.push_back(ms_since(start));
      if (result.return_code != 0)
        std::fprintf(stderr, "over-slots run failed: %s\n", result.stderr_text.c_str());
      run_sync(io, started->stop());
      slots.unbind();
      if (bare) bare->run_once();
    }
  }
  auto sandbox = run_sync(io, runtime.start(io.get_executor(), sandbox_options()));
  for (int i = 0; i < 5; ++i) run_sync(io, sandbox->exec(true_cmd));  // (the first few warm the caches)
  for (int i = 0; i < warm_n; ++i) {
    auto start = Clock::now();
    auto result = run_sync(io, sandbox->exec(true_cmd));
    warm.push_back(ms_since(start));
    if (result.return_code != 0) std::fprintf(stderr, "warm run failed: %s\n", result.stderr_text.c_str());
    if (i % 10 == 9) true_from_a_shell_inside(io, *sandbox, 10, inside);
  }
  run_sync(io, sandbox->stop());
  return {summarize(cold),       summarize(warm),   summarize(prestarted),
          summarize(over_slots), summarize(inside), bare ? bare->figures() : Stats{}};
}

// Real work on each tier, in one running sandbox: a Python `import pandas` (a few
// thousand files opened and mapped) and a `du` of a 10,000-file tree in the workspace
// (a stat each), n times each after one unmeasured run.
struct WorkFigures {
  Stats pandas, du;
};

WorkFigures measure_work(rt::Isolation isolation, uint32_t host_uid, int n) {
  Bench bench(isolation, host_uid, isolation == rt::Isolation::kGvisor ? "wg" : "wn");
  auto& io = bench.io;
  const fs::path tree = bench.root / "workspace" / "tree";
  for (int d = 0; d < 100; ++d) {
    const fs::path dir = tree / std::to_string(d);
    fs::create_directories(dir);
    for (int f = 0; f < 100; ++f) std::ofstream(dir / std::to_string(f)) << "x";
  }
  auto sandbox = run_sync(io, bench.runtime.start(io.get_executor(), bench.sandbox_options()));
  auto time_it = [&](const std::string& command) {
    rt::ExecRequest request;
    request.command = command;
    request.timeout = std::chrono::minutes(5);
    std::vector<double> ms;
    for (int i = 0; i <= n; ++i) {
      const auto start = Clock::now();
      const auto result = run_sync(io, sandbox->exec(request));
      if (i > 0) ms.push_back(ms_since(start));
      if (result.return_code != 0)
        std::fprintf(stderr, "%s failed: %s\n", command.c_str(), result.stderr_text.c_str());
    }
    return summarize(ms);
  };
  WorkFigures figures;
  figures.pandas = time_it("/usr/bin/python3 -c 'import pandas'");
  figures.du = time_it("du -s /home/agent/workspace/tree > /dev/null");
  run_sync(io, sandbox->stop());
  return figures;
}

// The gvisor tier's memory: a sandbox holding a Python process with 100 MiB of data is
// checkpointed (pause) and restored with a first `true` (resume), N times; then paused in
// place and resumed with a first `true`, N times (a stop within runtime.pauseHoldSeconds).
struct MemoryFigures {
  Stats pause, resume;
  Stats hold, resume_held;  // runtime.pauseHoldSeconds: paused in place, then resumed
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
  // The same sandbox held: paused in place (its cgroup frozen), then resumed (thawed)
  // with a first `true`.
  std::vector<double> hold, resume_held;
  for (int i = 0; i < n; ++i) {
    auto start = Clock::now();
    run_sync(io, runtime.pause(sandbox));
    hold.push_back(ms_since(start));
    start = Clock::now();
    run_sync(io, runtime.resume(sandbox));
    auto result = run_sync(io, sandbox->exec(true_cmd));
    resume_held.push_back(ms_since(start));
    if (result.return_code != 0)
      std::fprintf(stderr, "held resume run failed: %s\n", result.stderr_text.c_str());
  }
  for (int fd : {channel.stdin_write, channel.stdout_read, channel.stderr_read}) close(fd);
  run_sync(io, sandbox->stop());
  figures.pause = summarize(pause);
  figures.resume = summarize(resume);
  figures.hold = summarize(hold);
  figures.resume_held = summarize(resume_held);
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
  print_row("native warm: bash -c true from a shell inside", native.warm_inside);
  if (rt::find_runsc().empty()) {
    std::printf("gvisor: runsc is not installed\n");
    return 0;
  }
  Figures gvisor = measure(rt::Isolation::kGvisor, 1000, cold_n, warm_n);
  print_row("gvisor cold: start + true", gvisor.cold);
  print_row("gvisor cold, pre-started: bind + attach + true", gvisor.cold_prestarted);
  print_row("gvisor cold, over slots: bind + start + true", gvisor.cold_over_slots);
  print_row("gvisor warm: true", gvisor.warm);
  print_row("gvisor warm: bash -c true from a shell inside", gvisor.warm_inside);
  print_row("bare runsc run of the same bundle: bash -c true", gvisor.bare_cold);
  std::printf("\nratios gvisor/native (p50): warm %.1fx, cold %.1fx\n",
              gvisor.warm.p50_ms / native.warm.p50_ms, gvisor.cold.p50_ms / native.cold.p50_ms);
  std::printf("ratio gvisor warm / a shell inside (p50): %.2fx (goal <= 1.3); native: %.2fx\n",
              gvisor.warm.p50_ms / gvisor.warm_inside.p50_ms, native.warm.p50_ms / native.warm_inside.p50_ms);
  std::printf("ratio gvisor cold, pre-started / bare runsc run (p50): %.2fx (goal <= 0.5)\n",
              gvisor.cold_prestarted.p50_ms / gvisor.bare_cold.p50_ms);
  std::printf("ratio gvisor cold, pool empty (over slots) / bare runsc run (p50): %.2fx\n",
              gvisor.cold_over_slots.p50_ms / gvisor.bare_cold.p50_ms);
  const MemoryFigures memory = measure_memory(1000, env_int("BENCH_MEMORY", 5));
  std::printf("\ngvisor memory: a Python process holding 100 MiB (image %.1f MiB)\n", memory.image_mib);
  print_row("gvisor pause held in place: cgroup frozen", memory.hold);
  print_row("gvisor resume of a held pause: thawed + true", memory.resume_held);
  print_row("gvisor pause: checkpoint + stop", memory.pause);
  print_row("gvisor resume from the checkpoint: restore + true", memory.resume);
  std::printf(
      "ratio resume / gvisor cold start (p50, goal <= 1): held (within runtime.pauseHoldSeconds) %.2fx, "
      "from the checkpoint (after the hold) %.2fx; against the cold start in a pre-started sandbox: held "
      "%.2fx, from the checkpoint %.2fx\n",
      memory.resume_held.p50_ms / gvisor.cold.p50_ms, memory.resume.p50_ms / gvisor.cold.p50_ms,
      memory.resume_held.p50_ms / gvisor.cold_prestarted.p50_ms,
      memory.resume.p50_ms / gvisor.cold_prestarted.p50_ms);
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
  const int work_n = env_int("BENCH_WORK", 5);
  const WorkFigures native_work = measure_work(rt::Isolation::kNative, 101000, work_n);
  const WorkFigures gvisor_work = measure_work(rt::Isolation::kGvisor, 1000, work_n);
  std::printf("\nthe second kernel's price for real work\n");
  print_row("native: python3 -c 'import pandas'", native_work.pandas);
  print_row("gvisor: python3 -c 'import pandas'", gvisor_work.pandas);
  print_row("native: du -s of 10,000 files", native_work.du);
  print_row("gvisor: du -s of 10,000 files", gvisor_work.du);
  std::printf("ratios gvisor/native (p50): import pandas %.1fx, du %.1fx\n",
              gvisor_work.pandas.p50_ms / native_work.pandas.p50_ms,
              gvisor_work.du.p50_ms / native_work.du.p50_ms);
  return 0;
}
