#include "cluster/container_durability.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/blocking.h"
#include "base/ids.h"
#include "base/sandbox_paths.h"
#include "base/temp_files.h"
#include "base/unique_fd.h"
#include "ops/metrics.h"
#include "service/container_memory.h"
#include "store/file_io.h"
#include "store/file_walk.h"
#include "store/md5.h"
#include "store/mime.h"

namespace sandboxd::cluster {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxRetryDelayMs = 60'000;

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

store::S3Settings s3_settings(const ops::Config& config) {
  store::S3Settings settings;
  settings.endpoint = config.s3.endpoint;
  settings.region = config.s3.region;
  settings.bucket = config.s3.bucket;
  settings.access_key_id = config.s3.access_key_id;
  settings.secret_access_key = config.s3.secret_access_key;
  settings.force_path_style = config.s3.force_path_style;
  return settings;
}

// The folders that hold a container's files, with their host folders: its mounts, and
// the checkpoint of its sandbox's memory (service/container_memory.h), which is not a
// sandbox path: its rows are never files of the Files API.
struct MountDir {
  std::string_view sandbox;
  std::string host;
};
std::vector<MountDir> mounts_of(const Container& container) {
  return {{kWorkspaceMount, container.paths.workspace},
          {kUploadsMount, container.paths.uploads},
          {kOutputsMount, container.paths.outputs},
          {service::kMemoryManifestPath, service::memory_folder(container)}};
}

bool is_memory_row(std::string_view path) {
  return path.size() > service::kMemoryManifestPath.size() &&
         path.starts_with(service::kMemoryManifestPath) && path[service::kMemoryManifestPath.size()] == '/';
}

bool same_file(const store::ManifestRow& row, const struct stat& st) {
  return row.size == static_cast<uint64_t>(st.st_size) && row.mode == (st.st_mode & 07777) &&
         row.mtime_ns == store::mtime_ns_of(st);
}

struct Marker {
  int64_t generation = -1;  // -1: no marker
  std::string writer;
};

Marker read_marker(const std::string& path) {
  std::ifstream in(path);
  Marker marker;
  if (!(in >> marker.generation >> marker.writer)) return Marker{};
  return marker;
}

// Uploads one file (open at `fd`, `size` bytes) to `key`, hashing it on the way: a
// single PUT streamed from the file, or a multipart upload of part_bytes parts.
store::S3Result<std::string> upload_file(store::S3Client& client, const std::string& key, int fd,
                                         uint64_t size, size_t part_bytes) {
  store::Md5 md5;
  if (size <= part_bytes) {
    auto stored =
        client.put_object_from_fd(key, fd, size, [&md5](const char* data, size_t n) { md5.update(data, n); });
    if (!stored) return stored.error();
    return md5.hex_digest();
  }
  auto upload_id = client.create_multipart(key);
  if (!upload_id) return upload_id.error();
  std::vector<std::string> etags;
  std::string part(part_bytes, '\0');
  auto fail = [&](store::S3Error error) -> store::S3Result<std::string> {
    if (auto aborted = client.abort_multipart(key, *upload_id);
        !aborted && !etags.empty() && (aborted.error().status == 405 || aborted.error().status == 501)) {
      if (client.complete_multipart(key, *upload_id, etags))
        (void)client.delete_object(key);  // no abort there
    }
    return error;
  };
  for (uint64_t offset = 0; offset < size;) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(part_bytes, size - offset)), got = 0;
    while (got < want) {
      ssize_t n = ::pread(fd, part.data() + got, want - got, static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return fail(store::S3Error{store::S3Error::Kind::kLocal, 0, "", "the file shrank while it was read"});
      got += static_cast<size_t>(n);
    }
    md5.update(part.data(), got);
    auto etag = client.upload_part(key, *upload_id, static_cast<int>(etags.size()) + 1,
                                   std::string_view(part.data(), got));
    if (!etag) return fail(etag.error());
    etags.push_back(*etag);
    offset += got;
  }
  if (auto completed = client.complete_multipart(key, *upload_id, etags); !completed)
    return fail(completed.error());
  return md5.hex_digest();
}

}  // namespace

