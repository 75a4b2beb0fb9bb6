#include "service/container_service.h"

#include "service/host_space.h"
#include "service/sandbox_credentials.h"
#include "service/skill_mounts.h"
#include "service/store_call.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <functional>
#include <optional>
#include <tuple>
#include <random>
#include <spdlog/spdlog.h>

#include "ops/logging.h"
#include "ops/metrics.h"
#include "runtime/host_capacity.h"
#include "runtime/volume.h"
#include "base/blocking.h"
#include "base/ids.h"

namespace sandboxd::service {
namespace {

// One execution (a command, a Python call) under way in a container: counted in
// `executing` while it runs, and with the bucket a change before and after it, so that
// what it writes is flushed after it (cluster/container_durability.h).
class ExecutionMark {
 public:
  ExecutionMark(Container& container, bool durable) : container_(container), durable_(durable) {
    ++container_.executing;
    if (durable_) ++container_.changes;
  }
  ~ExecutionMark() {
    if (durable_) ++container_.changes;
    --container_.executing;
  }
  ExecutionMark(const ExecutionMark&) = delete;
  ExecutionMark& operator=(const ExecutionMark&) = delete;

 private:
  Container& container_;
  const bool durable_;
};

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
                                        std::chrono::seconds(config.get()->queue_timeout_sec),
                                        config.get()->max_concurrent_executions_per_owner)),
      metadata_(metadata),
      containers_dir_((fs::path(config.get()->data_dir) / "containers").string()),
      reaper_timer_(io),
      spares_((fs::path(config.get()->data_dir) / "spares").string(),
              [this] {
                const auto settings = this->settings();
                return VolumeShape{volume_image_bytes(settings->workspace_size_bytes), settings->sandbox_host_uid};
              }),
      pool_(io, runtime, (fs::path(config.get()->data_dir) / "slots").string(),
            SandboxPool::Settings{
                [this](const ContainerPaths& dirs, const std::string& name) { return sandbox_options(dirs, name); },
                [this] { return settings()->prestarted_sandboxes; },
                [this] { return static_cast<uid_t>(settings()->sandbox_host_uid); }}) {
  fs::create_directories(containers_dir_);
  fs::permissions(config.get()->data_dir, fs::perms::owner_all, fs::perm_options::replace);
  asio::co_spawn(io_, reap_idle(), asio::detached);
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
  auto write = [&metadata = metadata_, queued = background_touches_, owner = container.owner, id = container.id, now] {
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

size_t ContainerService::prestarted_ready() const { return pool_.ready(); }

std::vector<std::shared_ptr<Container>> ContainerService::open_containers() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Container>> out;
  out.reserve(open_.size());
  for (const auto& [key, container] : open_) out.push_back(container);
  return out;
}

std::vector<std::shared_ptr<Container>> ContainerService::find_open_any_owner(const std::string& id) const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Container>> out;
  for (const auto& [key, container] : open_)
    if (key.second == id) out.push_back(container);
  return out;
}

Result<void> ContainerService::prepare_storage(Container& container, bool fresh) {
  fs::path root = fs::path(containers_dir_) / container.storage;
  const uid_t uid = settings()->sandbox_host_uid;
  container.volume_image = (root / "volume.img").string();
  container.volume_mount = (root / "volume").string();
  container.paths.workspace = (root / "volume" / "workspace").string();
  container.paths.outputs = (root / "volume" / "outputs").string();
  container.paths.uploads = (root / "uploads").string();
  container.paths.skills = SkillMounts::prepare_folder(settings()->data_dir, container.storage);
  // With the sessions bucket, a container whose local copy is gone (a wiped disk, a new
  // node) gets a new volume here and its files back from the bucket before first use.
  if (!fresh && durability_ && !fs::exists(container.volume_image)) fresh = true;
  if (fresh) {
    create_storage_dirs(root);  // (a full disk answers 503: host_out_of_something)
    if (auto taken = spares_.take(container.volume_image, container.volume_mount); !taken) {
      std::error_code ec;
      fs::remove_all(root, ec);
      return unavailable_volume(taken.error(), settings()->retry_after_sec);
    }
  }
  fs::create_directories(container.volume_mount);
  make_owned_dir(container.paths.uploads, uid, uid);
  if (!Volume::is_mounted(container.volume_mount)) {
    auto mounted = Volume::mount(container.volume_image, container.volume_mount);
    if (!mounted) return unavailable_volume(mounted.error(), settings()->retry_after_sec);
  }
  make_owned_dir(container.paths.workspace, uid, uid);
  make_owned_dir(container.paths.outputs, uid, uid);
  return {};
}

