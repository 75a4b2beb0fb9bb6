#include "service/spare_volumes.h"

#include <unistd.h>

#include <spdlog/spdlog.h>
#include <filesystem>
#include <sstream>

#include "base/ids.h"
#include "runtime/volume.h"

namespace sandboxd::service {

namespace fs = std::filesystem;
using runtime::Volume;

uint64_t volume_image_bytes(uint64_t workspace_bytes) {
  return workspace_bytes + workspace_bytes / 9 + (4u << 20);
}

SpareVolumes::SpareVolumes(std::string dir, std::function<VolumeShape()> shape)
    : dir_(std::move(dir)), shape_(std::move(shape)) {
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  thread_ = std::thread([this] { keep_ready(); });
}

SpareVolumes::~SpareVolumes() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (const auto& spare : ready_) {
    try {
      Volume::unmount(spare + ".mnt");
    } catch (const std::exception& e) {
      spdlog::warn("unmounting spare {}: {}", spare, e.what());
    }
  }
}

ApiError unavailable_volume(runtime::VolumeError error, int retry_after) {
  switch (error) {
    case runtime::VolumeError::kNoLoopDevice:
      return ApiError::overloaded("The host has no free volume device for a new container; try again later",
                                  retry_after);
    case runtime::VolumeError::kNoSpace:
    case runtime::VolumeError::kFormatFailed:
      break;
  }
  return ApiError::overloaded("The host is out of disk space for a new container; try again later",
                              retry_after);
}

runtime::VolumeResult<void> SpareVolumes::take(const std::string& image, const std::string& mount_point) {
  fs::create_directories(mount_point);
  for (;;) {
    std::string spare;
    {
      std::lock_guard lock(mutex_);
      if (!ready_.empty()) {
        spare = ready_.back();
        ready_.pop_back();
      }
    }
    changed_.notify_all();
    if (spare.empty()) break;
    try {
      Volume::move(spare + ".mnt", mount_point);
      fs::rename(spare, image);
      fs::remove(spare + ".mnt");
      return {};
    } catch (const std::exception& e) {
      spdlog::warn("taking spare volume {}: {}", spare, e.what());
    }
  }
  if (auto created = make_image(image, shape_()); !created) return created;
  auto mounted = Volume::mount(image, mount_point);
  if (!mounted) {
    std::error_code ec;
    fs::remove(image, ec);
  }
  return mounted;
}

runtime::VolumeResult<void> SpareVolumes::make_image(const std::string& image, const VolumeShape& shape) {
  std::lock_guard lock(pristine_mutex_);
  // (Made again, too, when it went: an operator may have emptied spares/ by hand.)
  if (pristine_.empty() || pristine_shape_ != shape || access(pristine_.c_str(), R_OK) != 0) {
    const std::string pristine = (fs::path(dir_) / ("pristine-" + std::to_string(shape.image_bytes) + "-" +
                                                    std::to_string(shape.owner) + ".img"))
                                     .string();
    if (auto made = Volume::create(pristine, shape.image_bytes, shape.owner, shape.owner); !made) return made;
    std::error_code ec;
    if (!pristine_.empty() && pristine_ != pristine) fs::remove(pristine_, ec);  // the former shape's
    pristine_ = pristine;
    pristine_shape_ = shape;
  }
  return Volume::copy_pristine(pristine_, image);
}

void SpareVolumes::keep_ready() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (ready_.size() >= kSpares) {
      changed_.wait_for(lock, std::chrono::seconds(5));
      continue;
    }
    // A container that just took a spare is about to start its first command: format
    // the replacement a moment later (formatting and mounting compete for the same
    // cores and kernel locks), unless no spare is left at all.
    if (!ready_.empty()) changed_.wait_for(lock, std::chrono::milliseconds(300));
    if (stopping_) break;
    lock.unlock();
    const std::string image = (fs::path(dir_) / ("spare-" + random_alnum(16) + ".img")).string();
    std::string failure;
    try {
      runtime::VolumeResult<void> made = make_image(image, shape_());
      if (made) {
        fs::create_directories(image + ".mnt");
        made = Volume::mount(image, image + ".mnt");
      }
      if (!made) {
        std::ostringstream message;
        message << made.error();
        failure = message.str();
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
    if (!failure.empty()) {
      spdlog::warn("preparing a spare volume: {}", failure);
      std::error_code ec;
      fs::remove(image, ec);
      fs::remove(image + ".mnt", ec);
      lock.lock();
      changed_.wait_for(lock, std::chrono::seconds(5));
      continue;
    }
    lock.lock();
    ready_.push_back(image);
  }
}

}  // namespace sandboxd::service
