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
#include <vector>

#include "runtime/runtime.h"
#include "runtime/sandbox.h"
#include "runtime/volume.h"

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

// Slot folders as the service's pool makes them (service/sandbox_pool.cc), in a folder
// of their own: rw/{workspace,outputs} and ro/{uploads,skills}, each a shared mount
// point, with a container's folders bound onto them as a claim binds them. A runtime
// that starts every sandbox over slots (Runtime::starts_over_slots: the gvisor tier) is
// tested, and measured, the way the service drives it.
class Slots {
 public:
  Slots(fs::path workspace, fs::path uploads, fs::path outputs, fs::path skills, uint32_t uid)
      : workspace_(std::move(workspace)),
        uploads_(std::move(uploads)),
        outputs_(std::move(outputs)),
        skills_(std::move(skills)) {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-slots-XXXXXX").string();
    dir_ = mkdtemp(pattern.data());
    for (const char* sub : kSlotFolders) {
      fs::create_directories(dir_ / sub);
      if (std::string_view(sub) != "ro/skills" && chown((dir_ / sub).c_str(), uid, uid) != 0)
        throw std::runtime_error("chown failed");
      rt::Volume::make_shared_mount((dir_ / sub).string());
    }
  }
  ~Slots() {
    unbind();
    for (const char* sub : kSlotFolders)
      while (rt::Volume::is_mounted((dir_ / sub).string()) &&
             rt::Volume::try_unmount((dir_ / sub).string())) {
      }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Slots(const Slots&) = delete;
  Slots& operator=(const Slots&) = delete;

  rt::SandboxOptions over_slots(rt::SandboxOptions options) const {
    options.workspace_dir = dir_ / "rw/workspace";
    options.outputs_dir = dir_ / "rw/outputs";
    options.uploads_dir = dir_ / "ro/uploads";
    options.skills_dir = dir_ / "ro/skills";
    options.pre_started = true;
    return options;
  }
  void bind() {
    rt::Volume::attach_bind(workspace_, dir_ / "rw/workspace", false);
    rt::Volume::attach_bind(outputs_, dir_ / "rw/outputs", false);
    rt::Volume::attach_bind(uploads_, dir_ / "ro/uploads", true);
    if (!skills_.empty()) rt::Volume::attach_bind(skills_, dir_ / "ro/skills", true, /*recursive=*/true);
    bound_ = true;
  }
  void unbind() {
    if (!bound_) return;
    for (const char* sub : {"rw/workspace", "rw/outputs", "ro/uploads"}) rt::Volume::unmount(dir_ / sub);
    if (!skills_.empty()) rt::Volume::detach_private(dir_ / "ro/skills");
    bound_ = false;
  }

 private:
  static constexpr const char* kSlotFolders[] = {"rw/workspace", "rw/outputs", "ro/uploads", "ro/skills"};
  fs::path workspace_, uploads_, outputs_, skills_, dir_;
  bool bound_ = false;
};

// A runtime for one test suite, plus helpers to start sandboxes and run commands.
class Harness {
 public:
  explicit Harness(rt::RuntimeOptions options = {}) {
    options.init_path = SANDBOXD_INIT_PATH;
    if (options.instance == "default") options.instance = "test-" + unique_suffix();
    runtime = std::make_unique<rt::Runtime>(options);
  }
  ~Harness() {
    runtime->cleanup_stale();
    slots_.clear();
  }

  rt::SandboxOptions options_for(const ContainerDirs& dirs) const {
    rt::SandboxOptions o;
    o.name = "sbx-" + unique_suffix();
    o.workspace_dir = dirs.workspace;
    o.uploads_dir = dirs.uploads;
    o.outputs_dir = dirs.outputs;
    o.skills_dir = dirs.skills;
    return o;
  }

  // Over slots carrying the options' folders where the runtime starts every sandbox so,
  // as the service does (service/container_parts.cc: start_sandbox).
  std::shared_ptr<rt::Sandbox> start(rt::SandboxOptions o) {
    if (!runtime->starts_over_slots() || o.pre_started)
      return run_sync(io, runtime->start(io.get_executor(), std::move(o)));
    auto slots = std::make_unique<Slots>(o.workspace_dir, o.uploads_dir, o.outputs_dir, o.skills_dir,
                                         runtime->options().host_uid);
    slots->bind();
    const bool restoring = !o.restore_from.empty();
    auto sandbox = run_sync(io, runtime->start(io.get_executor(), slots->over_slots(std::move(o))));
    if (!restoring) sandbox->attach_folders();
    slots_.push_back(std::move(slots));
    return sandbox;
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

 private:
  std::vector<std::unique_ptr<Slots>> slots_;  // of the sandboxes start() put over slots
};

}  // namespace sandboxd::testing