Result<std::shared_ptr<Container>> ContainerService::load(const store::ContainerRecord& record) {
  auto container = std::make_shared<Container>(io_.get_executor());
  container->owner = record.owner;
  container->id = record.id;
  container->storage = record.storage;
  container->created_at = record.created_at;
  container->last_used_at = record.last_used_at;
  container->api_secret = new_api_secret();
  // Cluster mode: a container another replica made or served may have no local copy
  // here yet; an empty one is made (and filled by ensure_local).
  const bool no_local_copy =
      leases_ && !fs::exists(fs::path(containers_dir_) / container->storage / "volume.img");
  if (auto prepared = prepare_storage(*container, /*fresh=*/no_local_copy); !prepared) return prepared.error();
  return container;
}

struct ContainerService::Transition {
  Transition(asio::any_io_executor executor, bool create)
      : strand(asio::make_strand(executor)),
        ended(strand, std::chrono::steady_clock::time_point::max()),
        create(create) {}
  asio::strand<asio::any_io_executor> strand;
  asio::steady_timer ended;  // cancelled when it ends (on `strand`)
  bool over = false;         // on `strand`
  const bool create;         // an opening that may make the container
  // An opening's outcome, for the requests that waited for it (set before it ends);
  // none for a closing: they look again.
  std::optional<Result<std::shared_ptr<Container>>> outcome;
};

asio::awaitable<void> ContainerService::await_end(Transition* transition) {
  while (!transition->over) {
    boost::system::error_code ec;
    co_await transition->ended.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

void ContainerService::end_transition(const Key& key, const std::shared_ptr<Transition>& transition) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = transitions_.find(key); it != transitions_.end() && it->second == transition) transitions_.erase(it);
  }
  asio::post(transition->strand, [transition] {
    transition->over = true;
    transition->ended.cancel();
  });
}

asio::awaitable<std::shared_ptr<ContainerService::Transition>> ContainerService::begin_closing(Key key) {
  for (;;) {
    std::shared_ptr<Transition> closing, other;
    {
      std::lock_guard lock(mutex_);
      if (auto it = transitions_.find(key); it != transitions_.end()) {
        other = it->second;
      } else {
        closing = std::make_shared<Transition>(io_.get_executor(), false);
        transitions_.emplace(key, closing);
      }
    }
    if (closing) co_return closing;
    co_await asio::co_spawn(other->strand, await_end(other.get()), asio::use_awaitable);
  }
}

namespace {
// Ends a transition however the coroutine that runs it leaves.
struct TransitionEnd {
  std::function<void()> end;
  ~TransitionEnd() { end(); }
};
}  // namespace

asio::awaitable<Result<std::shared_ptr<Container>>> ContainerService::async_open(std::string owner, std::string id,
                                                                                 bool create) {
  if (!valid_id(id))
    co_return ApiError::invalid_request("Invalid container id: must be 1-128 characters of [A-Za-z0-9._:-]");
  const Key key{owner, id};
  for (;;) {
    if (shutting_down_) co_return ApiError::overloaded("The server is shutting down", settings()->retry_after_sec);
    std::shared_ptr<Container> open;
    std::shared_ptr<Transition> transition;
    bool ready = false, ours = false;
    {
      std::lock_guard lock(mutex_);
      if (auto it = transitions_.find(key); it != transitions_.end()) {
        transition = it->second;
      } else {
        if (auto found = open_.find(key); found != open_.end()) open = found->second;
        // The common case, a container in use here (its lease confirmed lately): no
        // database call, no hop.
        if (open && (!leases_ || leases_->confirmed(open->storage))) {
          ready = true;
        } else {
          transition = std::make_shared<Transition>(io_.get_executor(), create);
          transitions_.emplace(key, transition);
          ours = true;
        }
      }
    }
    if (ready) co_return open;
    if (ours) co_return co_await run_opening(key, create, std::move(open), std::move(transition));
    co_await asio::co_spawn(transition->strand, await_end(transition.get()), asio::use_awaitable);
    if (!transition->outcome) continue;  // it was closing: look again
    const auto& outcome = *transition->outcome;
    // An opening that could not make it says nothing to a request that may.
    if (!outcome && outcome.error().status == HttpStatus::not_found && create && !transition->create) continue;
    co_return outcome;
  }
}

