#include "api/container_service.h"

#include "api/sandbox_network.h"
#include "api/skill_mounts.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <tuple>
#include <random>
#include <spdlog/spdlog.h>

#include "ops/logging.h"
#include "ops/metrics.h"
#include "runtime/volume.h"

namespace sandboxd::api {
namespace {

namespace fs = std::filesystem;
using runtime::Volume;

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_hex(size_t chars) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < chars; ++i) out.push_back(kHex[rng() % 16]);
  return out;
}

void make_owned_dir(const fs::path& dir, uid_t uid, gid_t gid) {
  fs::create_directories(dir);
  if (chown(dir.c_str(), uid, gid) != 0) throw std::runtime_error("chown(" + dir.string() + ") failed");
}

}  // namespace

ContainerService::ContainerService(asio::io_context& io, ops::LiveConfig& config, runtime::Runtime* runtime,
                                   store::Metadata& metadata)
    : io_(io),
      config_(config),
      runtime_(runtime),
      admission_(ops::Admission::create(config.get()->max_concurrent_executions,
                                        std::chrono::seconds(config.get()->queue_timeout_sec))),
      metadata_(metadata),
      containers_dir_((fs::path(config.get()->data_dir) / "containers").string()),
      spares_dir_((fs::path(config.get()->data_dir) / "spares").string()),
      reaper_timer_(io),
      slots_dir_((fs::path(config.get()->data_dir) / "slots").string()) {
  fs::create_directories(containers_dir_);
  // Slots of an earlier run were unmounted by the start-up cleanup: remade on demand.
  fs::remove_all(slots_dir_);
  fs::create_directories(slots_dir_);
  fs::create_directories(spares_dir_);
  fs::permissions(config.get()->data_dir, fs::perms::owner_all, fs::perm_options::replace);
  // Spares of an earlier run are unmounted by now (start-up cleanup): simply remade.
  fs::remove_all(spares_dir_);
  fs::create_directories(spares_dir_);
  spare_thread_ = std::thread([this] { spare_volume_loop(); });
  asio::co_spawn(io_, reap_idle(), asio::detached);
  asio::co_spawn(io_, refill_pool(), asio::detached);
}

ContainerService::~ContainerService() {
  {
    std::lock_guard lock(spares_mutex_);
    stopping_spares_ = true;
  }
  spares_cv_.notify_all();
  if (spare_thread_.joinable()) spare_thread_.join();
  for (const auto& spare : spares_) {
    try {
      Volume::unmount(spare + ".mnt");
    } catch (const std::exception& e) {
      spdlog::warn("unmounting spare {}: {}", spare, e.what());
    }
  }
}

bool ContainerService::valid_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' || c == '-')) return false;
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
  if (previous != now) metadata_.touch_container(container.owner, container.id, now);
}

int64_t ContainerService::expires_at(const Container& container) const {
  return container.last_used_at.load() + settings()->session_ttl_sec;
}

size_t ContainerService::running_sandboxes() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [key, container] : open_) n += container->running();
  return n;
}

namespace {
asio::awaitable<std::shared_ptr<runtime::Sandbox>> sandbox_of(Container* container) { co_return container->sandbox; }
}  // namespace

asio::awaitable<std::vector<SandboxStatus>> ContainerService::sandboxes() {
  std::vector<std::shared_ptr<Container>> running;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, container] : open_)
      if (container->running()) running.push_back(container);
  }
  std::vector<SandboxStatus> out;
  for (auto& container : running) {
    // The sandbox pointer belongs to the container's strand. (A plain coroutine with a
    // raw pointer: `running` holds the container, and GCC 12 mishandles the shared_ptr
    // captures of a lambda coroutine here.)
    auto sandbox = co_await asio::co_spawn(container->strand, sandbox_of(container.get()), asio::use_awaitable);
    if (!sandbox || !sandbox->running()) continue;
    SandboxStatus status;
    status.owner = container->owner;
    status.container = container->id;
    status.pid = sandbox->pid();
    status.age_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sandbox->started_at()).count();
    status.memory_bytes = sandbox->memory_usage();
    status.executing = container->executing.load();
    status.last_used_at = container->last_used_at.load();
    out.push_back(std::move(status));
  }
  co_return out;
}

