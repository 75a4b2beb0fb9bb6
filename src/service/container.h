// One container as the service holds it while it is open here: what it is (set when it
// opens), how it is used (atomics any thread reads), its sandbox (its strand's), and the
// state of the parts that work on it, each with its own lock: the file index
// (container_file_index.h: discovery's), the sessions bucket copy (container_bucket.h:
// cluster/container_durability's) and the persistent Pythons (container_python.h).
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/sandbox_paths.h"
#include "runtime/runtime.h"
#include "service/container_bucket.h"
#include "service/container_file_index.h"
#include "service/container_python.h"
#include "service/container_sandbox_state.h"

namespace sandboxd::ops {
struct SandboxEgress;  // ops/sandbox_egress.h
}

namespace sandboxd::service {

struct Container {
  explicit Container(boost::asio::io_context& io) : strand(boost::asio::make_strand(io)) {}

  // What it is: set before it is shared, constant after.
  std::string owner;
  std::string id;
  std::string storage;  // its folder and lease name (ids may repeat after a delete; this never does)
  int64_t created_at = 0;
  ContainerPaths paths;
  std::string volume_image, volume_mount;
  // Keys the container's scoped API tokens (sandbox_credentials.h); never leaves the server.
  std::string api_secret;
  // Its own network options (service/egress_options.h: stored with its row, read back
  // when it opens); null: none. Replaced whole, read by any thread.
  std::atomic<std::shared_ptr<const ops::SandboxEgress>> egress_options;

  // Its use, read and written from any thread.
  std::atomic<int64_t> last_used_at{0};  // unix seconds
  std::atomic<bool> deleted{false};      // tokens, the fast path and the flusher check it
  std::atomic<int> executing{0};         // executions running now (ExecutionMark)

  // Its sandbox. Started and stopped on `strand`; `on_strand` is the strand's
  // (container_sandbox_state.h). The two atomics below give the same answer to readers
  // on any thread: a command in a running sandbox needs no hop onto the strand. (A strand of the
  // io_context's own executor: copied into the handlers and coroutines that run on it,
  // it fits an any_io_executor without an allocation, where a strand of an
  // any_io_executor is allocated at each copy.)
  boost::asio::strand<boost::asio::io_context::executor_type> strand;
  ContainerSandboxState on_strand;
  std::atomic<bool> sandbox_up{false};
  std::atomic<std::shared_ptr<runtime::Sandbox>> live_sandbox;
  bool running() const { return sandbox_up.load(); }
  // Stopped for its clients, its sandbox held paused in place (ContainerSandboxState::held):
  // it still takes the host's room (capacity counts it, an eviction checkpoints it) and
  // its volume stays mounted.
  std::atomic<bool> sandbox_held{false};
  bool takes_room() const { return sandbox_up.load() || sandbox_held.load(); }

  // File discovery's view of its files (discovery.h); locks inside.
  ContainerFileIndex index;

  // The durable copy in the sessions bucket (storage.backend s3;
  // cluster/container_durability.h); its locking rule is the class's.
  ContainerBucket bucket;

  // Its persistent Pythons: the kernel of each context (made on its first call; one of
  // an earlier sandbox is replaced) and the cell paused on tool calls; locks inside.
  ContainerPython python;
};

}  // namespace sandboxd::service