std::string load_instance_id(const std::string& data_dir) {
  const fs::path path = fs::path(data_dir) / "instance-id";
  {
    std::ifstream in(path);
    std::string id;
    if (in >> id && !id.empty()) return id;
  }
  std::string id = "i" + random_hex(16);
  const fs::path temp = fs::path(data_dir) / (std::string(kTempPrefix) + "instance-id");
  std::ofstream(temp) << id << "\n";
  fs::rename(temp, path);
  return id;
}

ContainerDurability::ContainerDurability(asio::io_context& io, const ops::Config& config,
                                         store::ManifestStore& manifest, store::Metadata& metadata,
                                         std::string instance_id)
    : io_(io),
      config_(config),
      manifest_(manifest),
      metadata_(metadata),
      instance_id_(std::move(instance_id)),
      client_(std::make_shared<store::S3Client>(s3_settings(config))),
      ticker_(io) {}

ContainerDurability::~ContainerDurability() = default;

void ContainerDurability::start(OpenContainers open) {
  open_ = std::move(open);
  asio::co_spawn(io_, flush_loop(), asio::detached);
}

void ContainerDurability::stop() {
  stopping_ = true;
  ticker_.cancel();
}

std::string ContainerDurability::marker_path(const Container& container) {
  return (fs::path(container.paths.uploads).parent_path() / "manifest-generation").string();
}

void ContainerDurability::write_marker(const Container& container, int64_t generation) {
  const std::string path = marker_path(container);
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << generation << " " << instance_id_ << "\n";
    if (!out) return;  // the marker is an optimisation of validity: a missing one means "restore"
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
}

void ContainerDurability::delete_objects_later(std::vector<std::string> keys) {
  if (keys.empty()) return;
  asio::post(blocking_pool(), [client = client_, keys = std::move(keys)] {
    for (const auto& key : keys)
      if (auto removed = client->delete_object(key); !removed)
        spdlog::warn("bucket: deleting the replaced object {}: {}", key, removed.error().describe());
  });
}

// --- uploads ------------------------------------------------------------------------

std::unique_ptr<service::BucketObjectUpload> ContainerDurability::begin_upload(
    const Container& container, asio::any_io_executor executor, std::optional<uint64_t> declared_size) {
  std::string key = config_.s3.prefix + "objects/" + container.storage + "/" + random_hex(32);
  std::optional<uint64_t> streamed;
  if (declared_size && *declared_size > config_.s3.part_bytes &&
      *declared_size <= config_.s3.single_put_max_bytes)
    streamed = declared_size;
  return std::make_unique<BucketUpload>(std::move(executor), client_, std::move(key), config_.s3.part_bytes,
                                        config_.retry_after_sec,
                                        static_cast<size_t>(config_.s3.max_parts_in_flight), streamed);
}

void ContainerDurability::commit_upload(Container& container, const store::FileRecord& record,
                                        const std::string& object_key) {
  store::ManifestRow row;
  row.storage = container.storage;
  row.path = record.path;
  row.size = record.size;
  row.mode = 0644;  // as the atomic writer leaves every upload
  row.mtime_ns = record.mtime_ns;
  row.md5 = record.etag;
  row.object_key = object_key;
  auto change = manifest_.put(row, instance_id_);
  write_marker(container, change.generation);
  if (change.replaced_object) delete_objects_later({*change.replaced_object});
}

void ContainerDurability::forget_files(Container& container, const std::vector<std::string>& paths) {
  if (paths.empty()) return;
  // Never between a flush's walk and its row writes: a flush that read the file before
  // it went must not put its row back after this removal.
  const auto transfer = container.bucket.transfer_lock();
  std::vector<std::string> garbage;
  std::optional<int64_t> generation;
  for (const auto& path : paths) {
    auto change = manifest_.remove(container.storage, path, instance_id_);
    if (!change.applied) continue;  // no row: never flushed, nothing in the bucket
    generation = change.generation;
    if (change.replaced_object) garbage.push_back(*change.replaced_object);
  }
  if (generation) write_marker(container, *generation);
  delete_objects_later(std::move(garbage));
}

