#include "service/container_storage.h"

#include <unistd.h>

#include <spdlog/spdlog.h>
#include <filesystem>
#include <stdexcept>

#include "runtime/volume.h"
#include "service/host_space.h"
#include "service/skill_mounts.h"

namespace sandboxd::service {
namespace {

namespace fs = std::filesystem;
using runtime::Volume;

// Best effort (the folder is going away and nothing waits for it), but never silent: a
// folder left behind holds disk space until the next start-up's cleanup.
void remove_folder(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) spdlog::warn("removing {}: {}", dir.string(), ec.message());
}

void make_owned_dir(const fs::path& dir, uid_t uid, gid_t gid) {
  fs::create_directories(dir);
  if (chown(dir.c_str(), uid, gid) != 0) throw std::runtime_error("chown(" + dir.string() + ") failed");
}

}  // namespace

ContainerStorage::ContainerStorage(ops::LiveConfig& config, std::string containers_dir, SpareVolumes& spares)
    : config_(config), containers_dir_(std::move(containers_dir)), spares_(spares) {}

bool ContainerStorage::has_volume(const std::string& storage) const {
  return fs::exists(fs::path(containers_dir_) / storage / "volume.img");
}

Result<void> ContainerStorage::prepare(Container& container, bool fresh, bool remake_when_missing) {
  const auto settings = config_.get();
  fs::path root = fs::path(containers_dir_) / container.storage;
  const uid_t uid = settings->sandbox_host_uid;
  container.volume_image = (root / "volume.img").string();
  container.volume_mount = (root / "volume").string();
  container.paths.workspace = (root / "volume" / "workspace").string();
  container.paths.outputs = (root / "volume" / "outputs").string();
  container.paths.uploads = (root / "uploads").string();
  container.paths.skills = SkillMounts::prepare_folder(settings->data_dir, container.storage);
  if (!fresh && remake_when_missing && !fs::exists(container.volume_image)) fresh = true;
  if (fresh) {
    create_storage_dirs(root);  // (a full disk throws: the caller answers 503)
    if (auto taken = spares_.take(container.volume_image, container.volume_mount); !taken) {
      remove_folder(root);
      return unavailable_volume(taken.error(), settings->retry_after_sec);
    }
  }
  fs::create_directories(container.volume_mount);
  make_owned_dir(container.paths.uploads, uid, uid);
  if (!Volume::is_mounted(container.volume_mount)) {
    auto mounted = Volume::mount(container.volume_image, container.volume_mount);
    if (!mounted) return unavailable_volume(mounted.error(), settings->retry_after_sec);
  }
  make_owned_dir(container.paths.workspace, uid, uid);
  make_owned_dir(container.paths.outputs, uid, uid);
  return {};
}

void ContainerStorage::discard_unmade(Container& container) {
  try {
    if (!container.volume_mount.empty()) Volume::try_unmount(container.volume_mount);
  } catch (const std::exception& e) {
    spdlog::warn("unmounting {}: {}", container.volume_mount, e.what());
  }
  SkillMounts::remove_folder(config_.get()->data_dir, container.storage);
  remove_folder(fs::path(containers_dir_) / container.storage);
}

void ContainerStorage::discard(const Container& container) {
  SkillMounts::remove_folder(config_.get()->data_dir, container.storage);
  try {
    Volume::unmount(container.volume_mount);
  } catch (const std::exception& e) {
    spdlog::warn("unmounting {}: {}", container.volume_mount, e.what());
  }
  remove_folder(fs::path(containers_dir_) / container.storage);
}

bool ContainerStorage::try_close(const Container& container) {
  try {
    if (!Volume::try_unmount(container.volume_mount)) return false;
    SkillMounts::remove_folder(config_.get()->data_dir, container.storage);
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("unmounting idle volume {}: {}", container.volume_mount, e.what());
    return false;
  }
}

void ContainerStorage::close(const Container& container) {
  try {
    Volume::unmount(container.volume_mount);
  } catch (const std::exception& e) {
    spdlog::warn("unmounting {}: {}", container.volume_mount, e.what());
  }
  // Its skills folder is a mount point too (a shared bind of itself).
  SkillMounts::remove_folder(config_.get()->data_dir, container.storage);
}

void ContainerStorage::empty_workspace(const Container& container) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(container.paths.workspace, ec))
    fs::remove_all(entry.path(), ec);
}

}  // namespace sandboxd::service
