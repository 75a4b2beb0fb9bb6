// Test support: a runtime with its own instance name, container directories on disk,
// and a synchronous way to drive the runtime's coroutines from a test body.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include "runtime/runtime.h"

namespace sandboxd::testing {

namespace fs = std::filesystem;
namespace rt = sandboxd::runtime;
namespace asio = boost::asio;

inline std::string unique_suffix() {
  static std::mt19937_64 rng(std::random_device{}());
  return std::to_string(getpid()) + "-" + std::to_string(rng() % 1000000);
}

// Drives `io` until the coroutine finishes; returns its value or rethrows.
template <typename T>
T run_sync(asio::io_context& io, asio::awaitable<T> work) {
  auto future = asio::co_spawn(io, std::move(work), asio::use_future);
  io.restart();
  while (future.wait_for(std::chrono::seconds(0)) != std::future_status::ready) io.run_one();
  return future.get();
}

struct ContainerDirs {
  fs::path root, workspace, uploads, outputs, skills;

  explicit ContainerDirs(uint32_t uid, uint32_t gid) {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-test-XXXXXX").string();
    root = mkdtemp(pattern.data());
    workspace = root / "workspace";
    uploads = root / "uploads";
    outputs = root / "outputs";
    skills = root / "skills";
    for (const auto& dir : {workspace, uploads, outputs, skills}) {
      fs::create_directories(dir);
      if (chown(dir.c_str(), uid, gid) != 0) throw std::runtime_error("chown failed");
    }
  }
  ~ContainerDirs() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A runtime for one test suite, plus helpers to start sandboxes and run commands.
class Harness {
 public:
  explicit Harness(rt::RuntimeOptions options = {}) {
    options.init_path = SANDBOXD_INIT_PATH;
    if (options.instance == "default") options.instance = "test-" + unique_suffix();
    runtime = std::make_unique<rt::Runtime>(options);
  }
  ~Harness() { runtime->cleanup_stale(); }

  rt::SandboxOptions options_for(const ContainerDirs& dirs) const {
    rt::SandboxOptions o;
    o.name = "sbx-" + unique_suffix();
    o.workspace_dir = dirs.workspace;
    o.uploads_dir = dirs.uploads;
    o.outputs_dir = dirs.outputs;
    o.skills_dir = dirs.skills;
    return o;
  }

  std::shared_ptr<rt::Sandbox> start(rt::SandboxOptions o) {
    return run_sync(io, runtime->start(io.get_executor(), std::move(o)));
  }

  rt::ExecResult exec(rt::Sandbox& sandbox, const std::string& command,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30), size_t limit = 1 << 20) {
    rt::ExecRequest req;
    req.command = command;
    req.timeout = timeout;
    req.output_limit = limit;
    return run_sync(io, sandbox.exec(req));
  }

  void stop(rt::Sandbox& sandbox) { run_sync(io, sandbox.stop()); }

  asio::io_context io;
  std::unique_ptr<rt::Runtime> runtime;
};

}  // namespace sandboxd::testing
