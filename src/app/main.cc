// The sandboxd command line.
//   sandboxd run [--container DIR] [--timeout S] [--memory BYTES] [--workspace-size BYTES] -- CMD...
//   sandboxd serve [--config FILE]
//   sandboxd config check FILE
//   sandboxd ps [--config FILE | --url URL --admin-token TOKEN]
//   sandboxd stop CONTAINER [--owner OWNER] [--config FILE | --url URL --admin-token TOKEN]
//   sandboxd admin drain [--config FILE | --url URL --admin-token TOKEN]
//   sandboxd image import FILE [--name NAME[:TAG]] | build NAME[:TAG] [--minimal] [--packages a,b] [--mirror
//   URL]
//                  | ls | rm NAME[:TAG]     (each with [--data-dir DIR | --config FILE])
//   sandboxd version

#include <CLI/CLI.hpp>
#include <cstdio>

#include "app/admin_client.h"
#include "app/image_command.h"
#include "app/mcp_bridge.h"
#include "app/run_command.h"
#include "app/serve.h"
#include "ops/config.h"
#include "sandboxd_build_info.h"  // generated: cmake/write_build_info.cmake

int main(int argc, char** argv) {
  CLI::App app{"sandboxd: isolated code execution for AI assistants"};
  app.require_subcommand(1);

  auto* version = app.add_subcommand("version", "Print the version, the git commit and the build type");
  version->callback([] {
    std::printf("sandboxd %s\ncommit: %s\nbuild type: %s\n", SANDBOXD_VERSION, SANDBOXD_GIT_COMMIT,
                SANDBOXD_BUILD_TYPE);
  });

  sandboxd::app::RunOptions run_options;
  auto* run = app.add_subcommand("run", "Run one command in a fresh sandbox over a container directory");
  run->add_option("--container", run_options.container,
                  "Container directory (workspace/, uploads/, outputs/ are created); temporary if omitted");
  run->add_option("--timeout", run_options.timeout_seconds, "Timeout in seconds (default 60)")
      ->check(CLI::PositiveNumber);
  run->add_option("--memory", run_options.memory, "Memory limit, e.g. 512Mi (swap included)");
  run->add_option("--workspace-size", run_options.workspace_size,
                  "Hard limit on workspace + outputs, e.g. 100Mi (an ext4 volume in the container)");
  run->add_option("command", run_options.command, "The command (one argument: a bash script)")->required();
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
  auto* admin = app.add_subcommand("admin", "Operator actions on a running server");
  auto* drain = admin->add_subcommand(
      "drain",
      "Stop every sandbox, flush and release its containers, refuse new ones (a Kubernetes preStop)");
  add_admin_options(drain);
  admin->require_subcommand(1);

  // Images live in the data directory `serve` uses: --data-dir, else server.dataDir of
  // --config, else the default.
  std::string image_data_dir, image_config, image_file, image_name, image_mirror;
  bool image_minimal = false;
  std::vector<std::string> image_packages;
  auto* image = app.add_subcommand("image", "Sandbox images: import, build, ls, rm");
  image->require_subcommand(1);
  auto add_store_options = [&](CLI::App* cmd) {
    cmd->add_option("--data-dir", image_data_dir,
                    "The data directory (default: server.dataDir, ./sandboxd-data)");
    cmd->add_option("--config", image_config, "The server's configuration file (for server.dataDir)")
        ->check(CLI::ExistingFile);
  };
  auto* image_import =
      image->add_subcommand("import", "Import a `docker save` or OCI image tarball (plain or gzip)");
  image_import->add_option("file", image_file, "The tarball")->required()->check(CLI::ExistingFile);
  image_import->add_option("--name", image_name, "NAME[:TAG] (default: the tarball's own)");
  auto* image_build = image->add_subcommand("build", "Build a Debian bookworm image with debootstrap");
  image_build->add_option("name", image_name, "NAME[:TAG]")->required();
  image_build->add_flag("--minimal", image_minimal, "minbase and --packages only (not the data-science set)");
  image_build->add_option("--packages", image_packages, "More Debian packages (comma-separated)")
      ->delimiter(',');
  image_build->add_option("--mirror", image_mirror, "Debian mirror (default http://deb.debian.org/debian)");
  auto* image_ls = image->add_subcommand("ls", "List the installed images");
  auto* image_rm = image->add_subcommand("rm", "Remove an image");
  image_rm->add_option("name", image_name, "NAME[:TAG]")->required();
  for (auto* cmd : {image_import, image_build, image_ls, image_rm}) add_store_options(cmd);

  sandboxd::app::McpBridgeOptions mcp_options;
  auto* mcp = app.add_subcommand(
      "mcp", "A stdio MCP server for local MCP clients, bridged to a running server's /mcp endpoint");
  mcp->add_option("--url", mcp_options.url, "The server (http://HOST:PORT) or its MCP endpoint (…/mcp)")
      ->required();
  mcp->add_option("--token-env", mcp_options.token_env,
                  "The environment variable that holds the API token (default: SANDBOXD_TOKEN)");

  CLI11_PARSE(app, argc, argv);
  if (mcp->parsed()) return sandboxd::app::mcp_bridge(mcp_options);
  if (image->parsed()) {
    std::string data_dir = image_data_dir;
    if (data_dir.empty()) {
      try {
        data_dir = (image_config.empty() ? sandboxd::ops::default_config()
                                         : sandboxd::ops::load_config_file(image_config))
                       .data_dir;
      } catch (const sandboxd::ops::ConfigError& e) {
        std::fprintf(stderr, "sandboxd: configuration: %s\n", e.what());
        return 2;
      }
    }
    namespace im = sandboxd::app;
    if (image_import->parsed()) return im::image_import_command(data_dir, image_file, image_name);
    if (image_build->parsed())
      return im::image_build_command(data_dir, image_name, image_minimal, image_packages, image_mirror);
    if (image_ls->parsed()) return im::image_ls_command(data_dir);
    return im::image_rm_command(data_dir, image_name);
  }
  if (ps->parsed() || stop->parsed() || drain->parsed()) {
    sandboxd::app::AdminTarget target;
    try {
      auto config = admin_config.empty() ? sandboxd::ops::default_config()
                                         : sandboxd::ops::load_config_file(admin_config);
      target.url = "http://" + config.listen_host + ":" + std::to_string(config.listen_port);
      target.token = config.admin_token;
    } catch (const sandboxd::ops::ConfigError& e) {
      std::fprintf(stderr, "sandboxd: configuration: %s\n", e.what());
      return 2;
    }
    if (!admin_url.empty()) target.url = admin_url;
    if (const char* env = std::getenv("SANDBOXD_ADMIN_TOKEN"); env && target.token.empty())
      target.token = env;
    if (!admin_token.empty()) target.token = admin_token;
    if (target.token.empty()) {
      std::fprintf(stderr,
                   "sandboxd: no admin token (--admin-token, SANDBOXD_ADMIN_TOKEN or auth.adminToken)\n");
      return 2;
    }
    if (ps->parsed()) return sandboxd::app::admin_ps(target);
    if (drain->parsed()) return sandboxd::app::admin_drain(target);
    return sandboxd::app::admin_stop(
        target, stop_container, stop_owner.empty() ? std::nullopt : std::optional<std::string>(stop_owner));
  }
  if (serve->parsed()) {
    try {
      auto config = config_file.empty() ? sandboxd::ops::default_config()
                                        : sandboxd::ops::load_config_file(config_file);
      return sandboxd::app::serve(std::move(config), config_file);
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
      return sandboxd::app::run_command(run_options);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sandboxd run: %s\n", e.what());
      return 125;
    }
  }
  return 0;
}
