// A container's state copied out and into another container: E2B's snapshots and forks
// (e2b/service/snapshots.h). The files are the volume's image, copied whole rather than
// as a tree: the copy is taken from the frozen file system in one pass over its
// allocated extents (a reflink where the disk shares extents), it keeps every inode as
// it was (numbers, times, extended attributes, ownership: what a restored gVisor
// checkpoint finds again), and a container made from it mounts it as any volume. The
// memory (gvisor tier) is the checkpoint a stop writes (container_memory.cc), hard-linked
// into the snapshot, so that the restore that brings the source back, which removes its
// own copy, leaves the snapshot's. The uploads (a folder beside the volume, not in it)
// are copied file by file into the snapshot's uploads/, and from there into each
// container made from it, where the next listing of its files records them.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/blocking.h"
#include "base/temp_files.h"
#include "runtime/volume.h"
#include "service/container_snapshots.h"

#include "service/cluster_hooks.h"
#include "service/container_memory.h"

namespace sandboxd::service {
namespace {

namespace fs = std::filesystem;
using runtime::Volume;

constexpr const char* kVolumeFile = "volume.img";
constexpr const char* kMemoryFolder = "memory";
constexpr const char* kKernelsFile = "kernels";  // container_memory.cc's: written last
constexpr const char* kUploadsFolder = "uploads";

// Copies the uploads folder `from` into `to` (made here): its folders and regular files
// with their owners, modes and modification times (a file's record is checked against
// its size and mtime). Anything else is left out: the uploads folder holds what the
// Files API stored, and a symlink there is never followed out of it. A body still being
// written (a temporary name) is left out too. Returns the bytes of the files copied.
uint64_t copy_uploads(const fs::path& from, const fs::path& to) {
  struct stat top {};
  if (lstat(from.c_str(), &top) != 0 || !S_ISDIR(top.st_mode)) return 0;  // none yet
  fs::create_directories(to);
  auto keep_attributes = [](const fs::path& path, const struct stat& st) {
    if (lchown(path.c_str(), st.st_uid, st.st_gid) != 0)
      throw std::runtime_error("lchown " + path.string() + ": " + std::strerror(errno));
    if (chmod(path.c_str(), st.st_mode & 07777) != 0)
      throw std::runtime_error("chmod " + path.string() + ": " + std::strerror(errno));
  };
  keep_attributes(to, top);
  uint64_t bytes = 0;
  for (auto it = fs::recursive_directory_iterator(from); it != fs::recursive_directory_iterator(); ++it) {
    const fs::path target = to / fs::relative(it->path(), from);
    struct stat st {};
    if (lstat(it->path().c_str(), &st) != 0) continue;  // gone meanwhile (a removal)
    if (is_temp_name(it->path().filename().string())) continue;
    if (S_ISDIR(st.st_mode)) {
      fs::create_directories(target);
      keep_attributes(target, st);
    } else if (S_ISREG(st.st_mode)) {
      fs::copy_file(it->path(), target, fs::copy_options::overwrite_existing);
      keep_attributes(target, st);
      const struct timespec times[2] = {st.st_atim, st.st_mtim};
      utimensat(AT_FDCWD, target.c_str(), times, AT_SYMLINK_NOFOLLOW);
      bytes += static_cast<uint64_t>(st.st_size);
    }
  }
  return bytes;
}

// Links every file under `from` into the same place under `to` (a copy where a link
// cannot be made: another file system). The checkpoint's list of kernels goes last, as
// container_memory.cc writes it: a folder without it is never restored. Returns the
// bytes of the files.
uint64_t link_tree(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  chmod(to.c_str(), 0700);  // root's only: the image holds whatever the sandbox had in memory
  uint64_t bytes = 0;
  auto link_one = [&bytes](const fs::path& source, const fs::path& target) {
    std::error_code ec;
    fs::create_hard_link(source, target, ec);
    if (ec) fs::copy_file(source, target, fs::copy_options::overwrite_existing);
    bytes += fs::file_size(source);
  };
  for (const auto& entry : fs::recursive_directory_iterator(from)) {
    const fs::path target = to / fs::relative(entry.path(), from);
    if (entry.is_directory()) {
      fs::create_directories(target);
    } else if (entry.is_regular_file() && entry.path() != from / kKernelsFile) {
      link_one(entry.path(), target);
    }
  }
  if (fs::exists(from / kKernelsFile)) link_one(from / kKernelsFile, to / kKernelsFile);
  return bytes;
}

ApiError no_space() {
  return ApiError::insufficient_storage("The server's disk is full: the snapshot could not be stored");
}

}  // namespace

asio::awaitable<Result<ContainerSnapshots::CapturedState>> ContainerSnapshots::capture_state(
    std::shared_ptr<Container> container, std::string folder) {
  co_return co_await asio::co_spawn(container->strand, capture_on_strand(container, std::move(folder)),
                                    asio::use_awaitable);
}

asio::awaitable<Result<ContainerSnapshots::CapturedState>> ContainerSnapshots::capture_on_strand(
    std::shared_ptr<Container> container, std::string folder) {
  auto& state = container->on_strand;
  co_await state.wait_until_started();
  if (container->deleted) co_return ApiError::not_found("Container not found: " + container->id);
  const bool with_memory = memory_.keeps_memory();
  // (A sandbox held paused by a stop is stopped for its clients, and stays so.)
  const bool held = state.held;
  const bool was_running = state.sandbox && state.sandbox->running() && !held;
  // Its memory: a running sandbox is checkpointed by a stop (which ends it) and comes
  // back from that checkpoint below, its processes where they were; a held one is
  // checkpointed as it is, and its next start restores it.
  if (held || (was_running && with_memory)) co_await lifecycle_.stop_on_strand(container, "snapshot");
  // From here until the copy is done no start of its sandbox begins: a start would take
  // (and remove) the checkpoint the snapshot links. (Nothing suspended between the stop
  // and this mark: the strand ran nothing else.)
  state.begin_starting(container->strand);
  auto copy = [&container, &folder, with_memory]() -> runtime::VolumeResult<CapturedState> {
    fs::create_directory(folder);  // throws when it exists: a snapshot's folder is its own
    chmod(folder.c_str(), 0700);
    CapturedState captured;
    const fs::path memory = memory_folder(*container);
    if (with_memory && fs::exists(memory / kKernelsFile)) {
      captured.bytes += link_tree(memory, fs::path(folder) / kMemoryFolder);
      captured.memory = true;
    }
    auto volume = Volume::copy_frozen(container->volume_image, container->volume_mount,
                                      (fs::path(folder) / kVolumeFile).string());
    if (!volume) return volume.error();
    captured.bytes += *volume;
    // E2B's snapshot is the whole file system: the uploads too.
    try {
      captured.bytes += copy_uploads(container->paths.uploads, fs::path(folder) / kUploadsFolder);
    } catch (const fs::filesystem_error& e) {
      if (e.code() == std::errc::no_space_on_device) return runtime::VolumeError::kNoSpace;
      throw;
    }
    return captured;
  };
  std::string failure;
  std::optional<runtime::VolumeResult<CapturedState>> copied;
  try {
    copied = co_await run_blocking(std::move(copy));
  } catch (const std::exception& e) {
    failure = e.what();
  }
  // (Every path comes here: the copy's failures were caught above.)
  state.end_starting();
  // The source runs again from its checkpoint, as it would on its next command.
  if (was_running && with_memory) lifecycle_.start_sandbox_soon(container);
  if (!failure.empty()) {
    spdlog::error("copying the state of container {} of {} into {}: {}", container->id, container->owner,
                  folder, failure);
    co_return ApiError::internal();
  }
  if (!*copied) co_return no_space();
  co_return **copied;
}

asio::awaitable<Result<void>> ContainerSnapshots::seed_state(std::shared_ptr<Container> container,
                                                             std::string folder) {
  const bool with_memory = memory_.keeps_memory();
  auto seed = [&container, &folder, with_memory]() -> runtime::VolumeResult<void> {
    // Its fresh volume gives way to a copy of the snapshot's (a UUID of its own).
    Volume::unmount(container->volume_mount);
    if (auto copied =
            Volume::copy_pristine((fs::path(folder) / kVolumeFile).string(), container->volume_image);
        !copied)
      return copied.error();
    if (auto mounted = Volume::mount(container->volume_image, container->volume_mount); !mounted)
      return mounted.error();
    const fs::path memory = fs::path(folder) / kMemoryFolder;
    if (with_memory && fs::exists(memory / kKernelsFile)) link_tree(memory, memory_folder(*container));
    // The snapshot's uploads become the container's own (their records are made by the
    // next listing's look at the disk, as for files code wrote).
    try {
      copy_uploads(fs::path(folder) / kUploadsFolder, container->paths.uploads);
    } catch (const fs::filesystem_error& e) {
      if (e.code() == std::errc::no_space_on_device) return runtime::VolumeError::kNoSpace;
      throw;
    }
    return {};
  };
  std::string failure;
  std::optional<runtime::VolumeResult<void>> seeded;
  try {
    seeded = co_await run_blocking(std::move(seed));
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!failure.empty()) {
    spdlog::error("giving container {} of {} the state in {}: {}", container->id, container->owner, folder,
                  failure);
    co_return ApiError::internal();
  }
  container->index.note_change();
  if (parts_.durability) parts_.durability->note_change(*container);
  if (!*seeded) {
    if (seeded->error() == runtime::VolumeError::kNoLoopDevice)
      co_return ApiError::overloaded("No loop device is free for the sandbox's volume; try again later",
                                     parts_.settings()->capacity_retry_after_sec);
    co_return no_space();
  }
  // Cluster mode: its files (and memory) are new to the bucket's copy of it, which its
  // next flush brings in step.
  if (parts_.durability) parts_.durability->note_change(*container);
  co_return Result<void>{};
}

}  // namespace sandboxd::service
