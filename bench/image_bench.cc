// Image benchmark: a sandbox's start + `true` + stop from the host image and from an
// installed image, side by side in one run, and their ratio (the target: an
// image costs no more than the host's). Prints figures; asserts nothing.
//   BENCH_IMAGE=NAME:TAG and BENCH_DATA_DIR=DIR: the image to measure (e.g. the
//     data-science image). Without them, a minimal image (minbase + python3-minimal +
//     bash-static) is built with `sandboxd image build --minimal` into a temporary
//     data directory. Both sides must run the same bash for `true` (a sandbox runs the
//     image's bash-static when it has one): the output says which each side runs.
//   BENCH_COLD: iterations (default 100).

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "bench_util.h"
#include "images/store.h"
#include "runtime/runtime.h"
#include "sandbox_harness.h"  // run_sync

namespace fs = std::filesystem;
namespace rt = sandboxd::runtime;
namespace im = sandboxd::images;
namespace asio = boost::asio;
using namespace sandboxd::bench;
using sandboxd::testing::run_sync;

namespace {

// start + true + stop, `n` times, on a runtime with this image root.
std::vector<double> measure(const std::string& image_root, const std::string& instance, int n) {
  rt::RuntimeOptions options;
  options.init_path = SANDBOXD_INIT_PATH;
  options.instance = instance;
  options.image_root = image_root;
  rt::Runtime runtime(options);
  sandboxd::testing::ContainerDirs dirs(options.host_uid, options.host_gid);
  asio::io_context io;
  rt::ExecRequest true_cmd;
  true_cmd.command = "true";
  std::vector<double> total;
  for (int i = 0; i < n; ++i) {
    rt::SandboxOptions o;
    o.name = "i" + std::to_string(i);
    o.workspace_dir = dirs.workspace;
    o.uploads_dir = dirs.uploads;
    o.outputs_dir = dirs.outputs;
    auto start = Clock::now();
    auto sandbox = run_sync(io, runtime.start(io.get_executor(), o));
    auto result = run_sync(io, sandbox->exec(true_cmd));
    run_sync(io, sandbox->stop());
    total.push_back(ms_since(start));
    if (result.return_code != 0) {
      std::fprintf(stderr, "`true` failed on %s: %s\n",
                   image_root.empty() ? "the host image" : image_root.c_str(), result.stderr_text.c_str());
      std::exit(1);
    }
  }
  runtime.cleanup_stale();
  return total;
}

// What a sandbox over `root` runs for `bash -c` (sandboxd-init looks for bash-static
// at these two paths in its root; "/" is the host image).
std::string sandbox_bash(const std::string& root) {
  for (const char* candidate : {"/usr/bin/bash-static", "/bin/bash-static"})
    if (access((root + candidate).c_str(), X_OK) == 0) return candidate;
  return "/bin/bash";
}

}  // namespace

int main() {
  const int n = env_int("BENCH_COLD", 100);
  std::string data_dir = std::getenv("BENCH_DATA_DIR") ? std::getenv("BENCH_DATA_DIR") : "";
  std::string name = std::getenv("BENCH_IMAGE") ? std::getenv("BENCH_IMAGE") : "";
  fs::path temporary;
  if (name.empty() || data_dir.empty()) {
    temporary = fs::temp_directory_path() / ("sandboxd-image-bench-" + std::to_string(getpid()));
    data_dir = temporary.string();
    name = "bench/minimal:1";
    std::printf("building %s (debootstrap minbase + python3-minimal + bash-static) into %s ...\n",
                name.c_str(), data_dir.c_str());
    std::fflush(stdout);
    std::string command = std::string(SANDBOXD_PATH) + " image build " + name +
                          " --minimal --packages python3-minimal,bash-static --data-dir " + data_dir + " >" +
                          data_dir + ".log 2>&1";
    if (std::system(command.c_str()) != 0) {
      std::printf(
          "the image build failed (see %s.log): only an installed image can be compared; set BENCH_IMAGE "
          "and BENCH_DATA_DIR\n",
          data_dir.c_str());
      return 1;
    }
  }
  auto image = im::ImageStore(data_dir).find(im::parse_ref(name));
  if (!image) {
    std::printf("no image %s in %s\n", name.c_str(), data_dir.c_str());
    return 1;
  }
  std::printf("sandbox start + true + stop, %d times each (%ld cores)\n", n, sysconf(_SC_NPROCESSORS_ONLN));
  const std::string host_bash = sandbox_bash(""), image_bash = sandbox_bash(image->rootfs);
  const char* sameness = "NOT the same bash: the ratio below compares different programs";
  if (host_bash == image_bash)
    sameness = run_quiet({"/usr/bin/cmp", "-s", host_bash, image->rootfs + image_bash}) == 0
                   ? "the same binary, byte for byte"
                   : "the same program, another build of it";
  std::printf("  `true` runs as bash -c true: host %s, image %s (%s)\n", host_bash.c_str(),
              image_bash.c_str(), sameness);
  // Alternated halves, so that a machine busy with something else for a while weighs
  // on both sides alike.
  std::string instance = "imgbench-" + std::to_string(getpid());
  auto host_ms = measure("", instance + "-h1", n / 2),
       image_ms = measure(image->rootfs, instance + "-i1", n / 2);
  for (double ms : measure("", instance + "-h2", n - n / 2)) host_ms.push_back(ms);
  for (double ms : measure(image->rootfs, instance + "-i2", n - n / 2)) image_ms.push_back(ms);
  Stats host = summarize(host_ms), img = summarize(image_ms);
  print_row("host image (/usr, /bin, /lib*, /etc allow-list)", host);
  std::string label = "image " + name + " (" + im::human_size(image->size) + ")";
  print_row(label.c_str(), img);
  std::printf("  image / host (p50)                      %6.2fx   (target <= 1x: an image costs no more)\n",
              img.p50_ms / host.p50_ms);
  std::printf("  image / host (mean)                     %6.2fx\n", img.mean_ms / host.mean_ms);
  if (!temporary.empty()) {
    std::error_code ec;
    fs::remove_all(temporary, ec);
    fs::remove(temporary.string() + ".log", ec);
  }
  return 0;
}