size_t ContainerService::prestarted_ready() const {
  std::lock_guard lock(pool_mutex_);
  return ready_slots_.size();
}

std::vector<std::shared_ptr<Container>> ContainerService::find_open_any_owner(const std::string& id) const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Container>> out;
  for (const auto& [key, container] : open_)
    if (key.second == id) out.push_back(container);
  return out;
}

void ContainerService::take_volume(const std::string& image, const std::string& mount_point) {
  fs::create_directories(mount_point);
  for (;;) {
    std::string spare;
    {
      std::lock_guard lock(spares_mutex_);
      if (!spares_.empty()) {
        spare = spares_.back();
        spares_.pop_back();
      }
    }
    spares_cv_.notify_all();
    if (spare.empty()) break;
    try {
      Volume::move(spare + ".mnt", mount_point);
      fs::rename(spare, image);
      fs::remove(spare + ".mnt");
      return;
    } catch (const std::exception& e) {
      spdlog::warn("taking spare volume {}: {}", spare, e.what());
    }
  }
  const uid_t uid = settings()->sandbox_host_uid;
  Volume::create(image, volume_image_bytes(), uid, uid);
  Volume::mount(image, mount_point);
}

uint64_t ContainerService::volume_image_bytes() const {
  // ext4's journal, inode tables and group descriptors take about a tenth of a small
  // image; add that, so the space code can use is the configured limit.
  const uint64_t size = settings()->workspace_size_bytes;
  return size + size / 9 + (4u << 20);
}

void ContainerService::spare_volume_loop() {
  constexpr size_t kSpares = 3;
  std::unique_lock lock(spares_mutex_);
  while (!stopping_spares_) {
    if (spares_.size() >= kSpares) {
      spares_cv_.wait_for(lock, std::chrono::seconds(5));
      continue;
    }
    // A container that just took a spare is about to start its first command: format
    // the replacement a moment later (formatting and mounting compete for the same
    // cores and kernel locks), unless no spare is left at all.
    if (!spares_.empty()) spares_cv_.wait_for(lock, std::chrono::milliseconds(300));
    if (stopping_spares_) break;
    lock.unlock();
    std::string image = (fs::path(spares_dir_) / ("spare-" + random_hex(16) + ".img")).string();
    try {
      const uid_t uid = settings()->sandbox_host_uid;
      Volume::create(image, volume_image_bytes(), uid, uid);
      fs::create_directories(image + ".mnt");
      Volume::mount(image, image + ".mnt");
    } catch (const std::exception& e) {
      spdlog::warn("preparing a spare volume: {}", e.what());
      std::error_code ec;
      fs::remove(image, ec);
      lock.lock();
      spares_cv_.wait_for(lock, std::chrono::seconds(5));
      continue;
    }
    lock.lock();
    spares_.push_back(image);
  }
}

void ContainerService::prepare_storage(Container& container, bool fresh) {
  fs::path root = fs::path(containers_dir_) / container.storage;
  const uid_t uid = settings()->sandbox_host_uid;
  container.volume_image = (root / "volume.img").string();
  container.volume_mount = (root / "volume").string();
  container.paths.workspace = (root / "volume" / "workspace").string();
  container.paths.outputs = (root / "volume" / "outputs").string();
  container.paths.uploads = (root / "uploads").string();
  container.paths.skills = SkillMounts::prepare_folder(settings()->data_dir, container.storage);
  if (fresh) {
    fs::create_directories(root);
    take_volume(container.volume_image, container.volume_mount);
  }
  fs::create_directories(container.volume_mount);
  make_owned_dir(container.paths.uploads, uid, uid);
  if (!Volume::is_mounted(container.volume_mount)) Volume::mount(container.volume_image, container.volume_mount);
  make_owned_dir(container.paths.workspace, uid, uid);
  make_owned_dir(container.paths.outputs, uid, uid);
}

