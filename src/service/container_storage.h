// A container's files on this host: its folder under <dataDir>/containers/<storage>,
// the ext4 volume image mounted there (workspace and outputs), the uploads folder and
// the skills folder. Every call here waits on the disk or on mount(2): callers run it on
// the blocking pool (base/blocking.h), never on an I/O thread, and hold no lock of the
// service meanwhile.
#pragma once

#include <string>

#include "base/error.h"
#include "ops/live_config.h"
#include "service/container.h"
#include "service/spare_volumes.h"

namespace sandboxd::service {

class ContainerStorage {
 public:
  ContainerStorage(ops::LiveConfig& config, std::string containers_dir, SpareVolumes& spares);

  // Sets the container's paths and makes its storage ready: a new volume when `fresh`
  // (or when `remake_when_missing` and its image is gone: a wiped disk, a new node, the
  // bucket then fills it), mounted, with its folders owned by the sandbox's user. 503
  // (unavailable_volume) when the host cannot make or mount the volume. An exception
  // (a full disk among them: see host_space.h) when a folder cannot be made.
  Result<void> prepare(Container& container, bool fresh, bool remake_when_missing);
  // Whether the container has a volume image here (cluster mode: a container another
  // replica made or served may have none yet).
  bool has_volume(const std::string& storage) const;
  // Removes what a container that could not be made left (its mount, its folders).
  void discard_unmade(Container& container);
  // A deleted container's skills folder, volume mount and host folder go.
  void discard(const Container& container);
  // Unmounts an idle container's volume unless it is busy (then false: it stays open);
  // its skills folder goes too (remade when it opens again).
  bool try_close(const Container& container);
  // Unmounts the volume and the skills folder, busy or not (graceful shutdown).
  void close(const Container& container);
  // Empties the workspace (restart); uploads and outputs are kept.
  static void empty_workspace(const Container& container);

 private:
  ops::LiveConfig& config_;
  const std::string containers_dir_;
  SpareVolumes& spares_;
};

}  // namespace sandboxd::service
