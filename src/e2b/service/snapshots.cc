#include "e2b/service/snapshots.h"

#include <sys/stat.h>

#include <spdlog/spdlog.h>
#include <chrono>
#include <filesystem>

#include "base/blocking.h"
#include "base/ids.h"
#include "ops/logging.h"
#include "service/store_call.h"

namespace sandboxd::e2b {
namespace {

using service::store_call;

namespace fs = std::filesystem;

constexpr std::string_view kTag = ":default";
// A fork's snapshot, kept only while its sandboxes are made: <root>/fork-<random>.
constexpr std::string_view kForkPrefix = "fork-";
constexpr size_t kMaxNameLength = 64;

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string lower_alnum(size_t length) {
  std::string id = random_alnum(length);
  for (auto& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return id;
}

bool is_id_shaped(std::string_view text) {
  if (text.size() != 20) return false;
  for (char c : text)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  return true;
}

// E2B's names of templates: lower-case letters, digits, '-' and '_'. One that could be
// taken for an id (20 letters and digits) or a template would name two things.
std::optional<ApiError> bad_name(const std::string& name) {
  const auto refuse = [&name](const std::string& why) {
    return ApiError::invalid_request("Invalid snapshot name '" + name + "': " + why);
  };
  if (name.size() > kMaxNameLength)
    return refuse("at most " + std::to_string(kMaxNameLength) + " characters");
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
      return refuse("only lower-case letters, digits, '-' and '_'");
  if (Sandboxes::known_template(name)) return refuse("that is a template's name");
  if (is_id_shaped(name)) return refuse("20 letters and digits are a snapshot id's shape");
  return std::nullopt;
}

}  // namespace

template <typename Fn>
auto Snapshots::store(Fn fn) {
  return store_call(records_.backend(), std::move(fn));
}

Snapshots::Snapshots(Sandboxes& sandboxes, store::E2bRecords& records, std::string data_dir)
    : sandboxes_(sandboxes),
      containers_(sandboxes.containers()),
      records_(records),
      root_((fs::path(data_dir) / "snapshots").string()) {}

std::string Snapshots::snapshot_id(const Snapshot& snapshot) {
  return (snapshot.name.empty() ? snapshot.id : snapshot.name) + std::string(kTag);
}

std::optional<std::string> Snapshots::key_of(std::string_view snapshot_id) {
  if (snapshot_id.ends_with(kTag)) snapshot_id.remove_suffix(kTag.size());
  if (snapshot_id.empty() || snapshot_id.size() > kMaxNameLength) return std::nullopt;
  for (char c : snapshot_id)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_')) return std::nullopt;
  return std::string(snapshot_id);
}

std::string Snapshots::folder_of(const std::string& id) const { return (fs::path(root_) / id).string(); }

void Snapshots::start() {
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) {
    spdlog::warn("e2b: creating {}: {}", root_, ec.message());
    return;
  }
  chmod(root_.c_str(), 0700);  // what sandboxes had in their files and memory
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    const std::string name = entry.path().filename().string();
    // A fork's, or one whose record is missing: the server stopped between copying a
    // snapshot and recording it, or between removing its record and its folder. Its
    // bytes counted for nobody (the records are what the quota counts).
    bool left_over = name.starts_with(kForkPrefix) || name.ends_with(".tmp");
    if (!left_over) {
      try {
        left_over = !records_.snapshot_exists(name);
      } catch (const std::exception& e) {
        spdlog::warn("e2b: looking up snapshot {}: {}", name, e.what());  // kept: looked at next start
      }
    }
    if (left_over) {
      fs::remove_all(entry.path(), ec);
      spdlog::info("e2b: removed {}, left by a fork or snapshot that did not finish", entry.path().string());
    }
  }
}

asio::awaitable<void> Snapshots::remove_folder(std::string folder) {
  auto remove = [&folder] {
    std::error_code ec;
    fs::remove_all(folder, ec);
    if (ec) spdlog::warn("e2b: removing {}: {}", folder, ec.message());
  };
  co_await run_blocking(std::move(remove));
}

asio::awaitable<void> Snapshots::remove_state(std::string owner, std::string id) {
  if (bucket_)
    co_await bucket_->remove(std::move(owner), std::move(id));
  else
    co_await remove_folder(folder_of(id));
}

asio::awaitable<Result<std::shared_ptr<Container>>> Snapshots::source(const Sandbox& sandbox) {
  co_return co_await sandboxes_.open(sandbox);
}