std::shared_ptr<Container> ContainerService::load(const store::ContainerRecord& record) {
  auto container = std::make_shared<Container>(io_.get_executor());
  container->owner = record.owner;
  container->id = record.id;
  container->storage = record.storage;
  container->created_at = record.created_at;
  container->last_used_at = record.last_used_at;
  container->api_secret = new_api_secret();
  prepare_storage(*container, /*fresh=*/false);
  return container;
}

Result<std::shared_ptr<Container>> ContainerService::open(const std::string& owner, const std::string& id,
                                                          bool create) {
  if (!valid_id(id))
    return ApiError::invalid_request("Invalid container id: must be 1-128 characters of [A-Za-z0-9._:-]");
  if (shutting_down_) return ApiError::overloaded("The server is shutting down", settings()->retry_after_sec);
  // Creating or mounting happens under the lock so that one (owner, id) is only ever
  // prepared once; both are quick (a rename and a mount).
  std::lock_guard lock(mutex_);
  auto key = std::make_pair(owner, id);
  if (auto it = open_.find(key); it != open_.end()) return it->second;
  if (auto record = metadata_.find_container(owner, id)) {
    auto container = load(*record);
    open_[key] = container;
    return container;
  }
  if (!create) return ApiError::not_found("Container not found: " + id);
  store::ContainerRecord record;
  record.owner = owner;
  record.id = id;
  record.storage = "c" + random_hex(20);
  record.created_at = record.last_used_at = now_seconds();
  auto container = std::make_shared<Container>(io_.get_executor());
  container->owner = owner;
  container->id = id;
  container->storage = record.storage;
  container->created_at = record.created_at;
  container->last_used_at = record.last_used_at;
  container->api_secret = new_api_secret();
  prepare_storage(*container, /*fresh=*/true);
  metadata_.create_container(record);
  open_[key] = container;
  return container;
}

std::vector<store::ContainerRecord> ContainerService::list(const std::string& owner, size_t limit,
                                                           const std::string& after_id) {
  return metadata_.list_containers(owner, limit, after_id);
}

std::shared_ptr<Slot> ContainerService::new_slot() {
  auto slot = std::make_shared<Slot>();
  {
    std::lock_guard lock(pool_mutex_);
    slot->root = (fs::path(slots_dir_) / std::to_string(slots_made_++)).string();
  }
  slot->dirs.workspace = slot->root + "/workspace";
  slot->dirs.uploads = slot->root + "/uploads";
  slot->dirs.outputs = slot->root + "/outputs";
  const uid_t uid = settings()->sandbox_host_uid;
  for (const auto* dir : {&slot->dirs.workspace, &slot->dirs.uploads, &slot->dirs.outputs}) {
    make_owned_dir(*dir, uid, uid);
    Volume::make_shared_mount(*dir);
  }
  slot->dirs.skills = slot->root + "/skills";  // root's, read-only: a container's skills folder goes on it
  fs::create_directories(slot->dirs.skills);
  Volume::make_shared_mount(slot->dirs.skills);
  return slot;
}

runtime::SandboxOptions ContainerService::sandbox_options(const tools::ContainerPaths& dirs, const std::string& name) const {
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
  options.max_open_files = settings->open_files_limit;
  options.limits.pids = settings->pids_limit;
  options.limits.memory_bytes = settings->memory_limit_bytes;
  if (settings->limit_range_enabled) {
    if (!options.limits.memory_bytes) options.limits.memory_bytes = settings->limit_memory_bytes;
    options.limits.cpu_millis = settings->limit_cpu_millis;
  }
  if (network_) network_->plan(options);
  return options;
}

