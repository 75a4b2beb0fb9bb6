// The sandboxd command line.
//   sandboxd run [--container DIR] [--timeout S] [--memory BYTES] [--workspace-size BYTES] -- CMD...
//   sandboxd serve [--config FILE]
//   sandboxd config check FILE
//   sandboxd ps [--config FILE | --url URL --admin-token TOKEN]
//   sandboxd stop CONTAINER [--owner OWNER] [--config FILE | --url URL --admin-token TOKEN]
//   sandboxd image import FILE [--name NAME[:TAG]] | build NAME[:TAG] [--minimal] [--packages a,b] [--mirror URL]
//                  | ls | rm NAME[:TAG]     (each with [--data-dir DIR | --config FILE])
//   sandboxd version

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>

#include "images/cli.h"
#include "ops/admin_client.h"
#include "ops/config.h"
#include "ops/serve.h"
#include "runtime/runtime.h"
#include "runtime/volume.h"
#include "sandboxd_build_info.h"  // generated: cmake/write_build_info.cmake

namespace fs = std::filesystem;
namespace rt = sandboxd::runtime;

namespace {

// "512Mi", "1G", "100000" -> bytes (the configuration's quantities). Throws
// CLI::ValidationError on anything else.
uint64_t parse_bytes(const std::string& text) {
  auto bytes = sandboxd::ops::parse_bytes(text);
  if (!bytes) throw CLI::ValidationError("size", "not a size: " + text + " (use K, Ki, M, Mi, G, Gi)");
  return *bytes;
}

std::string shell_quote(const std::string& word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

void make_owned_dir(const fs::path& dir, uint32_t uid, uint32_t gid) {
  fs::create_directories(dir);
  if (chown(dir.c_str(), uid, gid) != 0)
    throw std::runtime_error("chown(" + dir.string() + "): " + std::strerror(errno));
}

int run_command(const std::string& container_arg, double timeout_seconds, const std::string& memory,
                const std::string& workspace_size, const std::vector<std::string>& command) {
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
    if (!fs::exists(image)) rt::Volume::create(image, parse_bytes(workspace_size), uid, gid);
    volume_mount = container / "volume";
    fs::create_directories(volume_mount);
    rt::Volume::mount(image, volume_mount);
    data_root = volume_mount;
  }
  make_owned_dir(data_root / "workspace", uid, gid);
  make_owned_dir(data_root / "outputs", uid, gid);
  make_owned_dir(container / "uploads", uid, gid);

  rt::SandboxOptions sandbox_options;
  std::random_device random;
  sandbox_options.name = "r" + std::to_string(getpid()) + "-" + std::to_string(random() % 100000);
  sandbox_options.workspace_dir = data_root / "workspace";
  sandbox_options.outputs_dir = data_root / "outputs";
  sandbox_options.uploads_dir = container / "uploads";
  if (!memory.empty()) sandbox_options.limits.memory_bytes = parse_bytes(memory);

  rt::ExecRequest request;
  if (command.size() == 1) {
    request.command = command[0];
  } else {
    for (const auto& word : command) request.command += (request.command.empty() ? "" : " ") + shell_quote(word);
  }
  request.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_seconds * 1000));

  boost::asio::io_context io;
  auto future = boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<rt::ExecResult> {
        auto sandbox = co_await runtime.start(io.get_executor(), sandbox_options);
        std::exception_ptr failure;
        rt::ExecResult result;
        try {
          result = co_await sandbox->exec(request);
        } catch (...) {
          failure = std::current_exception();
        }
        co_await sandbox->stop();
        if (failure) std::rethrow_exception(failure);
        co_return result;
      }(),
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sandboxd: isolated code execution for AI assistants"};
  app.require_subcommand(1);

  auto* version = app.add_subcommand("version", "Print the version, the git commit and the build type");
  version->callback([] {
    std::printf("sandboxd %s\ncommit: %s\nbuild type: %s\n", SANDBOXD_VERSION, SANDBOXD_GIT_COMMIT, SANDBOXD_BUILD_TYPE);
  });

  std::string container, memory, workspace_size;
  double timeout = 60;
  std::vector<std::string> command;
  auto* run = app.add_subcommand("run", "Run one command in a fresh sandbox over a container directory");
  run->add_option("--container", container,
                  "Container directory (workspace/, uploads/, outputs/ are created); temporary if omitted");
  run->add_option("--timeout", timeout, "Timeout in seconds (default 60)")->check(CLI::PositiveNumber);
  run->add_option("--memory", memory, "Memory limit, e.g. 512Mi (swap included)");
  run->add_option("--workspace-size", workspace_size,
                  "Hard limit on workspace + outputs, e.g. 100Mi (an ext4 volume in the container)");
  run->add_option("command", command, "The command (one argument: a bash script)")->required();
  run->positionals_at_end();

  std::string config_file;
  auto* serve = app.add_subcommand("serve", "Run the service (embedded defaults without --config)");
  serve->add_option("--config", config_file, "YAML configuration file")->check(CLI::ExistingFile);

  std::string check_file;
  auto* config_cmd = app.add_subcommand("config", "Configuration tools");
  auto* check = config_cmd->add_subcommand("check", "Validate a configuration file without starting");
  check->add_option("file", check_file, "YAML configuration file")->required();
  config_cmd->require_subcommand(1);

  // The operator's commands: the server's URL and admin token come from its config
  // file (listen, auth.adminToken), from flags, or from SANDBOXD_ADMIN_TOKEN.
  std::string admin_config, admin_url, admin_token, stop_container, stop_owner;
  auto add_admin_options = [&](CLI::App* cmd) {
    cmd->add_option("--config", admin_config, "The server's configuration file")->check(CLI::ExistingFile);
    cmd->add_option("--url", admin_url, "The server's URL (default: its listen address)");
    cmd->add_option("--admin-token", admin_token, "auth.adminToken (default: SANDBOXD_ADMIN_TOKEN)");
  };
  auto* ps = app.add_subcommand("ps", "List the running sandboxes of a running server");
  add_admin_options(ps);
  auto* stop = app.add_subcommand("stop", "Stop a container's sandbox (its files are kept)");
  add_admin_options(stop);
  stop->add_option("container", stop_container, "The container id")->required();
  stop->add_option("--owner", stop_owner, "The container's owner, when several owners use the id");

  // Images live in the data directory `serve` uses: --data-dir, else server.dataDir of
  // --config, else the default.
  std::string image_data_dir, image_config, image_file, image_name, image_mirror;
  bool image_minimal = false;
  std::vector<std::string> image_packages;
  auto* image = app.add_subcommand("image", "Sandbox images: import, build, ls, rm");
  image->require_subcommand(1);
  auto add_store_options = [&](CLI::App* cmd) {
    cmd->add_option("--data-dir", image_data_dir, "The data directory (default: server.dataDir, ./sandboxd-data)");
    cmd->add_option("--config", image_config, "The server's configuration file (for server.dataDir)")
        ->check(CLI::ExistingFile);
  };
  auto* image_import = image->add_subcommand("import", "Import a `docker save` or OCI image tarball (plain or gzip)");
  image_import->add_option("file", image_file, "The tarball")->required()->check(CLI::ExistingFile);
  image_import->add_option("--name", image_name, "NAME[:TAG] (default: the tarball's own)");
  auto* image_build = image->add_subcommand("build", "Build a Debian bookworm image with debootstrap");
  image_build->add_option("name", image_name, "NAME[:TAG]")->required();
  image_build->add_flag("--minimal", image_minimal, "minbase and --packages only (not the data-science set)");
  image_build->add_option("--packages", image_packages, "More Debian packages (comma-separated)")->delimiter(',');
  image_build->add_option("--mirror", image_mirror, "Debian mirror (default http://deb.debian.org/debian)");
  auto* image_ls = image->add_subcommand("ls", "List the installed images");
  auto* image_rm = image->add_subcommand("rm", "Remove an image");
  image_rm->add_option("name", image_name, "NAME[:TAG]")->required();
  for (auto* cmd : {image_import, image_build, image_ls, image_rm}) add_store_options(cmd);

  CLI11_PARSE(app, argc, argv);
  if (image->parsed()) {
    std::string data_dir = image_data_dir;
    if (data_dir.empty()) {
      try {
        data_dir = (image_config.empty() ? sandboxd::ops::default_config()
                                         : sandboxd::ops::load_config_file(image_config)).data_dir;
      } catch (const sandboxd::ops::ConfigError& e) {
        std::fprintf(stderr, "sandboxd: configuration: %s\n", e.what());
        return 2;
      }
    }
    namespace im = sandboxd::images;
    if (image_import->parsed()) return im::image_import_command(data_dir, image_file, image_name);
    if (image_build->parsed())
      return im::image_build_command(data_dir, image_name, image_minimal, image_packages, image_mirror);
    if (image_ls->parsed()) return im::image_ls_command(data_dir);
    return im::image_rm_command(data_dir, image_name);
  }
  if (ps->parsed() || stop->parsed()) {
    sandboxd::ops::AdminTarget target;
    try {
      auto config =
          admin_config.empty() ? sandboxd::ops::default_config() : sandboxd::ops::load_config_file(admin_config);
      target.url = "http://" + config.listen_host + ":" + std::to_string(config.listen_port);
      target.token = config.admin_token;
    } catch (const sandboxd::ops::ConfigError& e) {
      std::fprintf(stderr, "sandboxd: configuration: %s\n", e.what());
      return 2;
    }
    if (!admin_url.empty()) target.url = admin_url;
    if (const char* env = std::getenv("SANDBOXD_ADMIN_TOKEN"); env && target.token.empty()) target.token = env;
    if (!admin_token.empty()) target.token = admin_token;
    if (target.token.empty()) {
      std::fprintf(stderr, "sandboxd: no admin token (--admin-token, SANDBOXD_ADMIN_TOKEN or auth.adminToken)\n");
      return 2;
    }
    if (ps->parsed()) return sandboxd::ops::admin_ps(target);
    return sandboxd::ops::admin_stop(target, stop_container,
                                     stop_owner.empty() ? std::nullopt : std::optional<std::string>(stop_owner));
  }
  if (serve->parsed()) {
    try {
      auto config = config_file.empty() ? sandboxd::ops::default_config() : sandboxd::ops::load_config_file(config_file);
      return sandboxd::ops::serve(std::move(config), config_file);
    } catch (const sandboxd::ops::ConfigError& e) {
      std::fprintf(stderr, "sandboxd: configuration: %s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sandboxd serve: %s\n", e.what());
      return 1;
    }
  }
  if (check->parsed()) {
    try {
      sandboxd::ops::load_config_file(check_file);
      std::printf("%s: ok\n", check_file.c_str());
      return 0;
    } catch (const sandboxd::ops::ConfigError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
  }
  if (run->parsed()) {
    try {
      return run_command(container, timeout, memory, workspace_size, command);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sandboxd run: %s\n", e.what());
      return 125;
    }
  }
  return 0;
}
