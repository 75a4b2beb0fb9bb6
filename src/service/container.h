// One container as the service holds it while it is open here: what it is (set when it
// opens), how it is used (atomics any thread reads), its sandbox (its strand's), and the
// state of the parts that work on it, each with its own lock: the file index
// (container_file_index.h: discovery's), the sessions bucket copy (container_bucket.h:
// cluster/container_durability's) and the persistent Python (python_kernel.h).
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

namespace sandboxd::ops {
struct SandboxEgress;  // ops/sandbox_egress.h
}

namespace sandboxd::service {

struct Slot;         // sandbox_pool.h
class NetworkLink;   // sandbox_networking.h
class PythonKernel;  // python_kernel.h

// A Python context of a container: a kernel of its own in the container's sandbox, with
// its own variables (E2B's code-interpreter contexts). Every container has the default
// one, the kernel of code_execution; others are made and removed by request.
inline constexpr std::string_view kDefaultPythonContext = "default";
struct PythonContext {
  std::string id;
  std::string cwd;  // its working directory; empty: the sandbox's (the workspace)
};

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

  // Its sandbox. Started and stopped on `strand`; the members of `on_strand` are the
  // strand's. The two atomics below give the same answer to readers on any thread: a
  // command in a running sandbox needs no hop onto the strand. (A strand of the
  // io_context's own executor: copied into the handlers and coroutines that run on it,
  // it fits an any_io_executor without an allocation, where a strand of an
  // any_io_executor is allocated at each copy.)
  boost::asio::strand<boost::asio::io_context::executor_type> strand;
  struct OnStrand {
    std::shared_ptr<runtime::Sandbox> sandbox;
    std::shared_ptr<Slot> slot;         // when the sandbox came from the pre-started pool
    std::shared_ptr<NetworkLink> link;  // the sandbox's network
    bool starting = false;
    std::unique_ptr<boost::asio::steady_timer> started_event;  // cancelled when a start ends
  } on_strand;
  std::atomic<bool> sandbox_up{false};
  std::atomic<std::shared_ptr<runtime::Sandbox>> live_sandbox;
  bool running() const { return sandbox_up.load(); }

  // File discovery's view of its files (discovery.h); locks inside.
  ContainerFileIndex index;

  // The durable copy in the sessions bucket (storage.backend s3;
  // cluster/container_durability.h); its locking rule is the class's.
  ContainerBucket bucket;

  // The running sandbox's persistent Python, made on its first call; one of an earlier
  // sandbox is replaced.
  struct Python {
    std::mutex mutex;  // guards all of this
    std::shared_ptr<PythonKernel> kernel;
    // Its cell paused on client tool calls (programmatic tool calling), as the /messages
    // turn that ran it left it: the server_tool_use id the client's next request names
    // it by, and the tool_use id of each call it waits on -> the kernel's id of that call.
    struct PausedCode {
      std::string server_tool_id;
      std::weak_ptr<PythonKernel> kernel;
      uint64_t cell = 0;
      std::map<std::string, std::string> calls;
      std::chrono::milliseconds timeout{};  // the cell's, for its result's wording
      int64_t started_ns = 0;               // its start (realtime): the outputs it made since
      std::chrono::steady_clock::time_point expires;
    };
    std::optional<PausedCode> paused_code;
    // The other Python contexts, in order of creation, each with a kernel of its own
    // (made and replaced as the default one is).
    struct NamedPython {
      PythonContext context;
      std::shared_ptr<PythonKernel> kernel;
    };
    std::vector<NamedPython> contexts;
    // The kernels that came back with a sandbox restored from a checkpoint, by context:
    // their process ids, each taken over by its context's next call (PythonKernel::
    // adopt_on_first_call), and listed again by the next checkpoint until then.
    std::map<std::string, uint32_t> restored;
  } python;
};

}  // namespace sandboxd::service