asio::awaitable<void> ContainerService::refill_pool() {
  for (;;) {
    std::shared_ptr<Slot> slot;
    {
      std::lock_guard lock(pool_mutex_);
      if (shutting_down_ || !runtime_ ||
          static_cast<int>(ready_slots_.size()) + pool_starting_ >= settings()->prestarted_sandboxes)
        co_return;
      ++pool_starting_;
      if (!free_slots_.empty()) {
        slot = free_slots_.back();
        free_slots_.pop_back();
      }
    }
    bool ok = false;
    try {
      if (!slot) slot = new_slot();
      auto options = sandbox_options(slot->dirs, "pool-" + std::to_string(++sandbox_counter_));
      options.pre_started = true;
      slot->sandbox = co_await runtime_->start(io_.get_executor(), options);
      if (network_) slot->link = network_->attach(slot->sandbox);
      ops::metrics().sandbox_started();
      ok = true;
      if (shutting_down_) {  // shutdown began while it started: it is not wanted
        co_await slot->sandbox->stop();
        slot->sandbox.reset();
        ok = false;
      }
    } catch (const std::exception& e) {
      spdlog::warn("pre-starting a sandbox: {}", e.what());
    }
    std::lock_guard lock(pool_mutex_);
    --pool_starting_;
    if (!ok) {
      if (slot) free_slots_.push_back(slot);
      co_return;  // try again on the next claim
    }
    ready_slots_.push_back(slot);
  }
}

std::shared_ptr<Slot> ContainerService::claim_prestarted(Container& container) {
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard lock(pool_mutex_);
    while (!ready_slots_.empty() && !slot) {
      slot = ready_slots_.back();
      ready_slots_.pop_back();
      if (!slot->sandbox->running()) {  // died while waiting
        slot->sandbox.reset();
        free_slots_.push_back(slot);
        slot.reset();
      }
    }
  }
  // Refill a little later: starting a sandbox migrates a process between cgroups, which
  // on cgroup v1 stalls every fork on the host for a moment (the claimed sandbox is
  // about to fork its first command).
  auto later = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(100));
  later->async_wait([this, later](const boost::system::error_code&) {
    asio::co_spawn(io_, refill_pool(), asio::detached);
  });
  if (!slot) return nullptr;
  try {
    for (auto [source, target, read_only] : {std::tuple{&container.paths.workspace, &slot->dirs.workspace, false},
                                             std::tuple{&container.paths.uploads, &slot->dirs.uploads, true},
                                             std::tuple{&container.paths.outputs, &slot->dirs.outputs, false}}) {
      Volume::attach_bind(*source, *target, read_only);
      slot->bound.push_back(*target);
    }
    // With the skills loaded in it now, and those that later requests load.
    Volume::attach_bind(container.paths.skills, slot->dirs.skills, /*read_only=*/true, /*recursive=*/true);
    slot->bound.push_back(slot->dirs.skills);
    return slot;
  } catch (const std::exception& e) {
    spdlog::warn("handing a pre-started sandbox to container {}: {}", container.id, e.what());
    auto sandbox = std::move(slot->sandbox);
    asio::co_spawn(io_, stop_and_release(sandbox, slot), asio::detached);
    return nullptr;
  }
}

asio::awaitable<void> ContainerService::stop_and_release(std::shared_ptr<runtime::Sandbox> sandbox,
                                                        std::shared_ptr<Slot> slot) {
  co_await sandbox->stop();
  release_slot(slot);
}

// After its sandbox has stopped: the container's binds come off and the slot is reused.
void ContainerService::release_slot(const std::shared_ptr<Slot>& slot) {
  for (const auto& dir : slot->bound) {
    try {
      // The container's skills folder is shared: its copy comes off without taking
      // the skills of requests still running off the original.
      if (dir == slot->dirs.skills) Volume::detach_private(dir);
      else Volume::unmount(dir);  // the topmost mount there: the container's bind
    } catch (const std::exception& e) {
      spdlog::warn("releasing slot {}: {}", dir, e.what());
    }
  }
  slot->bound.clear();
  slot->sandbox.reset();
  slot->link.reset();
  std::lock_guard lock(pool_mutex_);
  free_slots_.push_back(slot);
}

