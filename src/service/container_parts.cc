// The container service's shared parts, made in the order they depend on each other
// (with the data directory's folders), and the sandbox options every start of a
// container's sandbox uses.
#include "service/container_parts.h"

#include <filesystem>

#include "base/blocking.h"
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

asio::awaitable<ContainerParts::StartedSandbox> ContainerParts::start_sandbox(
    std::shared_ptr<Container> container, std::string restore_from) {
  const std::string name = next_sandbox_name(container->storage + "-");
  if (!runtime->starts_over_slots()) {
    auto options = sandbox_options(container->paths, name);
    options.restore_from = std::move(restore_from);
    auto sandbox = co_await runtime->start(container->strand, std::move(options));
    co_return StartedSandbox{std::move(sandbox), nullptr};
  }
  // Mounts: the blocking pool's work, never an I/O thread's wait.
  auto take = [this, &container] { return pool.slot_for(container->paths); };
  std::shared_ptr<Slot> slot = co_await run_blocking(std::move(take));
  auto options = sandbox_options(slot->dirs, name);
  options.pre_started = true;
  const bool restoring = !restore_from.empty();
  options.restore_from = std::move(restore_from);
  std::shared_ptr<runtime::Sandbox> sandbox;
  std::string failure;
  try {
    sandbox = co_await runtime->start(container->strand, std::move(options));
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!sandbox) {
    auto give_back = [this, &slot] { pool.release(slot); };
    co_await run_blocking(std::move(give_back));
    throw runtime::SandboxError(failure);
  }
  // A restored sandbox has its folders where its checkpoint had them already.
  if (!restoring) sandbox->attach_folders();
  slot->sandbox = sandbox;
  co_return StartedSandbox{std::move(sandbox), std::move(slot)};
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
