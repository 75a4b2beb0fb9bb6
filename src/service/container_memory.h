// A container's memory across stops (container_memory.cc): whether a stop keeps it, the
// checkpoint a stop takes, and the start from that checkpoint. The checkpoint lives
// beside its volume, never in it. The sessions bucket copies it with the files
// (cluster/container_durability.cc), so that a container that moves to another replica
// comes back there with its memory.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/runtime.h"
#include "service/container.h"
#include "service/container_parts.h"

namespace sandboxd::service {

// The reason of a stop that keeps the container's files only, whatever runtime.keepMemory
// says (E2B's pause with keepMemory: false).
inline constexpr std::string_view kStopKeepingFilesOnly = "paused_files_only";

// <container folder>/memory: the checkpoint's image (image/) and, written last, the list
// of the Python kernels it holds (kernels): a folder without that list is unfinished.
std::string memory_folder(const Container& container);

// The memory folder's files in the sessions bucket's manifest: under this path, which
// no sandbox path starts with (so the Files API never lists them).
inline constexpr std::string_view kMemoryManifestPath = "/.sandboxd/memory";

// What a surface that keeps its own long-lived processes in a sandbox (E2B's envd: its
// process table, its readers) is told of that sandbox's memory, so that the processes a
// checkpoint keeps come back to it after the restore. An interface here, implemented by
// the surface (the service never includes a surface) and registered at wiring
// (ContainerService::set_memory_listener). checkpointing() and restored() are called on
// the container's strand, memory_lost() on any thread.
class SandboxMemoryListener {
 public:
  virtual ~SandboxMemoryListener() = default;
  // The sandbox of `container` is about to be checkpointed: its processes end for the
  // server as it stops (runtime::Sandbox::wait_process answers -1), and may come back
  // with the restore. The listener keeps what it knows of them until restored() or
  // memory_lost().
  virtual void checkpointing(const Container& container) = 0;
  // The sandbox came back from its checkpoint: the listener adopts its processes
  // (runtime::Sandbox::adopt_process) before the ones nobody adopts are let go. An
  // exception is logged and the restore stands.
  virtual asio::awaitable<void> restored(std::shared_ptr<Container> container,
                                         std::shared_ptr<runtime::Sandbox> sandbox) = 0;
  // What was in the sandbox's memory is gone: the checkpoint failed or was not kept,
  // the sandbox started fresh, the container was deleted or is served elsewhere now.
  virtual void memory_lost(const Container& container) = 0;
};

// Used by ContainerLifecycle (a stop checkpoints, a start restores) and
// ContainerSnapshots (whether a snapshot holds memory). Holds no state of its own: the
// checkpoint is on disk, the restored kernels in the container's `python` part; both
// calls that take a container run on its strand.
class ContainerMemory {
 public:
  explicit ContainerMemory(ContainerParts& parts) : parts_(parts) {}

  // Whether a stop keeps the sandbox's memory here (a tier that keeps memory,
  // runtime.keepMemory on).
  bool keeps_memory() const;
  // Whether a stop for `reason` keeps it (never for a deletion, a restart or a files-only
  // pause).
  bool keeps_memory_at(const char* reason) const;
  // How long a stop for `reason` holds the sandbox paused in place before its checkpoint
  // (runtime.pauseHoldSeconds; zero: none): only a stop a client may soon undo (idle, an
  // API or admin stop, E2B's pause), and never in cluster mode, where the container's
  // next call may come to another replica, which needs the checkpoint in the bucket.
  std::chrono::seconds hold_at(const char* reason) const;
  // The checkpoint taken at such a stop (failures logged and counted: the stop goes on,
  // files only).
  asio::awaitable<void> checkpoint(std::shared_ptr<Container> container,
                                   std::shared_ptr<runtime::Sandbox> sandbox);
  // A start from the checkpoint (nullptr when there is none or it could not be restored:
  // the caller starts the sandbox fresh).
  asio::awaitable<std::shared_ptr<runtime::Sandbox>> restore(std::shared_ptr<Container> container);
  // The container's memory is gone without a start (deleted, served elsewhere now): the
  // listener forgets what it kept of it.
  void lost(const Container& container) {
    if (listener_) listener_->memory_lost(container);
  }

  // Set once, before serving; it outlives every stop and start (ContainerService's
  // shutdown checkpoints with it).
  void set_listener(SandboxMemoryListener* listener) { listener_ = listener; }

 private:
  ContainerParts& parts_;
  SandboxMemoryListener* listener_ = nullptr;
};

}  // namespace sandboxd::service