asio::awaitable<Result<void>> ContainerService::make_room(std::shared_ptr<Container> for_container) {
  for (;;) {
    const auto settings = this->settings();
    std::shared_ptr<Container> victim;
    {
      std::lock_guard lock(mutex_);
      uint64_t running = static_cast<uint64_t>(quota_reserved_.load());
      for (const auto& [key, container] : open_) running += container->running() ? 1 : 0;
      const uint64_t cpu = settings->limit_range_enabled ? settings->limit_cpu_millis : 0;
      const uint64_t memory = settings->memory_limit_bytes ? settings->memory_limit_bytes
                              : settings->limit_range_enabled ? settings->limit_memory_bytes : 0;
      const uint64_t after = running + 1;
      const bool fits = !settings->quota_enabled ||
                        (after <= settings->quota_pods && after * cpu <= settings->quota_cpu_millis &&
                         after * memory <= settings->quota_memory_bytes);
      if (fits) {
        ++quota_reserved_;  // released by the caller once its sandbox runs (or failed)
        co_return Result<void>();
      }
      // Full: the least recently used sandbox that runs no command makes room.
      for (const auto& [key, container] : open_) {
        if (container == for_container || !container->running() || container->executing.load() > 0) continue;
        if (!victim || container->last_used_at.load() < victim->last_used_at.load()) victim = container;
      }
      if (!victim) {
        ops::metrics().execution_rejected("503", "quota");
        co_return ApiError::overloaded("The sandbox quota is full (" + std::to_string(running) + " of " +
                                           std::to_string(settings->quota_pods) +
                                           " running, none idle); try again later",
                                       settings->capacity_retry_after_sec);
      }
    }
    spdlog::info("quota: stopping the idle sandbox of container {} ({}) to make room", victim->id, victim->owner);
    co_await stop(victim, "quota");
  }
}

void ContainerService::check_store() {
  constexpr std::string_view kUploads = "/mnt/user-data/uploads/";
  size_t containers = 0, dropped = 0, temporaries = 0, reported = 0;
  std::set<std::string> known;
  for (const auto& record : metadata_.all_containers()) {
    ++containers;
    known.insert(record.storage);
    const fs::path root = fs::path(containers_dir_) / record.storage;
    std::error_code ec;
    if (!fs::is_directory(root, ec)) {
      spdlog::error("start-up check: container {} of {} has no folder {}; its files are lost", record.id,
                    record.owner, root.string());
      ++reported;
      continue;
    }
    for (const auto& file : metadata_.files_of(record.storage)) {
      if (!file.path.starts_with(kUploads)) continue;  // outputs live in the volume, checked when it mounts
      const fs::path host = root / "uploads" / file.path.substr(kUploads.size());
      if (fs::is_regular_file(fs::symlink_status(host, ec))) continue;
      metadata_.delete_file(record.storage, file.path);
      spdlog::warn("start-up check: {} of container {} ({}) is gone from disk; its record is dropped", file.path,
                   record.id, record.owner);
      ++dropped;
    }
    for (auto it = fs::recursive_directory_iterator(root / "uploads", fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->path().filename().string().starts_with(store::kTempPrefix)) continue;
      std::error_code removed;
      if (it->is_regular_file(removed) && fs::remove(it->path(), removed)) ++temporaries;
    }
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(containers_dir_, ec)) {
    if (known.count(entry.path().filename().string())) continue;
    spdlog::warn("start-up check: {} belongs to no container; kept for inspection", entry.path().string());
    ++reported;
  }
  spdlog::info("start-up check: {} container(s); {} record(s) of vanished uploads dropped, {} temporary file(s) "
               "removed, {} problem(s) reported",
               containers, dropped, temporaries, reported);
}

std::shared_ptr<Container> ContainerService::find_open(const std::string& owner, const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = open_.find({owner, id});
  return it == open_.end() ? nullptr : it->second;
}

