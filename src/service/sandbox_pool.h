// The pre-started sandboxes: a few sandboxes kept running over empty "slot" folders
// (shared mount points), waiting to be handed to a container. Claiming one binds the
// container's folders onto the slots; the binds propagate into the waiting sandbox (see
// runtime::SandboxOptions::pre_started), which then makes them its own
// (runtime::Sandbox::attach_folders), so a container's first command runs at once.
// Where the runtime starts every sandbox over slots (Runtime::starts_over_slots), a
// sandbox started or restored for its container takes a slot too (slot_for).
// The pool has its own lock and refills itself on the I/O context.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/sandbox_paths.h"
#include "runtime/runtime.h"
#include "service/sandbox_networking.h"

namespace sandboxd::service {

namespace asio = boost::asio;

// One slot: its folders, and the sandbox waiting over them (if any).
struct Slot {
  std::string root;
  // The slot folders: root/rw/{workspace,outputs} and root/ro/{uploads,skills}, the
  // layout runtime::SandboxOptions::pre_started names (a sandbox may be given the two
  // parents whole, one writable and one read-only).
  ContainerPaths dirs;
  std::shared_ptr<runtime::Sandbox> sandbox;
  std::shared_ptr<NetworkLink> link;  // its network (see sandbox_networking.h)
  std::vector<std::string> bound;     // slot folders carrying a container's bind now
};

class SandboxPool {
 public:
  struct Settings {
    // The options of a sandbox over `dirs` (the service's, so pooled sandboxes get the
    // same limits, image and network plan as any other).
    std::function<runtime::SandboxOptions(const ContainerPaths& dirs, const std::string& name)>
        sandbox_options;
    std::function<int()> size;     // runtime.prestartedSandboxes, read at each refill
    std::function<uid_t()> owner;  // the host uid that owns slot folders
  };

  // `runtime` may be null (no code execution): the pool stays empty. `slots_dir` is
  // emptied (an earlier run's slots were unmounted by the start-up cleanup).
  SandboxPool(asio::io_context& io, runtime::Runtime* runtime, std::string slots_dir, Settings settings);

  // Sandboxes started from now on get the API and the allow-listed services.
  void set_network(SandboxNetworking* network) { network_ = network; }
  // Starts filling the pool.
  void start();

  // A running pre-started sandbox with `paths` bound onto its slots, or null when none is
  // ready (or binding failed). Schedules a refill either way.
  std::shared_ptr<Slot> claim(const ContainerPaths& paths, std::string_view container_id);
  // A free slot (or a new one) with `paths` bound onto it, for a sandbox the caller starts
  // over it (Runtime::starts_over_slots), then gives back with release(). Throws (and
  // keeps nothing bound) when a mount fails. Mounts: call it off the I/O threads.
  std::shared_ptr<Slot> slot_for(const ContainerPaths& paths);
  // After a claimed slot's sandbox stopped: the container's binds come off and the slot
  // is reused.
  void release(const std::shared_ptr<Slot>& slot);
  size_t ready() const;

  // Stops the waiting sandboxes and unmounts every slot (graceful shutdown).
  asio::awaitable<void> shutdown();

 private:
  asio::awaitable<void> refill();
  asio::awaitable<void> stop_and_release(std::shared_ptr<runtime::Sandbox> sandbox,
                                         std::shared_ptr<Slot> slot);
  std::shared_ptr<Slot> new_slot();
  // Binds a container's folders onto a slot's (each recorded in slot.bound). Throws.
  static void bind_container(Slot& slot, const ContainerPaths& paths);
  // Takes the container's binds off a slot (slot.bound), logging what fails.
  static void unbind_container(Slot& slot);
  // Unmounts everything under a slot that is no longer wanted and removes its folder.
  static void dispose(const Slot& slot);

  asio::io_context& io_;
  runtime::Runtime* runtime_;
  const std::string slots_dir_;
  const Settings settings_;
  SandboxNetworking* network_ = nullptr;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> started_{0};  // names pooled sandboxes

  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<Slot>> ready_, free_;
  size_t slots_made_ = 0;
  int starting_ = 0;
};

}  // namespace sandboxd::service