asio::awaitable<std::optional<ApiError>> Snapshots::past_stored_bytes(const std::string& owner,
                                                                      const Container& container) {
  const uint64_t limit = containers_.settings()->stored_bytes_per_owner;
  if (limit == 0) co_return std::nullopt;
  // What the owner keeps, and what the copy will take: the volume's allocated blocks and
  // the uploads (its memory, when it has some, is counted once it is taken).
  auto measure = [this, &owner, &container] {
    struct stat st {};
    uint64_t copy =
        stat(container.volume_image.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(container.paths.uploads, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_regular_file(ec) && !it->is_symlink(ec)) copy += it->file_size(ec);
    return containers_.metadata().owner_bytes(owner) + copy;
  };
  if (co_await store(std::move(measure)) > limit)
    co_return ApiError::permission("Storage quota reached: this owner's files may take at most " +
                                   std::to_string(limit) +
                                   " bytes (quotas.storedBytesPerOwner), snapshots included; delete "
                                   "some files or snapshots first");
  co_return std::nullopt;
}

asio::awaitable<Result<Snapshot>> Snapshots::create(std::string owner, std::string sandbox_id,
                                                    std::string name) {
  if (!name.empty())
    if (auto refused = bad_name(name)) co_return *refused;
  auto found = co_await sandboxes_.find(owner, sandbox_id);
  if (!found) co_return found.error();
  auto container = co_await source(*found);
  if (!container) co_return container.error();
  containers_.lifecycle().touch(**container);  // in use: no idle stop closes its volume meanwhile
  // The owner's cap, counting the snapshots being made now.
  {
    const size_t have = co_await store([this, &owner] { return records_.count_snapshots(owner); });
    std::lock_guard lock(creating_mutex_);
    if (have + creating_[owner] >= kMaxPerOwner)
      co_return ApiError::permission(
          "This owner keeps " + std::to_string(kMaxPerOwner) +
          " snapshots, the most it may; delete one first (Sandbox.deleteSnapshot)");
    ++creating_[owner];
  }
  struct Created {
    Snapshots& self;
    const std::string& owner;
    ~Created() {
      std::lock_guard lock(self.creating_mutex_);
      if (--self.creating_[owner] == 0) self.creating_.erase(owner);
    }
  } created{*this, owner};
  if (auto refused = co_await past_stored_bytes(owner, **container)) co_return *refused;
  Snapshot snapshot;
  snapshot.id = lower_alnum(20);
  snapshot.owner = owner;
  snapshot.name = name;
  snapshot.source_sandbox = sandbox_id;
  // Cluster mode: a folder of the moment (".tmp": the next start removes it, should
  // this replica stop before it does), whose content goes to the bucket.
  const std::string folder = folder_of(bucket_ ? snapshot.id + ".tmp" : snapshot.id);
  auto captured = co_await containers_.snapshots().capture_state(*container, folder);
  if (!captured) {
    co_await remove_folder(folder);
    co_return captured.error();
  }
  if (bucket_) {
    auto stored = co_await bucket_->upload(owner, snapshot.id, folder);
    co_await remove_folder(folder);
    if (!stored) co_return stored.error();
  }
  snapshot.bytes = captured->bytes;
  snapshot.memory = captured->memory;
  snapshot.created_at_ms = now_ms();
  // A name names the newest snapshot taken under it (E2B: a new build of that
  // template): the one it named before goes.
  std::optional<Snapshot> replaced;
  if (!name.empty()) {
    replaced = co_await store([this, &owner, &name] { return records_.find_snapshot(owner, name); });
    if (replaced && replaced->name == name)
      co_await store([this, &owner, &replaced] { return records_.remove_snapshot(owner, replaced->id); });
    else
      replaced.reset();
  }
  bool inserted = false;
  try {
    inserted = co_await store([this, &snapshot] { return records_.insert_snapshot(snapshot); });
  } catch (const std::exception& e) {
    spdlog::error("e2b: recording snapshot {}: {}", snapshot.id, e.what());
  }
  if (!inserted) {  // (the database failed, or another snapshot took the name meanwhile)
    co_await remove_state(owner, snapshot.id);
    co_return ApiError::internal();
  }
  if (replaced) co_await remove_state(owner, replaced->id);
  if (auto* audit = ops::audit())
    audit->record("e2b_snapshot_created", {{"owner", owner},
                                           {"sandbox", sandbox_id},
                                           {"snapshot", snapshot_id(snapshot)},
                                           {"bytes", std::to_string(snapshot.bytes)},
                                           {"memory", snapshot.memory ? "true" : "false"}});
  co_return snapshot;
}

asio::awaitable<store::E2bSnapshotPage> Snapshots::list(store::E2bSnapshotQuery query) {
  co_return co_await store([this, &query] { return records_.list_snapshots(query); });
}

asio::awaitable<Result<void>> Snapshots::remove(std::string owner, std::string snapshot_id) {
  const auto key = key_of(snapshot_id);
  const auto not_found = ApiError::not_found("Snapshot " + snapshot_id + " not found");
  if (!key) co_return not_found;
  auto found = co_await store([this, &owner, &key] { return records_.find_snapshot(owner, *key); });
  if (!found) co_return not_found;
  if (!co_await store([this, &owner, &found] { return records_.remove_snapshot(owner, found->id); }))
    co_return not_found;  // deleted by another request a moment ago
  co_await remove_state(owner, found->id);
  if (auto* audit = ops::audit())
    audit->record(
        "e2b_snapshot_deleted",
        {{"owner", owner}, {"snapshot", this->snapshot_id(*found)}, {"bytes", std::to_string(found->bytes)}});
  co_return Result<void>{};
}

asio::awaitable<Result<Sandbox>> Snapshots::create_from(std::string owner, std::string folder,
                                                        NewSandbox request) {
  request.seed = [this, folder](std::shared_ptr<Container> container) -> asio::awaitable<Result<void>> {
    co_return co_await containers_.snapshots().seed_state(std::move(container), folder);
  };
  co_return co_await sandboxes_.create(std::move(owner), std::move(request));
}

asio::awaitable<std::optional<Result<Sandbox>>> Snapshots::create_sandbox(std::string owner,
                                                                          NewSandbox request) {
  const auto key = key_of(request.template_id);
  if (!key) co_return std::nullopt;
  auto found = co_await store([this, &owner, &key] { return records_.find_snapshot(owner, *key); });
  if (!found) co_return std::nullopt;
  request.template_id = snapshot_id(*found);
  if (!bucket_) co_return co_await create_from(std::move(owner), folder_of(found->id), std::move(request));
  // Cluster mode: a copy of the moment, fetched from the bucket for this sandbox.
  const std::string folder = folder_of(found->id + "." + lower_alnum(8) + ".tmp");
  auto fetched = co_await bucket_->download(owner, found->id, folder);
  std::optional<Result<Sandbox>> made;
  if (fetched)
    made = co_await create_from(std::move(owner), folder, std::move(request));
  else
    made = Result<Sandbox>(fetched.error());
  co_await remove_folder(folder);
  co_return made;
}

asio::awaitable<Result<std::vector<Result<Sandbox>>>> Snapshots::fork(std::string owner,
                                                                      std::string sandbox_id, int64_t count,
                                                                      int64_t timeout_sec) {
  if (count < 1 || count > kMaxForks)
    co_return ApiError::invalid_request("'count' must be from 1 to " + std::to_string(kMaxForks));
  if (timeout_sec < 0 || timeout_sec > Sandboxes::kMaxTimeoutSec)
    co_return ApiError::invalid_request("'timeout' must be from 0 to " +
                                        std::to_string(Sandboxes::kMaxTimeoutSec) + " seconds");
  auto found = co_await sandboxes_.find(owner, sandbox_id);
  if (!found) co_return found.error();
  // E2B forks a running sandbox (its memory is what it forks).
  if (found->paused)
    co_return ApiError::conflict("Sandbox " + sandbox_id +
                                 " is paused; connect to resume it before forking it");
  auto container = co_await source(*found);
  if (!container) co_return container.error();
  containers_.lifecycle().touch(**container);  // in use: no idle stop closes its volume meanwhile
  // Its snapshot is not recorded (it goes once the forks are made), so it is not in the
  // owner's stored bytes meanwhile: the owner's quota is checked before, as for a
  // snapshot, so that a fork cannot take the disk past it.
  if (auto refused = co_await past_stored_bytes(owner, **container)) co_return *refused;
  const std::string folder = folder_of(std::string(kForkPrefix) + lower_alnum(20));
  auto captured = co_await containers_.snapshots().capture_state(*container, folder);
  if (!captured) {
    co_await remove_folder(folder);
    co_return captured.error();
  }
  // The forks carry what the source was made with: its template, metadata, environment
  // variables and network options.
  auto egress = co_await sandboxes_.stored_network(owner, sandbox_id);
  std::vector<Result<Sandbox>> forks;
  size_t made = 0;
  for (int64_t i = 0; i < count; ++i) {
    NewSandbox request;
    request.template_id = found->template_id;
    request.metadata = found->metadata;
    request.env_vars = found->env_vars;
    request.timeout_sec = timeout_sec;
    request.egress = egress;
    auto fork = co_await create_from(owner, folder, std::move(request));
    if (fork) ++made;
    forks.push_back(std::move(fork));
  }
  co_await remove_folder(folder);
  if (auto* audit = ops::audit())
    audit->record("e2b_sandbox_forked", {{"owner", owner},
                                         {"sandbox", sandbox_id},
                                         {"count", std::to_string(count)},
                                         {"forked", std::to_string(made)},
                                         {"memory", captured->memory ? "true" : "false"}});
  co_return forks;
}

}  // namespace sandboxd::e2b