asio::awaitable<Result<std::shared_ptr<Container>>> ContainerService::run_opening(
    Key key, bool create, std::shared_ptr<Container> open, std::shared_ptr<Transition> transition) {
  auto work = [this, &key, create, &open] { return open_blocking(key.first, key.second, create, open); };
  Result<std::shared_ptr<Container>> outcome = ApiError::internal();
  std::exception_ptr failure;
  try {
    // With PostgreSQL on the store pool (a connection per thread); with SQLite on the
    // blocking pool: a mount or a volume's folders are never an I/O thread's wait.
    if (metadata_.backend() == store::db::Backend::kPostgres)
      outcome = co_await run_on(store_pool(), std::move(work));
    else
      outcome = co_await run_blocking(std::move(work));
  } catch (...) {
    failure = std::current_exception();
  }
  // An open container whose lease claim found it deleted (through another replica).
  const bool deleted_elsewhere = open && !failure && !outcome && outcome.error().status == HttpStatus::not_found;
  {
    std::lock_guard lock(mutex_);
    if (!failure && outcome) open_[key] = *outcome;
    if (deleted_elsewhere)
      if (auto it = open_.find(key); it != open_.end() && it->second == open) open_.erase(it);
  }
  transition->outcome = failure ? Result<std::shared_ptr<Container>>(ApiError::internal()) : outcome;
  end_transition(key, transition);
  if (deleted_elsewhere) co_await forget_locally(open);
  if (failure) std::rethrow_exception(failure);
  co_return outcome;
}

Result<std::shared_ptr<Container>> ContainerService::open_blocking(const std::string& owner, const std::string& id,
                                                                   bool create, const std::shared_ptr<Container>& open) {
  if (open) {  // cluster mode: open here, its lease not confirmed lately
    if (auto claimed = claim_lease(*open, /*existing=*/true); !claimed) {
      if (claimed.error().status == HttpStatus::not_found) return ApiError::not_found("Container not found: " + id);
      return claimed.error();
    }
    return open;
  }
  if (auto record = metadata_.find_container(owner, id)) return open_existing(*record);
  if (!create) return ApiError::not_found("Container not found: " + id);
  // Each container holds a volume image, a loop device and mounts while in use: an
  // owner keeps at most quotas.containersPerOwner of them. Its chat threads without a
  // container yet count too (each was promised one when it was made), so a quota
  // reached by other containers never strands a thread at its first turn.
  if (const uint64_t cap = settings()->containers_per_owner; cap > 0 && metadata_.containers_claimed(owner, id) >= cap) {
    ops::metrics().execution_rejected("403", "containers_quota");
    return ApiError::permission("Container quota reached: this owner has " + std::to_string(cap) +
                                " containers (quotas.containersPerOwner); delete one first");
  }
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
  Result<void> prepared = ApiError::internal();
  try {
    prepared = prepare_storage(*container, /*fresh=*/true);
  } catch (const std::exception& e) {
    prepared = host_out_of_something("creating container " + id, e);
  }
  if (!prepared) {
    discard_storage(*container);  // nothing of a container that could not be made stays behind
    return prepared.error();
  }
  if (leases_)  // before the record: a container this replica may not serve is not made
    if (auto claimed = claim_lease(*container, /*existing=*/false); !claimed) {
      discard_storage(*container);
      return claimed.error();
    }
  // The database decides a race: another replica may have created (owner, id) since
  // the lookup above. The first record stays; this replica's fresh storage and its
  // lease go, and the container is opened as the existing one it is (a 503 to retry
  // when the winner serves it: the retry is relayed there).
  const store::ContainerRecord stored = metadata_.create_container(record);
  if (stored.storage != record.storage) {
    spdlog::info("container {} of {} was created by another replica at the same moment; this one's copy goes", id,
                 owner);
    if (leases_) leases_->drop(record.storage, /*deleted=*/true, /*lost=*/false);
    discard_storage(*container);
    return open_existing(stored);
  }
  return container;
}

Result<std::shared_ptr<Container>> ContainerService::open_existing(const store::ContainerRecord& record) {
  std::optional<LeaseKeeper::Claim> claim;  // before anything is mounted for it
  if (leases_) {
    auto claimed = leases_->claim(record.storage, /*existing_container=*/true);
    if (!claimed) {
      if (claimed.error().status == HttpStatus::not_found)
        return ApiError::not_found("Container not found: " + record.id);  // deleted since it was read
      return claimed.error();
    }
    claim = *claimed;
  }
  Result<std::shared_ptr<Container>> container = ApiError::internal();
  try {
    container = load(record);
  } catch (const std::exception& e) {
    return host_out_of_something("mounting the volume of container " + record.id, e);
  }
  // A lease newly taken: the local copy (if any) may be older than what another
  // replica flushed meanwhile; ensure_local checks it before the first use.
  if (container && claim && claim->fresh && durability_) durability_->invalidate_local(**container);
  return container;
}

asio::awaitable<std::vector<store::ContainerRecord>> ContainerService::async_list(std::string owner, size_t limit,
                                                                                 std::string after_id) {
  auto call = [this, &owner, limit, &after_id] { return list(owner, limit, after_id); };
  co_return co_await store_call(metadata_.backend(), std::move(call));
}

void ContainerService::set_cluster(LeaseKeeper* leases) {
  leases_ = leases;
  leases_->set_on_lost([this](const std::string& storage) { lease_lost(storage); });
  if (durability_) durability_->set_on_fenced([leases](const store::FencedError& fenced) { leases->fenced(fenced); });
}

