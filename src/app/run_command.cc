// `sandboxd run`: one command in a fresh sandbox over a container directory, without a
// server. stdout, stderr and the exit status pass through.

#include "app/run_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "base/ids.h"
#include "ops/config.h"
#include "runtime/runtime.h"
#include "runtime/volume.h"

namespace sandboxd::app {

namespace fs = std::filesystem;
namespace rt = sandboxd::runtime;

namespace {

// "512Mi", "1G", "100000" -> bytes (the configuration's quantities).
uint64_t parse_bytes(const std::string& text) {
  auto bytes = ops::parse_bytes(text);
  if (!bytes) throw std::invalid_argument("not a size: " + text + " (use K, Ki, M, Mi, G, Gi)");
  return *bytes;
}

std::string shell_quote(const std::string& word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

void make_owned_dir(const fs::path& dir, uint32_t uid, uint32_t gid) {
  fs::create_directories(dir);
  if (chown(dir.c_str(), uid, gid) != 0)
    throw std::runtime_error("chown(" + dir.string() + "): " + std::strerror(errno));
}

// A named coroutine, not a capturing lambda: the lambda object would be gone (a
// temporary) while its frame still reads the captures.
boost::asio::awaitable<rt::ExecResult> run_once(rt::Runtime& runtime, boost::asio::any_io_executor executor,
                                                rt::SandboxOptions options, rt::ExecRequest request) {
  auto sandbox = co_await runtime.start(executor, options);
  std::exception_ptr failure;
  rt::ExecResult result;
  try {
    result = co_await sandbox->exec(std::move(request));
  } catch (...) {
    failure = std::current_exception();
  }
  co_await sandbox->stop();
  if (failure) std::rethrow_exception(failure);
  co_return result;
}

}  // namespace

int run_command(const RunOptions& run) {
  const std::string& container_arg = run.container;
  const std::string& memory = run.memory;
  const std::string& workspace_size = run.workspace_size;
  const std::vector<std::string>& command = run.command;
  const double timeout_seconds = run.timeout_seconds;
  rt::RuntimeOptions options;
  // All `run` invocations share one instance; each picks a unique sandbox name.
  options.instance = "run";
  rt::Runtime runtime(options);

  bool temporary = container_arg.empty();
  fs::path container = temporary ? fs::path() : fs::absolute(container_arg);
  if (temporary) {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-run-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    container = pattern;
  }
  fs::create_directories(container);
  const uint32_t uid = options.host_uid, gid = options.host_gid;
  fs::path data_root = container;
  fs::path volume_mount;
  if (!workspace_size.empty()) {
    // Workspace and outputs live in a size-limited ext4 image inside the container.
    fs::path image = container / "volume.img";
    if (!fs::exists(image)) {
      if (auto created = rt::Volume::create(image, parse_bytes(workspace_size), uid, gid); !created) {
        std::ostringstream message;
        message << "cannot create the workspace volume: " << created.error();
        throw std::runtime_error(message.str());
      }
    }
    volume_mount = container / "volume";
    fs::create_directories(volume_mount);
    if (auto mounted = rt::Volume::mount(image, volume_mount); !mounted) {
      std::ostringstream message;
      message << "cannot mount the workspace volume: " << mounted.error();
      throw std::runtime_error(message.str());
    }
    data_root = volume_mount;
  }
  make_owned_dir(data_root / "workspace", uid, gid);
  make_owned_dir(data_root / "outputs", uid, gid);
  make_owned_dir(container / "uploads", uid, gid);

  rt::SandboxOptions sandbox_options;
  sandbox_options.name = "r" + std::to_string(getpid()) + "-" + std::to_string(random_below(100000));
  sandbox_options.workspace_dir = data_root / "workspace";
  sandbox_options.outputs_dir = data_root / "outputs";
  sandbox_options.uploads_dir = container / "uploads";
  if (!memory.empty()) sandbox_options.limits.memory_bytes = parse_bytes(memory);

  rt::ExecRequest request;
  if (command.size() == 1) {
    request.command = command[0];
  } else {
    for (const auto& word : command)
      request.command += (request.command.empty() ? "" : " ") + shell_quote(word);
  }
  request.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_seconds * 1000));

  boost::asio::io_context io;
  auto future = boost::asio::co_spawn(io, run_once(runtime, io.get_executor(), sandbox_options, request),
                                      boost::asio::use_future);
  io.run();
  int code = 1;
  std::exception_ptr failure;
  try {
    rt::ExecResult result = future.get();
    std::fwrite(result.stdout_text.data(), 1, result.stdout_text.size(), stdout);
    std::fflush(stdout);
    std::fwrite(result.stderr_text.data(), 1, result.stderr_text.size(), stderr);
    if (result.timed_out) std::fputc('\n', stderr);
    code = result.return_code;
  } catch (...) {
    failure = std::current_exception();
  }
  if (!volume_mount.empty()) rt::Volume::unmount(volume_mount);
  if (temporary) fs::remove_all(container);
  if (failure) std::rethrow_exception(failure);
  return code;
}

}  // namespace sandboxd::app
