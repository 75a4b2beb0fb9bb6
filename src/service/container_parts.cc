// The container service's shared parts, made in the order they depend on each other
// (with the data directory's folders), and the sandbox options every start of a
// container's sandbox uses.
#include "service/container_parts.h"

#include <filesystem>

#include "runtime/host_capacity.h"

namespace sandboxd::service {
namespace {

namespace fs = std::filesystem;

}  // namespace

ContainerParts::ContainerParts(asio::io_context& io, ops::LiveConfig& config, runtime::Runtime* runtime,
                               store::Metadata& metadata)
    : io(io),
      config(config),
      runtime(runtime),
      metadata(metadata),
      admission(ops::Admission::create(config.get()->max_concurrent_executions,
                                       std::chrono::seconds(config.get()->queue_timeout_sec),
                                       config.get()->max_concurrent_executions_per_owner)),
      registry(io.get_executor()),
      spares((fs::path(config.get()->data_dir) / "spares").string(),
             [this] {
               const auto settings = this->settings();
               return VolumeShape{volume_image_bytes(settings->workspace_size_bytes),
                                  settings->sandbox_host_uid};
             }),
      storage(config, (fs::path(config.get()->data_dir) / "containers").string(), spares),
      pool(io, runtime, (fs::path(config.get()->data_dir) / "slots").string(),
           SandboxPool::Settings{[this](const ContainerPaths& dirs, const std::string& name) {
                                   return sandbox_options(dirs, name);
                                 },
                                 [this] { return settings()->prestarted_sandboxes; },
                                 [this] { return static_cast<uid_t>(settings()->sandbox_host_uid); }}) {
  fs::create_directories(fs::path(config.get()->data_dir) / "containers");
  fs::permissions(config.get()->data_dir, fs::perms::owner_all, fs::perm_options::replace);
}

std::string ContainerParts::next_sandbox_name(const std::string& prefix) {
  return prefix + std::to_string(++sandbox_counter_);
}

runtime::SandboxOptions ContainerParts::sandbox_options(const ContainerPaths& dirs,
                                                        const std::string& name) const {
  const auto settings = this->settings();  // one snapshot for the whole sandbox
  runtime::SandboxOptions options;
  options.name = name;
  options.workspace_dir = dirs.workspace;
  options.uploads_dir = dirs.uploads;
  options.outputs_dir = dirs.outputs;
  options.skills_dir = dirs.skills;
  options.receive_mounts = !dirs.skills.empty();  // each request's skills arrive later
  options.tmp_size_bytes = settings->tmp_size_bytes;
  options.home_size_bytes = settings->tmp_size_bytes;
  // Unset: small enough that a sandbox at its pids limit holds at most a quarter of the
  // host's fs.file-max (runtime/host_capacity.h).
  static const runtime::HostCapacity host = runtime::read_host_capacity();
  options.max_open_files =
      settings->open_files_limit
          ? settings->open_files_limit
          : runtime::default_open_files_per_process(host, settings->pids_limit ? settings->pids_limit : 512);
  options.limits.pids = settings->pids_limit;
  options.limits.memory_bytes = settings->memory_limit_bytes;
  if (settings->limit_range_enabled) {
    if (!options.limits.memory_bytes) options.limits.memory_bytes = settings->limit_memory_bytes;
    options.limits.cpu_millis = settings->limit_cpu_millis;
  }
  if (network) network->plan(options);
  return options;
}

}  // namespace sandboxd::service