void ContainerService::lease_lost(const std::string& storage) {
  std::shared_ptr<Container> lost;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, container] : open_)
      if (container->storage == storage) lost = container;
  }
  if (!lost) return;
  spdlog::warn("container {} of {} is served by another replica now: its sandbox here stops", lost->id, lost->owner);
  asio::co_spawn(io_, check_still_there(lost), asio::detached);
  // Its local copy is stale from now on (the new holder writes the manifest): never
  // flush it again. Without this a fenced flush was retried for as long as the process
  // lived (and kept the container from being let go), and had this replica taken the
  // lease back later, a retry landing before ensure_local would have passed the new
  // epoch's fence and put the stale tree over the newer holder's manifest. A later
  // claim restores from the bucket first.
  if (durability_) durability_->invalidate_local(*lost);
  asio::co_spawn(lost->strand, stop_on_strand(lost, "lease_lost"), asio::detached);
}

asio::awaitable<void> ContainerService::check_still_there(std::shared_ptr<Container> container) {
  // (A lease lost is also what a delete through another replica looks like from here.)
  auto look_up = [this, &container] { return metadata_.find_container(container->owner, container->id); };
  std::optional<store::ContainerRecord> record;
  try {
    record = co_await store_call(metadata_.backend(), std::move(look_up));
  } catch (const std::exception& e) {
    spdlog::warn("container {} of {}: looking it up: {}", container->id, container->owner, e.what());
    co_return;  // the next request's claim finds out
  }
  if (record && record->storage == container->storage) co_return;
  spdlog::warn("container {} of {} was deleted through another replica: its mount and local copy here go",
               container->id, container->owner);
  co_await forget_locally(container);
}

asio::awaitable<void> ContainerService::forget_locally(std::shared_ptr<Container> container) {
  container->deleted = true;  // no flush of it from now on (the flusher and stop skip a deleted container)
  co_await asio::co_spawn(container->strand, stop_on_strand(container, "deleted"), asio::use_awaitable);
  const Key key{container->owner, container->id};
  auto closing = co_await begin_closing(key);
  TransitionEnd end{[this, &key, &closing] { end_transition(key, closing); }};
  {
    std::lock_guard lock(mutex_);
    if (auto it = open_.find(key); it != open_.end() && it->second == container) open_.erase(it);
  }
  if (leases_) leases_->drop(container->storage, /*deleted=*/false, /*lost=*/false);
  auto discard = [this, &container] { discard_local(*container); };
  co_await run_blocking(std::move(discard));
}

void ContainerService::discard_local(const Container& container) {
  SkillMounts::remove_folder(settings()->data_dir, container.storage);
  try {
    Volume::unmount(container.volume_mount);
  } catch (const std::exception& e) {
    spdlog::warn("unmounting {}: {}", container.volume_mount, e.what());
  }
  std::error_code ec;
  fs::remove_all(fs::path(containers_dir_) / container.storage, ec);
}

Result<void> ContainerService::claim_lease(Container& container, bool existing) {
  auto claimed = leases_->claim(container.storage, existing);
  if (!claimed) return claimed.error();
  if (claimed->fresh && durability_) durability_->invalidate_local(container);
  return {};
}

asio::awaitable<void> ContainerService::flush_and_release(std::shared_ptr<Container> container) {
  // The final flush ran as the sandbox stopped (stop_on_strand). A container whose
  // changes are not all in the bucket keeps its lease, and its local copy, until a
  // retried flush succeeds and a later stop lets it go.
  if (durability_ && !container->deleted && !durability_->releasable(*container)) {
    spdlog::warn("container {} of {}: its files are not all in the bucket yet; its lease is kept", container->id,
                 container->owner);
    co_return;
  }
  auto release = [this, container] { leases_->release(container->storage); };
  try {
    co_await run_blocking(std::move(release));
  } catch (const std::exception& e) {  // the database: the lease then runs out by itself
    spdlog::error("container {} of {}: releasing its lease: {}", container->id, container->owner, e.what());
  }
}

asio::awaitable<ContainerService::DrainOutcome> ContainerService::drain(std::chrono::seconds grace) {
  if (leases_) leases_->set_draining();
  std::vector<std::shared_ptr<Container>> all;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, container] : open_) all.push_back(container);
  }
  // Running commands get the grace period to finish; stopping the sandbox cancels the rest.
  const auto deadline = std::chrono::steady_clock::now() + grace;
  asio::steady_timer pause(io_);
  for (;;) {
    bool busy = false;
    for (const auto& container : all) busy = busy || container->executing.load() > 0;
    if (!busy || std::chrono::steady_clock::now() >= deadline) break;
    pause.expires_after(std::chrono::milliseconds(100));
    co_await pause.async_wait(asio::use_awaitable);
  }
  DrainOutcome outcome;
  const size_t held_before = leases_ ? leases_->held().size() : 0;
  for (auto& container : all) co_await stop(container, "drain");
  outcome.kept = leases_ ? leases_->held().size() : 0;
  outcome.released = held_before > outcome.kept ? held_before - outcome.kept : 0;
  co_return outcome;
}

