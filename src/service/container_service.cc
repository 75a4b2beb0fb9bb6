// The service's face and what belongs to no one part: ids and times, activity (touch),
// listings and the operator's view of running sandboxes, and the sandbox's options.
// Opening, starting and stopping: container_lifecycle.cc; executions:
// container_execution.cc.
#include "service/container_service.h"

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>

#include "base/ids.h"
#include "ops/metrics.h"
#include "runtime/host_capacity.h"
#include "service/host_space.h"
#include "service/store_call.h"

namespace sandboxd::service {
namespace {

namespace fs = std::filesystem;

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ContainerService::ContainerService(asio::io_context& io, ops::LiveConfig& config, runtime::Runtime* runtime,
                                   store::Metadata& metadata)
    : io_(io),
      config_(config),
      runtime_(runtime),
      admission_(ops::Admission::create(config.get()->max_concurrent_executions,
                                        std::chrono::seconds(config.get()->queue_timeout_sec),
                                        config.get()->max_concurrent_executions_per_owner)),
      metadata_(metadata),
      registry_(io.get_executor()),
      reaper_strand_(asio::make_strand(io)),
      reaper_timer_(reaper_strand_),
      spares_((fs::path(config.get()->data_dir) / "spares").string(),
              [this] {
                const auto settings = this->settings();
                return VolumeShape{volume_image_bytes(settings->workspace_size_bytes),
                                   settings->sandbox_host_uid};
              }),
      storage_(config, (fs::path(config.get()->data_dir) / "containers").string(), spares_),
      pool_(io, runtime, (fs::path(config.get()->data_dir) / "slots").string(),
            SandboxPool::Settings{[this](const ContainerPaths& dirs, const std::string& name) {
                                    return sandbox_options(dirs, name);
                                  },
                                  [this] { return settings()->prestarted_sandboxes; },
                                  [this] { return static_cast<uid_t>(settings()->sandbox_host_uid); }}) {
  fs::create_directories(fs::path(config.get()->data_dir) / "containers");
  fs::permissions(config.get()->data_dir, fs::perms::owner_all, fs::perm_options::replace);
  asio::co_spawn(reaper_strand_, reap_idle(), asio::detached);
  pool_.start();
}

ContainerService::~ContainerService() {
  // touch()'s queued writes use the metadata, which the owner destroys after this.
  for (int queued = background_touches_->load(); queued > 0; queued = background_touches_->load())
    background_touches_->wait(queued);
}

bool ContainerService::valid_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' || c == '-'))
      return false;
  return true;
}

std::string ContainerService::new_id() const { return "cntr_" + random_hex(24); }

std::string ContainerService::format_time(int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void ContainerService::touch(Container& container) {
  int64_t now = now_seconds();
  int64_t previous = container.last_used_at.exchange(now);
  // The index only needs second resolution; skip the write within the same second.
  if (previous == now) return;
  if (metadata_.backend() == store::db::Backend::kSqlite) {
    metadata_.touch_container(container.owner, container.id, now);
    return;
  }
  // A round trip nobody needs to wait for. Two of them may land out of order: the
  // index then says a second earlier, which only the listing's expires_at shows.
  // The count outlives this service (the write holds it): the destructor may return
  // the moment it reaches zero, before notify_all returns.
  ++*background_touches_;
  auto write = [&metadata = metadata_, queued = background_touches_, owner = container.owner,
                id = container.id, now] {
    struct Done {
      std::atomic<int>& queued;
      ~Done() {
        --queued;
        queued.notify_all();
      }
    } done{*queued};
    metadata.touch_container(owner, id, now);
  };
  store_call_detached(metadata_.backend(), std::move(write));
}

int64_t ContainerService::expires_at(const Container& container) const {
  return container.last_used_at.load() + settings()->session_ttl_sec;
}

size_t ContainerService::running_sandboxes() const { return registry_.running_count(); }

namespace {
asio::awaitable<std::shared_ptr<runtime::Sandbox>> sandbox_of(Container* container) {
  co_return container->on_strand.sandbox;
}
}  // namespace

asio::awaitable<std::vector<SandboxStatus>> ContainerService::sandboxes() {
  const std::vector<std::shared_ptr<Container>> running = registry_.running();
  std::vector<SandboxStatus> out;
  for (const auto& container : running) {
    // The sandbox pointer belongs to the container's strand. (A plain coroutine with a
    // raw pointer: `running` holds the container, and GCC 12 mishandles the shared_ptr
    // captures of a lambda coroutine here.)
    auto sandbox =
        co_await asio::co_spawn(container->strand, sandbox_of(container.get()), asio::use_awaitable);
    if (!sandbox || !sandbox->running()) continue;
    SandboxStatus status;
    status.owner = container->owner;
    status.container = container->id;
    status.pid = sandbox->pid();
    status.age_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - sandbox->started_at()).count();
    status.memory_bytes = sandbox->memory_usage();
    status.executing = container->executing.load();
    status.last_used_at = container->last_used_at.load();
    out.push_back(std::move(status));
  }
  co_return out;
}

size_t ContainerService::prestarted_ready() const { return pool_.ready(); }

std::vector<std::shared_ptr<Container>> ContainerService::open_containers() const { return registry_.all(); }

std::vector<std::shared_ptr<Container>> ContainerService::find_open_any_owner(const std::string& id) const {
  return registry_.with_id(id);
}

asio::awaitable<std::vector<store::ContainerRecord>> ContainerService::async_list(std::string owner,
                                                                                  size_t limit,
                                                                                  std::string after_id) {
  // From memory when the owner's list is held (a single host): no round trip, no hop.
  if (auto held = metadata_.cached_list_containers(owner, limit, after_id)) co_return std::move(*held);
  auto call = [this, &owner, limit, &after_id] { return list(owner, limit, after_id); };
  co_return co_await store_call(metadata_.backend(), std::move(call));
}

void ContainerService::set_cluster(LeaseKeeper* leases) {
  leases_ = leases;
  leases_->set_on_lost([this](const std::string& storage) { lease_lost(storage); });
  if (durability_)
    durability_->set_on_fenced([leases](const store::FencedError& fenced) { leases->fenced(fenced); });
}

std::vector<store::ContainerRecord> ContainerService::list(const std::string& owner, size_t limit,
                                                           const std::string& after_id) {
  return metadata_.list_containers(owner, limit, after_id);
}

runtime::SandboxOptions ContainerService::sandbox_options(const ContainerPaths& dirs,
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
  if (network_) network_->plan(options);
  return options;
}

ApiError ContainerService::host_out_of_something(const std::string& what, const std::exception& e) const {
  // A full disk, no free loop device, mkfs or mount failing: the host is out of
  // something, which a client can only wait out. The detail goes to the log only.
  spdlog::error("{}: {}", what, e.what());
  ops::metrics().execution_rejected("503", "host_resources");
  if (is_disk_full(e))
    return ApiError::overloaded("The host is out of disk space for a new container; try again later",
                                settings()->retry_after_sec);
  return ApiError::overloaded("The host is out of resources for a new container volume; try again later",
                              settings()->capacity_retry_after_sec);
}

std::shared_ptr<Container> ContainerService::find_open(const std::string& owner,
                                                       const std::string& id) const {
  return registry_.find({owner, id});
}

}  // namespace sandboxd::service
