// Pre-formatted, mounted container volumes, so that formatting stays off the request
// path: a new container takes a spare with a rename and a mount move. One thread keeps a
// few ready; it has its own lock and touches nothing else of the service. Past the
// spares (a burst of new containers) a volume is made on the spot. Either way an image is
// a copy of a pristine one, formatted by mke2fs once per shape and never mounted
// (Volume::copy_pristine): no mke2fs run per volume.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "runtime/volume.h"

namespace sandboxd::service {

struct VolumeShape {
  uint64_t image_bytes = 0;  // the ext4 image's size (see volume_image_bytes)
  uid_t owner = 0;           // the host uid its root folder belongs to
  bool operator==(const VolumeShape&) const = default;
};

// The image size that gives code `workspace_bytes` of usable space: ext4's journal, inode
// tables and group descriptors take about a tenth of a small image.
uint64_t volume_image_bytes(uint64_t workspace_bytes);

// What a client is told when the host cannot make or attach a volume: 503
// overloaded_error with Retry-After (the host is full now, not the request wrong).
ApiError unavailable_volume(runtime::VolumeError error, int retry_after);

class SpareVolumes {
 public:
  // `dir` holds the spares (emptied first: an earlier run's are unmounted by the start-up
  // cleanup). `shape` is asked for each new volume, so a reloaded size limit applies.
  SpareVolumes(std::string dir, std::function<VolumeShape()> shape);
  ~SpareVolumes();  // stops the thread and unmounts the spares left
  SpareVolumes(const SpareVolumes&) = delete;
  SpareVolumes& operator=(const SpareVolumes&) = delete;

  // Gives `image` a formatted volume mounted at `mount_point`: a spare when there is one,
  // else one made on the spot. A VolumeError when the host cannot make one (disk full,
  // no free loop device); see unavailable_volume().
  runtime::VolumeResult<void> take(const std::string& image, const std::string& mount_point);

 private:
  void keep_ready();
  // A formatted image of `shape` at `image`: a copy of the pristine image of that shape,
  // made first when there is none yet (or the shape changed).
  runtime::VolumeResult<void> make_image(const std::string& image, const VolumeShape& shape);

  static constexpr size_t kSpares = 3;
  const std::string dir_;
  const std::function<VolumeShape()> shape_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> ready_;  // image paths; each is mounted at <image>.mnt
  bool stopping_ = false;
  // Held while the pristine image is made, replaced or copied (a copy is quick).
  std::mutex pristine_mutex_;
  std::string pristine_;  // its path in dir_, empty until the first volume
  VolumeShape pristine_shape_;
  std::thread thread_;
};

}  // namespace sandboxd::service
