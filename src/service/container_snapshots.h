// A container's state copied out and into another container (container_snapshots.cc):
// E2B's snapshots and forks (e2b/service/snapshots.h). The files are the volume's image;
// the memory (where this tier keeps memory: ContainerMemory) is the checkpoint a stop
// writes. Holds no state of its own; a capture runs on the container's strand, where it
// keeps any start of the sandbox from overlapping the copy.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "base/error.h"
#include "service/container.h"
#include "service/container_lifecycle.h"
#include "service/container_memory.h"
#include "service/container_parts.h"

namespace sandboxd::service {

class ContainerSnapshots {
 public:
  ContainerSnapshots(ContainerParts& parts, ContainerLifecycle& lifecycle, ContainerMemory& memory)
      : parts_(parts), lifecycle_(lifecycle), memory_(memory) {}

  struct CapturedState {
    uint64_t bytes = 0;   // what the copy takes on disk
    bool memory = false;  // it holds a checkpoint of the sandbox's memory
  };
  // Copies the container's state into `folder` (made here; it must not exist): its
  // volume's image, its uploads (a folder beside the volume; their bytes are counted),
  // and with keeps_memory() its sandbox's memory: a running sandbox is
  // checkpointed and restored in place (the same processes go on), a stopped one's
  // checkpoint is taken as it is. A native sandbox runs on while its volume is copied
  // (frozen meanwhile). No start of its sandbox overlaps the copy.
  asio::awaitable<Result<CapturedState>> capture_state(std::shared_ptr<Container> container,
                                                       std::string folder);
  // Gives a container made a moment ago, before its sandbox first starts, the state
  // `capture_state` put in `folder`: its volume becomes a copy of that image, the
  // uploads its own (recorded by its next listing), and the memory (where this tier
  // keeps memory) is what its first start restores.
  asio::awaitable<Result<void>> seed_state(std::shared_ptr<Container> container, std::string folder);

 private:
  asio::awaitable<Result<CapturedState>> capture_on_strand(std::shared_ptr<Container> container,
                                                           std::string folder);

  ContainerParts& parts_;
  ContainerLifecycle& lifecycle_;
  ContainerMemory& memory_;
};

}  // namespace sandboxd::service