// --- flush --------------------------------------------------------------------------

bool ContainerDurability::flush_blocking(Container& container, std::optional<store::FencedError>& fenced) {
  const auto transfer = container.bucket.transfer_lock();
  if (container.deleted) return true;
  // A local copy never checked against the manifest (ensure_local has not run) may be
  // missing or stale: flushing it would delete or overwrite the bucket's files.
  if (!container.bucket.local_ready()) {
    container.bucket.set_unflushed_bytes(0);  // a stale copy (lease lost) has nothing to send
    return true;
  }
  const uint64_t changes_at_start = container.bucket.changes_so_far();
  std::map<std::string, store::ManifestRow> rows;
  for (auto& row : manifest_.rows(container.storage)) rows.emplace(row.path, std::move(row));

  bool failed = false;
  uint64_t pending = 0;
  std::vector<std::string> garbage;
  std::vector<std::string_view> walked;  // mounts whose folder could be read
  for (const auto& [mount, host] : mounts_of(container)) {
    UniqueFd root(::open(host.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    // Not mounted: its rows stay as they are. No memory folder: there is no checkpoint
    // (it was used), and its rows go.
    if (mount == service::kMemoryManifestPath && !root.valid() && errno == ENOENT) walked.push_back(mount);
    if (!root.valid()) continue;
    walked.push_back(mount);
    store::walk_regular_files(
        root.get(), std::string(mount),
        [&](int directory, const char* name, const std::string& path, const struct stat& seen) {
          auto known = rows.find(path);
          const bool unchanged = known != rows.end() && same_file(known->second, seen);
          std::optional<int64_t> expected = known == rows.end() ? 0 : known->second.version;
          if (known != rows.end()) rows.erase(known);
          if (unchanged || fenced) return;
          if (failed) {  // the bucket failed on an earlier file: count what waits
            pending += static_cast<uint64_t>(seen.st_size);
            return;
          }
          UniqueFd file(open_beneath(directory, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
          struct stat st;
          if (!file.valid() || fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) return;  // gone meanwhile
          store::ManifestRow row;
          row.storage = container.storage;
          row.path = path;
          row.size = static_cast<uint64_t>(st.st_size);
          row.mode = st.st_mode & 07777;
          row.mtime_ns = store::mtime_ns_of(st);  // taken before reading: a racing write shows next time
          row.object_key = config_.s3.prefix + "objects/" + container.storage + "/" + random_hex(32);
          auto md5 = upload_file(*client_, row.object_key, file.get(), row.size, config_.s3.part_bytes);
          if (!md5) {
            spdlog::warn("bucket: flushing {} of container {}: {}", path, container.id,
                         md5.error().describe());
            failed = md5.error().kind != store::S3Error::Kind::kLocal;
            if (failed) pending += row.size;
            return;
          }
          row.md5 = *md5;
          // The lease was lost while this flush ran (its copy went stale): write nothing more.
          if (!container.bucket.local_ready()) {
            garbage.push_back(row.object_key);
            failed = true;
            return;
          }
          store::ManifestStore::Change change;
          try {
            change = manifest_.put(row, instance_id_, expected);
          } catch (const store::FencedError& e) {
            // Another replica holds the container now, or it was deleted: this object is
            // nobody's, and nothing more of this copy goes up.
            garbage.push_back(row.object_key);
            fenced = e;
            return;
          }
          if (!change.applied)
            garbage.push_back(row.object_key);  // an upload replaced it meanwhile
          else if (change.replaced_object)
            garbage.push_back(*change.replaced_object);
        });
  }
  if (fenced) {
    delete_objects_later(std::move(garbage));
    container.bucket.set_unflushed_bytes(0);
    return false;
  }
  // Rows whose file is gone (in a mount that could be read); never from a copy that
  // went stale meanwhile (that would delete the new holder's files).
  if (!failed && container.bucket.local_ready()) {
    for (const auto& [path, row] : rows) {
      bool readable_mount = false;
      for (auto mount : walked)
        if (path.size() > mount.size() && path.compare(0, mount.size(), mount) == 0 &&
            path[mount.size()] == '/')
          readable_mount = true;
      if (!readable_mount) continue;
      auto resolved = resolve_sandbox_path(container.paths, path);
      if (resolved) {
        UniqueFd root(::open(resolved->host_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        UniqueFd again(root.valid() ? open_beneath(root.get(), resolved->relative, O_PATH | O_NOFOLLOW) : -1);
        struct stat st;
        if (again.valid() && fstat(again.get(), &st) == 0 && S_ISREG(st.st_mode))
          continue;  // written after the walk
      }
      store::ManifestStore::Change change;
      try {
        change = manifest_.remove(container.storage, path, instance_id_, row.version);
      } catch (const store::FencedError& e) {
        fenced = e;
        break;
      }
      if (change.replaced_object) garbage.push_back(*change.replaced_object);
    }
  }
  if (fenced) {
    delete_objects_later(std::move(garbage));
    container.bucket.set_unflushed_bytes(0);
    return false;
  }
  delete_objects_later(std::move(garbage));
  container.bucket.set_unflushed_bytes(pending);
  if (failed || !container.bucket.local_ready()) return false;  // no marker for a tree that did not go up
  write_marker(container, manifest_.state(container.storage).generation);
  container.bucket.flush_succeeded(changes_at_start);
  return true;
}

asio::awaitable<bool> ContainerDurability::flush(std::shared_ptr<Container> container) {
  const auto started = std::chrono::steady_clock::now();
  std::optional<store::FencedError> fenced;
  auto work = [this, container, &fenced] { return flush_blocking(*container, fenced); };
  bool ok = false;
  try {
    ok = co_await run_blocking(std::move(work));
  } catch (const std::exception& e) {
    spdlog::error("bucket: flushing container {}: {}", container->id, e.what());
  }
  if (fenced) {
    // Not a failure to retry: this copy is no longer the container's (the lease went
    // to another replica, or the container was deleted). The cluster lets it go.
    spdlog::warn("bucket: flushing container {}: {}", container->id, fenced->what());
    invalidate_local(*container);
    container->bucket.let_go();
    if (on_fenced_) on_fenced_(*fenced);
    co_return false;
  }
  ops::metrics().storage_flushed(
      ok, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  const int64_t now = steady_ms();
  if (ok)
    container->bucket.flush_ended_well(now);
  else
    container->bucket.flush_ended_badly(now, kMaxRetryDelayMs);
  co_return ok;
}

asio::awaitable<void> ContainerDurability::flush_if_changed(std::shared_ptr<Container> container) {
  if (container->deleted) co_return;
  if (!container->bucket.needs_flush()) co_return;
  co_await flush(container);
}

bool ContainerDurability::releasable(const Container& container) const {
  return container.bucket.releasable();
}

asio::awaitable<void> ContainerDurability::flush_loop() {
  const int64_t interval_ms = int64_t{config_.flush_interval_sec} * 1000;
  while (!stopping_) {
    ticker_.expires_after(std::chrono::milliseconds(std::min<int64_t>(1000, interval_ms)));
    boost::system::error_code ec;
    co_await ticker_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (stopping_) break;
    for (auto& container : open_()) {
      if (stopping_) break;
      if (container->deleted) continue;
      if (container->bucket.flush_due(steady_ms(), interval_ms, container->executing.load() > 0))
        co_await flush(container);
    }
  }
}

// --- restore ------------------------------------------------------------------------

bool ContainerDurability::local_copy_valid(const Container& container) {
  const auto state = manifest_.state(container.storage);
  const Marker marker = read_marker(marker_path(container));
  if (state.generation == 0) return true;   // nothing in the bucket to be behind of
  if (marker.generation < 0) return false;  // no local copy (a wiped disk, a new node)
  // Its own writes never make this instance's copy stale, even when it died between a
  // manifest change and the marker's update; another writer's do.
  return marker.generation == state.generation || state.writer == instance_id_;
}

std::string ContainerDurability::restore_memory_file(const Container& container,
                                                     const store::ManifestRow& row) {
  // The server's own folder (root's, 0700: no sandbox reaches it), not a sandbox path.
  const std::string relative = row.path.substr(service::kMemoryManifestPath.size() + 1);
  if (relative.find("..") != std::string::npos) return "a checkpoint file named " + row.path;
  const fs::path target = fs::path(service::memory_folder(container)) / relative;
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) return "cannot make " + target.parent_path().string() + ": " + ec.message();
  chmod(service::memory_folder(container).c_str(), 0700);
  const std::string temp = target.string() + ".part";
  UniqueFd file(::open(temp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!file.valid()) return "cannot create " + temp;
  auto got = client_->get_object(row.object_key, file.get());
  if (!got || *got != row.size || fsync(file.get()) != 0 || ::rename(temp.c_str(), target.c_str()) != 0) {
    unlink(temp.c_str());
    return got ? "cannot place " + target.string() : got.error().describe();
  }
  return {};
}

Result<void> ContainerDurability::restore_blocking(Container& container) {
  const auto transfer = container.bucket.transfer_lock();
  if (container.bucket.local_ready()) return {};
  if (local_copy_valid(container)) return {};
  const auto started = std::chrono::steady_clock::now();
  const auto state = manifest_.state(container.storage);
  const auto rows = manifest_.rows(container.storage);
  const uid_t uid = config_.sandbox_host_uid;
  spdlog::info("bucket: restoring container {} ({} files, generation {})", container.id, rows.size(),
               state.generation);
  auto unavailable = [&](const std::string& why) -> Result<void> {
    spdlog::warn("bucket: restoring container {}: {}", container.id, why);
    return ApiError::overloaded(
        "The container's files cannot be restored from the sessions bucket now; try again later",
        config_.retry_after_sec);
  };
  // The stale (or partial) local copy goes first: the bucket is the truth.
  for (const auto& [mount, host] : mounts_of(container)) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(host, ec)) fs::remove_all(entry.path(), ec);
  }
  for (const auto& row : rows) {
    if (is_memory_row(row.path)) {
      if (auto failure = restore_memory_file(container, row); !failure.empty()) return unavailable(failure);
      continue;
    }
    auto resolved = resolve_sandbox_path(container.paths, row.path);
    if (!resolved || resolved->mount == Mount::kSkills || resolved->relative.empty()) continue;
    UniqueFd root(::open(resolved->host_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root.valid()) return unavailable("cannot open " + resolved->host_root);
    if (int rc = make_parents_beneath(root.get(), resolved->relative, uid, uid); rc < 0)
      return unavailable("cannot make the folders of " + row.path);
    const auto slash = resolved->relative.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : resolved->relative.substr(0, slash);
    const std::string leaf =
        slash == std::string::npos ? resolved->relative : resolved->relative.substr(slash + 1);
    UniqueFd directory(open_beneath(root.get(), parent, O_RDONLY | O_DIRECTORY));
    if (!directory.valid()) return unavailable("cannot open the folder of " + row.path);
    const std::string temp = std::string(kTempPrefix) + random_hex(16);
    UniqueFd file(open_beneath(directory.get(), temp, O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW, 0600));
    if (!file.valid()) return unavailable("cannot create " + row.path);
    auto got = client_->get_object(row.object_key, file.get());
    if (!got || *got != row.size) {
      unlinkat(directory.get(), temp.c_str(), 0);
      return unavailable(got ? "object " + row.object_key + " has " + std::to_string(*got) +
                                   " bytes, the manifest says " + std::to_string(row.size)
                             : got.error().describe());
    }
    const timespec mtime{static_cast<time_t>(row.mtime_ns / 1'000'000'000),
                         static_cast<long>(row.mtime_ns % 1'000'000'000)};
    const timespec times[2] = {mtime, mtime};
    std::string head(store::kMimeHeadBytes, '\0');
    ssize_t head_bytes = pread(file.get(), head.data(), head.size(), 0);
    head.resize(head_bytes > 0 ? static_cast<size_t>(head_bytes) : 0);
    if (fchown(file.get(), uid, uid) != 0 || fchmod(file.get(), row.mode & 07777) != 0 ||
        futimens(file.get(), times) != 0 ||
        renameat(directory.get(), temp.c_str(), directory.get(), leaf.c_str()) != 0) {
      unlinkat(directory.get(), temp.c_str(), 0);
      return unavailable("cannot place " + row.path);
    }
    // The file's record as it was: same id (the path), etag and mtime; created_at kept.
    store::FileRecord record;
    record.storage = container.storage;
    record.path = resolved->sandbox_path;
    record.size = row.size;
    record.etag = row.md5;
    record.mime = store::detect_mime(leaf, head);
    record.mtime_ns = row.mtime_ns;
    auto known = metadata_.find_file(container.storage, record.path);
    record.created_at = known ? known->created_at : static_cast<int64_t>(std::time(nullptr));
    metadata_.put_file(record, false);
  }
  // The bytes are on disk before the marker says the copy is whole.
  for (const auto& [mount, host] : mounts_of(container)) {
    UniqueFd root(::open(host.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (root.valid()) syncfs(root.get());
  }
  write_marker(container, state.generation);
  container.bucket.caught_up();
  ops::metrics().storage_restored(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return {};
}

asio::awaitable<Result<void>> ContainerDurability::ensure_local(std::shared_ptr<Container> container) {
  if (container->bucket.local_ready()) co_return Result<void>();
  auto work = [this, container] { return restore_blocking(*container); };
  Result<void> restored = ApiError::internal();
  try {
    restored = co_await run_blocking(std::move(work));
  } catch (const store::FencedError& e) {
    // Its file records could not be written: the container is another replica's now,
    // or deleted. The retry is relayed to the holder, or finds it gone.
    spdlog::warn("bucket: restoring container {}: {}", container->id, e.what());
    if (on_fenced_) on_fenced_(e);
    restored =
        ApiError::overloaded("The container moved to another replica; try again", config_.retry_after_sec);
  } catch (const std::exception& e) {
    spdlog::error("bucket: restoring container {}: {}", container->id, e.what());
    restored = ApiError::overloaded("The container's files cannot be restored now; try again later",
                                    config_.retry_after_sec);
  }
  if (restored) container->bucket.local_is_ready();
  co_return restored;
}

asio::awaitable<void> ContainerDurability::forget(std::shared_ptr<Container> container) {
  auto work = [this, storage = container->storage] { return manifest_.remove_all(storage); };
  auto keys = co_await run_blocking(std::move(work));
  delete_objects_later(std::move(keys));
  // And whatever else is under the container's prefix: an object a paused holder sent
  // before it met the fence (it deletes that one itself when it comes back, unless it
  // dies first), or one whose row never got written.
  auto sweep = [client = client_, prefix = config_.s3.prefix + "objects/" + container->storage + "/"] {
    auto listed = client->list_objects(prefix);
    if (!listed) {
      spdlog::warn("bucket: listing {}: {}", prefix, listed.error().describe());
      return;
    }
    for (const auto& object : *listed)
      if (auto removed = client->delete_object(object.key); !removed)
        spdlog::warn("bucket: deleting {}: {}", object.key, removed.error().describe());
  };
  co_await run_blocking(std::move(sweep));
}

uint64_t ContainerDurability::pending_flush_bytes() const {
  if (!open_) return 0;
  uint64_t total = 0;
  for (const auto& container : open_()) total += container->bucket.unflushed_bytes();
  return total;
}

asio::awaitable<std::string> ContainerDurability::bucket_problem() {
  auto check = [client = client_] { return client->check_bucket(); };
  auto answered = co_await run_blocking(std::move(check));
  if (answered) co_return std::string();
  co_return "the sessions bucket does not answer (" + answered.error().describe() + ")";
}

}  // namespace sandboxd::cluster