std::vector<store::ContainerRecord> ContainerService::list(const std::string& owner, size_t limit,
                                                           const std::string& after_id) {
  return metadata_.list_containers(owner, limit, after_id);
}

runtime::SandboxOptions ContainerService::sandbox_options(const ContainerPaths& dirs, const std::string& name) const {
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
  options.max_open_files = settings->open_files_limit
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
      // This owner's share first: one owner's sandboxes never fill the host for everyone.
      const uint64_t per_owner = settings->running_sandboxes_per_owner;
      const auto reserved = owner_reserved_.find(for_container->owner);
      uint64_t owner_running = reserved == owner_reserved_.end() ? 0 : static_cast<uint64_t>(reserved->second);
      for (const auto& [key, container] : open_)
        owner_running += container->owner == for_container->owner && container->running() ? 1 : 0;
      if (per_owner > 0 && owner_running + 1 > per_owner) {
        for (const auto& [key, container] : open_) {
          if (container->owner != for_container->owner || container == for_container || !container->running() ||
              container->executing.load() > 0)
            continue;
          if (!victim || container->last_used_at.load() < victim->last_used_at.load()) victim = container;
        }
        if (!victim) {
          ops::metrics().execution_rejected("429", "owner_sandboxes");
          co_return ApiError::rate_limited("Too many sandboxes of this owner are running (" +
                                               std::to_string(owner_running) + " of " + std::to_string(per_owner) +
                                               ", none idle); try again later",
                                           settings->capacity_retry_after_sec);
        }
      } else if (fits) {
        ++quota_reserved_;  // released by the caller once its sandbox runs (or failed)
        ++owner_reserved_[for_container->owner];
        co_return Result<void>();
      }
      // Full: the least recently used sandbox that runs no command makes room.
      for (const auto& [key, container] : open_) {
        if (victim) break;  // the owner's own, chosen above
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

void ContainerService::discard_storage(Container& container) {
  try {
    if (!container.volume_mount.empty()) Volume::try_unmount(container.volume_mount);
  } catch (const std::exception& e) {
    spdlog::warn("unmounting {}: {}", container.volume_mount, e.what());
  }
  SkillMounts::remove_folder(settings()->data_dir, container.storage);
  std::error_code ec;
  fs::remove_all(fs::path(containers_dir_) / container.storage, ec);
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

void ContainerService::release_room(const std::string& owner) {
  std::lock_guard lock(mutex_);
  --quota_reserved_;
  if (auto it = owner_reserved_.find(owner); it != owner_reserved_.end() && --it->second <= 0) owner_reserved_.erase(it);
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
    if (!runtime_) co_return ApiError{HttpStatus::service_unavailable, "api_error",
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
      ContainerService& service;
      const std::string& owner;
      ~Release() { service.release_room(owner); }
    } release{*this, container->owner};
    // A pre-started sandbox first: it only needs the container's folders bound in.
    if (auto slot = pool_.claim(container->paths, container->id)) {
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
    if (!error.empty()) {
      ops::metrics().execution_rejected("503", "sandbox_start");
      co_return ApiError::overloaded("The sandbox could not be started (the host may be out of processes, memory "
                                     "or devices); try again later",
                                     settings()->capacity_retry_after_sec);
    }
  }
}

asio::awaitable<Result<runtime::ExecResult>> ContainerService::exec(std::shared_ptr<Container> container,
                                                                    runtime::ExecRequest request, bool restart) {
  touch(*container);
  if (durability_) {  // the bucket's copy first, when the local one is missing or stale
    if (auto ready = co_await durability_->ensure_local(container); !ready) co_return ready.error();
  }
  if (restart) {
    co_await asio::co_spawn(container->strand, stop_on_strand(container, "restart"), asio::use_awaitable);
    // restart empties the workspace (a tree walk: the blocking pool); uploads and
    // outputs are kept.
    auto empty_workspace = [&container] {
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(container->paths.workspace, ec)) fs::remove_all(entry.path(), ec);
    };
    co_await run_blocking(std::move(empty_workspace));
    if (request.command.empty()) co_return runtime::ExecResult{};
  }
  ops::Admission::Ticket ticket;
  auto sandbox = co_await admit(container, ticket);
  if (!sandbox) co_return sandbox.error();
  Result<runtime::ExecResult> outcome = ApiError::internal();
  const ExecutionMark mark(*container, durability_ != nullptr);
  const auto started = std::chrono::steady_clock::now();
  const char* label = "failed";
  const std::string command_head = request.command.substr(0, 4096);  // for the audit log
  try {
    outcome = co_await (*sandbox)->exec(std::move(request));
    label = outcome->cancelled ? "cancelled" : outcome->timed_out ? "timeout" : outcome->return_code == 0 ? "ok" : "nonzero";
  } catch (const runtime::SandboxError& e) {
    spdlog::warn("execution in container {} failed: {}", container->id, e.what());
    outcome = std::string_view(e.what()).starts_with("starting the command failed")
                  ? ApiError::overloaded("The command could not be started (the sandbox or the host is out of "
                                         "processes or memory); try again later",
                                         settings()->capacity_retry_after_sec)
                  : ApiError{HttpStatus::service_unavailable, "api_error", "The sandbox stopped during the command",
                             settings()->capacity_retry_after_sec};
  } catch (const std::exception& e) {
    spdlog::error("execution in container {} failed: {}", container->id, e.what());
    outcome = ApiError::overloaded("The command could not be run; try again later", settings()->capacity_retry_after_sec);
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

asio::awaitable<Result<KernelResult>> ContainerService::run_python(std::shared_ptr<Container> container,
                                                                   PythonCall call) {
  touch(*container);
  if (durability_) {  // the bucket's copy first, when the local one is missing or stale
    if (auto ready = co_await durability_->ensure_local(container); !ready) co_return ready.error();
  }
  auto read_driver = [] { return python_kernel_driver(); };
  std::shared_ptr<const std::string> driver;
  try {
    driver = co_await run_blocking(std::move(read_driver));
  } catch (const runtime::SandboxError& e) {
    spdlog::error("{}", e.what());
    co_return ApiError{HttpStatus::service_unavailable, "api_error",
                       "The Python kernel is not installed on this server",
                       settings()->capacity_retry_after_sec};
  }
  // The context is looked for before a slot is taken, and again once it is (it may
  // have been removed meanwhile).
  const bool default_context = call.context == kDefaultPythonContext;
  auto missing_context = [&] { return ApiError::not_found("Context " + call.context + " not found"); };
  auto find_context = [&]() -> Container::NamedPython* {
    for (auto& named : container->python_contexts)
      if (named.context.id == call.context) return &named;
    return nullptr;
  };
  if (!default_context) {
    std::lock_guard lock(container->python_mutex);
    if (!find_context()) co_return missing_context();
  }
  ops::Admission::Ticket ticket;
  auto sandbox = co_await admit(container, ticket);
  if (!sandbox) co_return sandbox.error();
  std::shared_ptr<PythonKernel> kernel;
  {
    // A kernel belongs to one sandbox: after a stop (its TTL, a restart) the next call
    // gets a fresh one in the new sandbox, and the old one's state is gone with it.
    std::lock_guard lock(container->python_mutex);
    if (default_context) {
      if (!container->python || container->python->sandbox() != sandbox->get())
        container->python = std::make_shared<PythonKernel>(*sandbox, driver, call.extra_env);
      kernel = container->python;
    } else {
      auto* named = find_context();
      if (!named) co_return missing_context();
      if (!named->kernel || named->kernel->sandbox() != sandbox->get())
        named->kernel = std::make_shared<PythonKernel>(*sandbox, driver, call.extra_env, named->context.cwd);
      kernel = named->kernel;
    }
  }
  if (call.restart) {
    kernel->restart();
    if (call.code.empty()) co_return KernelResult{};
  }
  const ExecutionMark mark(*container, durability_ != nullptr);
  const auto started = std::chrono::steady_clock::now();
  Result<KernelResult> outcome = ApiError::internal();
  const char* label = "failed";
  try {
    KernelCall cell;
    cell.code = std::move(call.code);
    cell.timeout = call.timeout;
    cell.output_limit = call.output_limit;
    cell.env = std::move(call.env);
    cell.on_event = std::move(call.on_event);
    cell.cancellation = std::move(call.cancellation);
    outcome = co_await kernel->execute(std::move(cell));
    switch (outcome->status) {
      case KernelResult::Status::kOk:
        label = "ok";
        break;
      case KernelResult::Status::kError:
        label = "nonzero";
        break;
      case KernelResult::Status::kTimedOut:
        label = "timeout";
        break;
      case KernelResult::Status::kKernelDied:
        label = "kernel_died";
        break;
    }
  } catch (const runtime::SandboxError& e) {
    spdlog::warn("python in container {} failed: {}", container->id, e.what());
    outcome =
        ApiError{HttpStatus::service_unavailable, "api_error",
                 sandbox->get()->running() ? std::string(e.what()) : "The sandbox stopped during the code",
                 settings()->capacity_retry_after_sec};
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ops::metrics().execution_completed(label, seconds);
  ops::log_event(spdlog::level::info, "python_execution",
                 {{"owner", container->owner},
                  {"container", container->id},
                  {"ms", seconds * 1000},
                  {"outcome", label}});
  touch(*container);
  co_return outcome;
}

std::vector<PythonContext> ContainerService::python_contexts(Container& container) {
  std::lock_guard lock(container.python_mutex);
  std::vector<PythonContext> out{PythonContext{std::string(kDefaultPythonContext), {}}};
  for (const auto& named : container.python_contexts) out.push_back(named.context);
  return out;
}

Result<PythonContext> ContainerService::create_python_context(Container& container, std::string cwd) {
  std::lock_guard lock(container.python_mutex);
  // Each context can hold a Python process in the sandbox: a bound keeps one client
  // from filling the sandbox's process and memory limits with idle kernels by accident.
  if (container.python_contexts.size() + 1 >= kMaxPythonContexts)
    return ApiError::invalid_request("A container has at most " + std::to_string(kMaxPythonContexts) +
                                     " Python contexts; remove one first");
  PythonContext context{"ctx_" + random_alnum(20), std::move(cwd)};
  container.python_contexts.push_back({context, nullptr});
  return context;
}

Result<void> ContainerService::restart_python_context(Container& container, const std::string& id) {
  std::lock_guard lock(container.python_mutex);
  if (id == kDefaultPythonContext) {
    if (container.python) container.python->restart();
    return {};
  }
  for (auto& named : container.python_contexts)
    if (named.context.id == id) {
      if (named.kernel) named.kernel->restart();
      return {};
    }
  return ApiError::not_found("Context " + id + " not found");
}

Result<void> ContainerService::remove_python_context(Container& container, const std::string& id) {
  if (id == kDefaultPythonContext)
    return ApiError::invalid_request("The default context cannot be removed; restart it instead");
  std::shared_ptr<PythonKernel> kernel;
  {
    std::lock_guard lock(container.python_mutex);
    auto it = std::find_if(container.python_contexts.begin(), container.python_contexts.end(),
                           [&](const auto& named) { return named.context.id == id; });
    if (it == container.python_contexts.end()) return ApiError::not_found("Context " + id + " not found");
    kernel = std::move(it->kernel);
    container.python_contexts.erase(it);
  }
  if (kernel) kernel->restart();  // its process ends now, not when the last call lets go of it
  return {};
}

asio::awaitable<Result<ContainerService::StartedProcess>> ContainerService::start_process(
    std::shared_ptr<Container> container, runtime::ProcessRequest request) {
  touch(*container);
  if (durability_) {  // the bucket's copy first, when the local one is missing or stale
    if (auto ready = co_await durability_->ensure_local(container); !ready) co_return ready.error();
  }
  ops::Admission::Ticket ticket;
  auto sandbox = co_await admit(container, ticket);
  if (!sandbox) co_return sandbox.error();
  std::string command_head;
  for (const auto& arg : request.argv) command_head += (command_head.empty() ? "" : " ") + arg;
  command_head.resize(std::min<size_t>(command_head.size(), 4096));
  Result<StartedProcess> outcome = ApiError::internal();
  try {
    auto channel = co_await (*sandbox)->start_process(std::move(request));
    outcome = StartedProcess{*sandbox, channel};
  } catch (const runtime::SandboxError& e) {
    spdlog::warn("starting a process in container {} failed: {}", container->id, e.what());
    outcome = ApiError::overloaded("The process could not be started (the sandbox or the host is out of "
                                   "processes or memory); try again later",
                                   settings()->capacity_retry_after_sec);
  }
  if (auto* audit = ops::audit())
    audit->record("process_started", {{"owner", container->owner}, {"container", container->id},
                                      {"command", command_head}, {"outcome", outcome ? "ok" : "failed"}});
  co_return outcome;
}

asio::awaitable<Result<std::shared_ptr<runtime::Sandbox>>> ContainerService::admit(
    std::shared_ptr<Container> container, ops::Admission::Ticket& ticket) {
  // A slot (waiting in the owner's line if need be) before a sandbox is started for it:
  // an owner alone may use every slot, and when slots are short they go round the
  // owners that wait (ops/owner_admission.h), so one owner's commands never keep another
  // waiting behind all of theirs.
  std::chrono::duration<double> waited{};
  ticket = co_await admission_->acquire(container->owner, &waited);
  ops::metrics().admission_waited(waited.count());
  if (!ticket) {
    const auto snapshot = settings();
    const bool at_own_cap = snapshot->max_concurrent_executions_per_owner > 0 &&
                            admission_->active_of(container->owner) >= snapshot->max_concurrent_executions_per_owner;
    ops::metrics().execution_rejected("429", at_own_cap ? "owner_queue_timeout" : "queue_timeout");
    co_return ApiError::rate_limited(
        (at_own_cap ? "Too many commands of this owner are running (capacity.maxConcurrentExecutionsPerOwner: " +
                          std::to_string(snapshot->max_concurrent_executions_per_owner) + " at once)"
                    : std::string("Too many commands are running")) +
            "; none finished within " + std::to_string(snapshot->queue_timeout_sec) + "s. Try again later.",
        snapshot->retry_after_sec);
  }
  // A running sandbox is used as is; starting one (or finding it stopped) is the
  // strand's business.
  Result<std::shared_ptr<runtime::Sandbox>> sandbox = container->live_sandbox.load();
  if (!*sandbox || !(*sandbox)->running() || container->deleted)
    sandbox = co_await asio::co_spawn(container->strand, ensure_sandbox(container), asio::use_awaitable);
  if (!sandbox) ops::metrics().execution_completed("failed", 0);
  co_return sandbox;
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
  if (auto slot = std::move(container->slot)) pool_.release(slot);
  // Whatever the reason of the stop, what changed goes to the bucket (a failure keeps
  // the local copy and is retried; the container is not released meanwhile).
  if (durability_) co_await durability_->flush_if_changed(container);
}

asio::awaitable<void> ContainerService::stop(std::shared_ptr<Container> container, const char* reason) {
  co_await asio::co_spawn(container->strand, stop_on_strand(container, reason), asio::use_awaitable);
  if (leases_) co_await flush_and_release(container);
}

asio::awaitable<void> ContainerService::remove(std::shared_ptr<Container> container) {
  container->deleted = true;
  co_await stop(container, "deleted");
  // Requests for it meanwhile wait, then find it gone (404).
  const Key key{container->owner, container->id};
  auto closing = co_await begin_closing(key);
  TransitionEnd end{[this, &key, &closing] { end_transition(key, closing); }};
  {
    std::lock_guard lock(mutex_);
    if (auto it = open_.find(key); it != open_.end() && it->second == container) open_.erase(it);
  }
  auto forget_records = [this, &container] {
    metadata_.delete_container(container->owner, container->id);
    if (leases_) leases_->drop(container->storage, /*deleted=*/true, /*lost=*/false);
  };
  co_await store_call(metadata_.backend(), std::move(forget_records));
  if (durability_) co_await durability_->forget(container);
  auto discard = [this, &container] { discard_local(*container); };
  co_await run_blocking(std::move(discard));
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
    // Unmount volumes nobody holds (the map is then the only owner), each as a closing
    // of that container (a request for it meanwhile waits for the unmount, then opens
    // it anew), the unmount itself on the blocking pool.
    for (auto& container : idle) {
      const Key key{container->owner, container->id};
      std::shared_ptr<Transition> closing;
      {
        std::lock_guard lock(mutex_);
        auto it = open_.find(key);
        if (it == open_.end() || it->second != container || transitions_.count(key)) continue;
        if (container->running() || container->last_used_at.load() + settings()->session_ttl_sec > now) continue;
        if (container.use_count() > 2) continue;  // `idle` and the map: nobody else
        if (durability_ && !durability_->releasable(*container)) continue;  // unflushed: kept
        open_.erase(it);
        closing = std::make_shared<Transition>(io_.get_executor(), false);
        transitions_.emplace(key, closing);
      }
      auto unmount = [this, &container] {
        try {
          if (!Volume::try_unmount(container->volume_mount)) return false;
          SkillMounts::remove_folder(settings()->data_dir, container->storage);  // remade when it opens again
          return true;
        } catch (const std::exception& e) {
          spdlog::warn("unmounting idle volume {}: {}", container->volume_mount, e.what());
          return false;
        }
      };
      const bool unmounted = co_await run_blocking(std::move(unmount));
      if (!unmounted) {  // busy: it stays open
        std::lock_guard lock(mutex_);
        open_.emplace(key, container);
      }
      end_transition(key, closing);
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
  co_await pool_.shutdown();
  {
    std::lock_guard lock(mutex_);
    open_.clear();
  }
  auto unmount_all = [this, &all] {
    for (auto& container : all) {
      try {
        Volume::unmount(container->volume_mount);
      } catch (const std::exception& e) {
        spdlog::warn("unmounting {}: {}", container->volume_mount, e.what());
      }
      // Its skills folder is a mount point too (a shared bind of itself).
      SkillMounts::remove_folder(settings()->data_dir, container->storage);
    }
  };
  co_await run_blocking(std::move(unmount_all));
}

}  // namespace sandboxd::service

namespace sandboxd::service {

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
  ContainerPaths dirs{(root / "workspace").string(), (root / "uploads").string(), (root / "outputs").string(), ""};
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

}  // namespace sandboxd::service