asio::awaitable<Result<std::shared_ptr<runtime::Sandbox>>> ContainerService::ensure_sandbox(
    std::shared_ptr<Container> container) {
  for (;;) {
    if (container->deleted) co_return ApiError::not_found("Container not found: " + container->id);
    if (container->sandbox && container->sandbox->running()) co_return container->sandbox;
    container->sandbox_up = false;  // it stopped by itself (PID 1 died)
    if (!runtime_) co_return ApiError{server::http::status::service_unavailable, "api_error",
                                      unavailable_reason(), {}};
    if (container->starting) {
      boost::system::error_code ec;
      co_await container->started_event->async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    // Room under the quota first (this may stop the least recently used idle sandbox).
    auto room = co_await make_room(container);
    if (!room) co_return room.error();
    struct Release {
      std::atomic<int>& reserved;
      ~Release() { --reserved; }
    } release{quota_reserved_};
    // A pre-started sandbox first: it only needs the container's folders bound in.
    if (auto slot = claim_prestarted(*container)) {
      container->slot = slot;
      container->sandbox = slot->sandbox;
      container->link = slot->link;
      if (container->link) container->link->bind(container);
      container->sandbox_up = true;
      container->live_sandbox.store(container->sandbox);
      co_return container->sandbox;
    }
    container->starting = true;
    container->started_event = std::make_unique<asio::steady_timer>(container->strand,
                                                                    std::chrono::steady_clock::time_point::max());
    auto options = sandbox_options(container->paths, container->storage + "-" + std::to_string(++sandbox_counter_));
    std::string error;
    try {
      container->sandbox = co_await runtime_->start(container->strand, options);
      if (network_) {
        container->link = network_->attach(container->sandbox);
        container->link->bind(container);
      }
      container->sandbox_up = true;
      container->live_sandbox.store(container->sandbox);
      ops::metrics().sandbox_started();
    } catch (const std::exception& e) {
      error = e.what();
      spdlog::error("starting a sandbox for container {} of {}: {}", container->id, container->owner, error);
    }
    container->starting = false;
    container->started_event->cancel();
    if (!error.empty()) co_return ApiError{server::http::status::service_unavailable, "api_error",
                                           "The sandbox could not be started", {}};
  }
}

asio::awaitable<Result<runtime::ExecResult>> ContainerService::exec(std::shared_ptr<Container> container,
                                                                    runtime::ExecRequest request, bool restart) {
  touch(*container);
  if (restart) {
    co_await asio::co_spawn(container->strand, stop_on_strand(container, "restart"), asio::use_awaitable);
    // restart empties the workspace; uploads and outputs are kept.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(container->paths.workspace, ec))
      fs::remove_all(entry.path(), ec);
    if (request.command.empty()) co_return runtime::ExecResult{};
  }
  // A slot first (waiting in line if need be), before a sandbox is started for it.
  std::chrono::duration<double> waited{};
  auto ticket = co_await admission_->acquire(&waited);
  ops::metrics().admission_waited(waited.count());
  if (!ticket) {
    ops::metrics().execution_rejected("429", "queue_timeout");
    co_return ApiError::rate_limited("Too many commands are running; none finished within " +
                                         std::to_string(settings()->queue_timeout_sec) + "s. Try again later.",
                                     settings()->retry_after_sec);
  }
  // A running sandbox is used as is; starting one (or finding it stopped) is the
  // strand's business.
  Result<std::shared_ptr<runtime::Sandbox>> sandbox = container->live_sandbox.load();
  if (!*sandbox || !(*sandbox)->running() || container->deleted)
    sandbox = co_await asio::co_spawn(container->strand, ensure_sandbox(container), asio::use_awaitable);
  if (!sandbox) {
    ops::metrics().execution_completed("failed", 0);
    co_return sandbox.error();
  }
  Result<runtime::ExecResult> outcome = ApiError::internal();
  ++container->executing;
  struct Done {
    std::atomic<int>& count;
    ~Done() { --count; }
  } done{container->executing};
  const auto started = std::chrono::steady_clock::now();
  const char* label = "failed";
  const std::string command_head = request.command.substr(0, 4096);  // for the audit log
  try {
    outcome = co_await (*sandbox)->exec(std::move(request));
    label = outcome->cancelled ? "cancelled" : outcome->timed_out ? "timeout" : outcome->return_code == 0 ? "ok" : "nonzero";
  } catch (const runtime::SandboxError& e) {
    spdlog::warn("execution in container {} failed: {}", container->id, e.what());
    outcome = ApiError{server::http::status::service_unavailable, "api_error", "The sandbox stopped during the command", {}};
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ops::metrics().execution_completed(label, seconds);
  const int64_t return_code = outcome ? outcome->return_code : -1;
  const bool truncated = outcome && (outcome->stdout_truncated || outcome->stderr_truncated);
  const bool timed_out = outcome && outcome->timed_out;
  ops::log_event(spdlog::level::info, "execution",
                 {{"owner", container->owner}, {"container", container->id}, {"ms", seconds * 1000},
                  {"outcome", label}, {"return_code", return_code}, {"truncated", truncated}, {"timed_out", timed_out}});
  if (auto* audit = ops::audit())
    audit->record("execution", {{"owner", container->owner}, {"container", container->id},
                                {"command", command_head}, {"outcome", label},
                                {"return_code", return_code}});
  touch(*container);
  co_return outcome;
}

asio::awaitable<void> ContainerService::stop_on_strand(std::shared_ptr<Container> container, const char* reason) {
  while (container->starting) {
    boost::system::error_code ec;
    co_await container->started_event->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  container->sandbox_up = false;
  container->live_sandbox.store(nullptr);
  container->link.reset();  // its listeners close with the sandbox
  if (auto sandbox = std::move(container->sandbox)) {
    co_await sandbox->stop();
    ops::metrics().sandbox_stopped(reason);
  }
  if (auto slot = std::move(container->slot)) release_slot(slot);
}

asio::awaitable<void> ContainerService::stop(std::shared_ptr<Container> container, const char* reason) {
  co_await asio::co_spawn(container->strand, stop_on_strand(container, reason), asio::use_awaitable);
}

asio::awaitable<void> ContainerService::remove(std::shared_ptr<Container> container) {
  container->deleted = true;
  co_await stop(container, "deleted");
  {
    std::lock_guard lock(mutex_);
    open_.erase({container->owner, container->id});
  }
  metadata_.delete_container(container->owner, container->id);
  SkillMounts::remove_folder(settings()->data_dir, container->storage);
  try {
    Volume::unmount(container->volume_mount);
  } catch (const std::exception& e) {
    spdlog::warn("unmounting {}: {}", container->volume_mount, e.what());
  }
  std::error_code ec;
  fs::remove_all(fs::path(containers_dir_) / container->storage, ec);
}

asio::awaitable<void> ContainerService::reap_idle() {
  const auto interval = std::chrono::seconds(std::clamp(settings()->session_ttl_sec / 4, 1, 30));
  while (!shutting_down_) {
    reaper_timer_.expires_after(interval);
    boost::system::error_code ec;
    co_await reaper_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (shutting_down_) break;
    const int64_t now = now_seconds();
    std::vector<std::shared_ptr<Container>> idle;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [key, container] : open_)
        if (container->last_used_at.load() + settings()->session_ttl_sec <= now) idle.push_back(container);
    }
    for (auto& container : idle) {
      if (container->executing.load() > 0) continue;
      co_await stop(container, "idle");
    }
    // Unmount volumes nobody holds (the map is then the only owner).
    std::lock_guard lock(mutex_);
    for (auto& container : idle) {
      auto it = open_.find({container->owner, container->id});
      if (it == open_.end() || it->second != container) continue;
      if (container->running() || container->last_used_at.load() + settings()->session_ttl_sec > now) continue;
      if (container.use_count() > 2) continue;  // `idle` and the map: nobody else
      try {
        if (Volume::try_unmount(container->volume_mount)) {
          SkillMounts::remove_folder(settings()->data_dir, container->storage);  // remade when it opens again
          open_.erase(it);
        }
      } catch (const std::exception& e) {
        spdlog::warn("unmounting idle volume {}: {}", container->volume_mount, e.what());
      }
    }
  }
}

asio::awaitable<void> ContainerService::shutdown() {
  shutting_down_ = true;
  reaper_timer_.cancel();
  std::vector<std::shared_ptr<Container>> all;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, container] : open_) all.push_back(container);
  }
  for (auto& container : all) co_await stop(container, "shutdown");
  // Pre-starts under way finish (and stop themselves, seeing the shutdown) first.
  for (asio::steady_timer pause(io_);;) {
    {
      std::lock_guard lock(pool_mutex_);
      if (pool_starting_ == 0) break;
    }
    pause.expires_after(std::chrono::milliseconds(10));
    boost::system::error_code ec;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  std::vector<std::shared_ptr<Slot>> slots;
  {
    std::lock_guard lock(pool_mutex_);
    slots = ready_slots_;
    slots.insert(slots.end(), free_slots_.begin(), free_slots_.end());
    ready_slots_.clear();
    free_slots_.clear();
  }
  for (auto& slot : slots) {
    if (slot->sandbox) co_await slot->sandbox->stop();
    for (const auto& mount_point : Volume::mounts_under(slot->root)) {
      try {
        Volume::unmount(mount_point);
      } catch (const std::exception& e) {
        spdlog::warn("unmounting {}: {}", mount_point, e.what());
      }
    }
  }
  std::lock_guard lock(mutex_);
  for (auto& container : all) {
    try {
      Volume::unmount(container->volume_mount);
    } catch (const std::exception& e) {
      spdlog::warn("unmounting {}: {}", container->volume_mount, e.what());
    }
  }
  open_.clear();
}

}  // namespace sandboxd::api

namespace sandboxd::api {

asio::awaitable<std::string> ContainerService::probe() {
  if (!runtime_) co_return unavailable_reason();
  struct statvfs disk {};
  if (statvfs(settings()->data_dir.c_str(), &disk) == 0 &&
      static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize < (64ull << 20))
    co_return "the data directory's disk is full (less than 64 MiB free)";
  // A sandbox over empty folders of its own, with one command, as a container gets.
  const std::string name = "probe-" + std::to_string(++sandbox_counter_);
  const fs::path root = fs::path(settings()->data_dir) / "probes" / name;
  const uid_t uid = settings()->sandbox_host_uid;
  tools::ContainerPaths dirs{(root / "workspace").string(), (root / "uploads").string(), (root / "outputs").string(), ""};
  std::string problem;
  try {
    for (const auto* dir : {&dirs.workspace, &dirs.uploads, &dirs.outputs}) {
      fs::create_directories(*dir);
      if (chown(dir->c_str(), uid, uid) != 0)
        throw std::runtime_error("chown " + *dir + ": " + std::strerror(errno));
    }
    auto sandbox = co_await runtime_->start(io_.get_executor(), sandbox_options(dirs, name));
    runtime::ExecRequest request;
    request.command = "true";
    request.timeout = std::chrono::seconds(10);
    try {
      auto result = co_await sandbox->exec(std::move(request));
      if (result.return_code != 0) problem = "a probe command exited with " + std::to_string(result.return_code);
    } catch (const std::exception& e) {
      problem = std::string("a probe command could not run: ") + e.what();
    }
    co_await sandbox->stop();
  } catch (const std::exception& e) {
    problem = std::string("a sandbox cannot start: ") + e.what();
  }
  std::error_code ec;
  fs::remove_all(root, ec);
  co_return problem;
}

}  // namespace sandboxd::api
