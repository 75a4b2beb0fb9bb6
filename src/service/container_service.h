// Containers and their sandboxes: the service behind the containers, tools, files and
// thread endpoints. A container is a persistent file space (owner, id) on disk — an
// ext4 volume for workspace and outputs (the size limit) and a folder for uploads —
// and at most one running sandbox, started on demand and stopped when idle for
// sessionTTLSeconds (files kept).
//
// ContainerService is the one face of it the surfaces and the cluster see; behind it:
//   container_registry.h   the open containers, their transitions, the capacity's books
//   container_storage.h    a container's volume and folders (blocking: the pool's)
//   capacity_policy.h      whether one more sandbox may start (a pure function)
//   reaper_policy.h        which idle sandboxes stop and which containers close (pure)
//   container_lifecycle.cc opening, starting, stopping, removing, draining, the reaper
//   container_execution.cc running a command or a Python cell (admission, audit)
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "base/sandbox_paths.h"
#include "ops/admission.h"
#include "ops/config.h"
#include "ops/live_config.h"
#include "ops/owner_admission.h"
#include "runtime/runtime.h"
#include "service/cluster_hooks.h"
#include "service/container.h"
#include "service/container_registry.h"
#include "service/container_storage.h"
#include "service/python_kernel.h"
#include "service/sandbox_networking.h"
#include "service/sandbox_pool.h"
#include "service/spare_volumes.h"
#include "store/file_store.h"
#include "store/metadata.h"

namespace sandboxd::service {

namespace asio = boost::asio;

// The reason of a stop that keeps the container's files only, whatever runtime.keepMemory
// says (E2B's pause with keepMemory: false).
inline constexpr std::string_view kStopKeepingFilesOnly = "paused_files_only";

// The contract's error for code execution with no provider behind it.
inline constexpr std::string_view kNoProvider = "code_execution provider is not configured.";

// One cell for the container's persistent Python (ContainerService::run_python).
struct PythonCall {
  std::string code;
  std::chrono::milliseconds timeout{60'000};
  size_t output_limit = 1 << 20;  // per stream
  // Restarts the kernel first (its variables are lost; the sandbox and files stay).
  bool restart = false;
  // The kernel's environment when this call starts it (as for commands).
  std::vector<std::string> extra_env;
  // Client tools the code may call (programmatic tool calling): the cell may pause.
  CellTools tools;
  // The context whose kernel runs it (kDefaultPythonContext: the container's own).
  std::string context{kDefaultPythonContext};
  // Set in os.environ for this cell only.
  std::vector<std::pair<std::string, std::string>> env;
  // Streams the cell's events as they happen (python_kernel.h); the result then has
  // only the status and counts.
  KernelEventSink on_event;
  std::shared_ptr<runtime::Cancellation> cancellation;  // the caller went away: interrupted
};

// A running sandbox as an operator sees it (`sandboxd ps`).
struct SandboxStatus {
  std::string owner, container;
  pid_t pid = -1;  // host pid of its PID 1
  double age_seconds = 0;
  uint64_t memory_bytes = 0;
  int executing = 0;  // commands running now
  int64_t last_used_at = 0;
};

class ContainerService {
 public:
  // `runtime` may be null: no code-execution provider (files work, commands do not).
  ContainerService(asio::io_context& io, ops::LiveConfig& config, runtime::Runtime* runtime,
                   store::Metadata& metadata);
  ~ContainerService();

  // 1-128 characters of [A-Za-z0-9._:-].
  static bool valid_id(std::string_view id);
  static std::string default_id() { return "default"; }
  std::string new_id() const;  // "cntr_" + random

  // The container (owner, id); with `create`, made if missing. 404 for a missing (or
  // another owner's) container. An open container (with no lease to confirm) at once;
  // otherwise this request opens it off the I/O threads (the database, the lease, the
  // volume's mount: on the store pool with PostgreSQL, on the blocking pool with
  // SQLite) while other requests for the same container wait for that outcome without
  // holding a thread, and requests for other containers wait for nothing.
  asio::awaitable<Result<std::shared_ptr<Container>>> async_open(std::string owner, std::string id,
                                                                 bool create);
  // list() as a store call.
  asio::awaitable<std::vector<store::ContainerRecord>> async_list(std::string owner, size_t limit,
                                                                  std::string after_id);
  std::vector<store::ContainerRecord> list(const std::string& owner, size_t limit,
                                           const std::string& after_id);
  // The container if it is open (its volume mounted) now; nothing is mounted for it.
  std::shared_ptr<Container> find_open(const std::string& owner, const std::string& id) const;

  // Runs a command, starting the sandbox first if needed. `restart` stops the sandbox
  // and empties the workspace before running. Admission first: with every execution
  // slot taken past capacity.queueTimeoutSec, a 429 (rate_limit_error, Retry-After).
  asio::awaitable<Result<runtime::ExecResult>> exec(std::shared_ptr<Container> container,
                                                    runtime::ExecRequest request, bool restart);
  // Runs a cell in the container's persistent Python, starting the sandbox and the
  // kernel first if needed; the same admission as exec (a cell is an execution).
  asio::awaitable<Result<KernelResult>> run_python(std::shared_ptr<Container> container, PythonCall call);
  // Starts a long-lived process in the container's sandbox (a client's background
  // process, with its stdin kept open), starting the sandbox first if needed: the same
  // admission as exec for the start, after which the process holds no execution slot.
  // The caller owns the channel's descriptors and waits for the process on the sandbox.
  struct StartedProcess {
    std::shared_ptr<runtime::Sandbox> sandbox;
    runtime::ProcessChannel channel;
  };
  asio::awaitable<Result<StartedProcess>> start_process(std::shared_ptr<Container> container,
                                                        runtime::ProcessRequest request);
  // Answers the tool calls a paused cell of the container's kernel waits on and runs it
  // on (the same admission as run_python). nullopt: no such cell is paused (it ended,
  // its pause expired, the sandbox or the kernel restarted).
  asio::awaitable<Result<std::optional<KernelResult>>> resume_python(std::shared_ptr<Container> container,
                                                                     std::shared_ptr<PythonKernel> kernel,
                                                                     uint64_t cell,
                                                                     std::vector<KernelToolAnswer> answers);
  // The container's Python contexts: the default one first, then the others in order
  // of creation. Made, restarted and removed without starting anything: a context's
  // kernel starts on its first cell (and a restart or removal kills a running one).
  static constexpr size_t kMaxPythonContexts = 16;  // the default one included
  std::vector<PythonContext> python_contexts(Container& container);
  Result<PythonContext> create_python_context(Container& container, std::string cwd);
  Result<void> restart_python_context(Container& container, const std::string& id);
  Result<void> remove_python_context(Container& container, const std::string& id);

  // Starts the container's sandbox now, in the background, as its first command would
  // (quotas and capacity apply; a start that fails is the next command's to report):
  // for a surface whose clients expect a running sandbox once they made one (E2B).
  void start_sandbox_soon(std::shared_ptr<Container> container);
  // `reason` labels the stop in the metrics (api, idle, deleted, restart, shutdown).
  asio::awaitable<void> stop(std::shared_ptr<Container> container, const char* reason = "api");
  asio::awaitable<void> remove(std::shared_ptr<Container> container);

  // E2B's snapshots (container_snapshots.cc). Whether a stop keeps the sandbox's memory
  // here (a tier that keeps memory, runtime.keepMemory on).
  bool keeps_memory() const;
  struct CapturedState {
    uint64_t bytes = 0;   // what the copy takes on disk
    bool memory = false;  // it holds a checkpoint of the sandbox's memory
  };
  // Copies the container's state into `folder` (made here; it must not exist): its
  // volume's image, and with keeps_memory() its sandbox's memory: a running sandbox is
  // checkpointed and restored in place (the same processes go on), a stopped one's
  // checkpoint is taken as it is. A native sandbox runs on while its volume is copied
  // (frozen meanwhile). No start of its sandbox overlaps the copy.
  asio::awaitable<Result<CapturedState>> capture_state(std::shared_ptr<Container> container,
                                                       std::string folder);
  // Gives a container made a moment ago, before its sandbox first starts, the state
  // `capture_state` put in `folder`: its volume becomes a copy of that image, and the
  // memory (where this tier keeps memory) is what its first start restores.
  asio::awaitable<Result<void>> seed_state(std::shared_ptr<Container> container, std::string folder);

  // Refreshes last activity (expires_at rolls). The index's copy is written at most
  // once a second, inline with SQLite, in the background with PostgreSQL (not awaited;
  // the destructor waits for those still queued).
  void touch(Container& container);
  int64_t expires_at(const Container& container) const;
  static std::string format_time(int64_t unix_seconds);

  store::Metadata& metadata() { return metadata_; }
  // The configuration in effect now (a snapshot).
  std::shared_ptr<const ops::Config> settings() const { return config_.get(); }
  size_t running_sandboxes() const;
  // Every running container sandbox, and how many pre-started ones wait.
  asio::awaitable<std::vector<SandboxStatus>> sandboxes();
  size_t prestarted_ready() const;
  // The open containers with this id (an operator's `stop` names no owner).
  std::vector<std::shared_ptr<Container>> find_open_any_owner(const std::string& id) const;
  bool code_execution_available() const { return runtime_ != nullptr; }
  // Sandboxes started from now on get the API and the allow-listed services.
  void set_network(SandboxNetworking* network) {
    network_ = network;
    pool_.set_network(network);
  }
  // Why code execution is unavailable (no runtime): a missing sandbox image, else the
  // contract's "provider is not configured".
  void set_unavailable_reason(std::string reason) { unavailable_reason_ = std::move(reason); }
  // The configuration was reloaded: the idle reaper looks again at once, with the TTL
  // (and the interval between its passes) now in force.
  void settings_reloaded();
  std::string unavailable_reason() const {
    return unavailable_reason_.empty() ? std::string(kNoProvider) : unavailable_reason_;
  }
  const ops::Admission& admission() const { return *admission_; }
  ops::Admission& admission() { return *admission_; }
  // Starts a throwaway sandbox and runs `true` in it: what /ready reports. Empty when
  // that worked, else the reason.
  asio::awaitable<std::string> probe();

  // Stops every sandbox and unmounts every volume (graceful shutdown).
  asio::awaitable<void> shutdown();

  // Cluster mode (docs/storage.md): a container is served under its lease, taken when it
  // opens (a lease newly taken makes the local copy be checked against the bucket's
  // manifest before use: durability->ensure_local), released when its sandbox stops
  // (after durability->flush succeeded). Set once, before serving.
  void set_cluster(LeaseKeeper* leases);
  LeaseKeeper* leases() const { return leases_; }  // null in single-host mode
  struct DrainOutcome {
    size_t released = 0, kept = 0;  // kept: still held (a flush failed)
  };
  // Refuses new containers, lets running commands finish (up to `grace`, then they are
  // cancelled), stops every sandbox and releases every lease; the server keeps running.
  asio::awaitable<DrainOutcome> drain(std::chrono::seconds grace);
  // storage.backend s3: the bucket copy (restore before use, flush after stops).
  void set_durability(BucketCopy* durability) { durability_ = durability; }
  BucketCopy* durability() const { return durability_; }
  // The watches of a container's uploads/ and outputs/ (store/tree_changes.h): kept
  // while its sandbox runs, removed when it stops. Set once, before serving.
  void set_tree_changes(store::TreeChanges* changes) { tree_changes_ = changes; }
  // Every open container (its volume mounted).
  std::vector<std::shared_ptr<Container>> open_containers() const;

 private:
  using Key = ContainerRegistry::Key;
  using Transition = ContainerRegistry::Transition;
  asio::awaitable<Result<std::shared_ptr<Container>>> run_opening(Key key, bool create,
                                                                  std::shared_ptr<Container> open,
                                                                  std::shared_ptr<Transition> transition);
  // What opening does that waits (blocking: a pool thread): confirms the lease of a
  // container open here (`open`), or finds (or makes) and mounts it. Touches no map.
  Result<std::shared_ptr<Container>> open_blocking(const std::string& owner, const std::string& id,
                                                   bool create, const std::shared_ptr<Container>& open);
  // The container was deleted through another replica (this one found its record or
  // lease gone): its sandbox stops, nothing more is flushed, its mount and local copy go.
  asio::awaitable<void> forget_locally(std::shared_ptr<Container> container);
  asio::awaitable<Result<std::shared_ptr<runtime::Sandbox>>> ensure_sandbox(
      std::shared_ptr<Container> container);
  asio::awaitable<void> stop_on_strand(std::shared_ptr<Container> container, const char* reason);
  // The container's memory (container_memory.cc): whether a stop for `reason` keeps it,
  // the checkpoint taken at such a stop (failures logged and counted: the stop goes on,
  // files only), and a start from the checkpoint (nullptr when there is none or it could
  // not be restored: the caller starts the sandbox fresh).
  bool keeps_memory_at(const char* reason) const;
  asio::awaitable<Result<CapturedState>> capture_on_strand(std::shared_ptr<Container> container,
                                                           std::string folder);
  asio::awaitable<void> checkpoint_memory(std::shared_ptr<Container> container,
                                          std::shared_ptr<runtime::Sandbox> sandbox);
  asio::awaitable<std::shared_ptr<runtime::Sandbox>> restore_memory(std::shared_ptr<Container> container);
  // Admission for one execution (a slot, fairly shared between the owners that wait)
  // and the running sandbox, started if need be. The ticket is held for the execution.
  asio::awaitable<Result<std::shared_ptr<runtime::Sandbox>>> admit(std::shared_ptr<Container> container,
                                                                   ops::Admission::Ticket& ticket);
  // Under opensandbox.runtime.resourceQuota, reserves room for one more sandbox, stopping
  // the least recently used idle one if need be; 503 (overloaded) when none is idle.
  // Also keeps each owner under quotas.runningSandboxesPerOwner, stopping that owner's
  // least recently used idle sandbox if need be; 429 (rate limited) when none is idle.
  // The caller releases the reservation (registry_.release_room) once its sandbox runs.
  asio::awaitable<Result<void>> make_room(std::shared_ptr<Container> for_container);
  // 503 overloaded_error for an unexpected host failure (the detail goes to the log).
  ApiError host_out_of_something(const std::string& what, const std::exception& e) const;
  // A container that has a record, its storage made ready (blocking).
  Result<std::shared_ptr<Container>> load(const store::ContainerRecord& record);
  // open_blocking() of a container that has a record: its lease, then its volume.
  Result<std::shared_ptr<Container>> open_existing(const store::ContainerRecord& record);
  asio::awaitable<void> reap_idle();
  runtime::SandboxOptions sandbox_options(const ContainerPaths& dirs, const std::string& name) const;
  // Cluster mode: the lease before serving an open container (ensure_local when fresh).
  // `existing`: the container has a record (see LeaseKeeper::claim).
  Result<void> claim_lease(Container& container, bool existing);
  // Cluster mode: the final flush, then the lease goes (kept when the flush fails).
  asio::awaitable<void> flush_and_release(std::shared_ptr<Container> container);
  // Cluster mode: another replica took the container over; its sandbox here stops (no
  // flush, no release: this copy is no longer the container's). When the container
  // turns out deleted meanwhile, its mount and local copy go too.
  void lease_lost(const std::string& storage);
  asio::awaitable<void> check_still_there(std::shared_ptr<Container> container);

  asio::io_context& io_;
  ops::LiveConfig& config_;
  runtime::Runtime* runtime_;
  SandboxNetworking* network_ = nullptr;
  LeaseKeeper* leases_ = nullptr;
  BucketCopy* durability_ = nullptr;
  store::TreeChanges* tree_changes_ = nullptr;
  std::string unavailable_reason_;
  std::shared_ptr<ops::Admission> admission_;
  store::Metadata& metadata_;
  ContainerRegistry registry_;

  std::atomic<bool> shutting_down_{false};
  // touch()'s PostgreSQL writes still queued (shared with them).
  std::shared_ptr<std::atomic<int>> background_touches_ = std::make_shared<std::atomic<int>>(0);
  // The reaper's pass runs on its strand; a reload or a shutdown wakes it there.
  asio::strand<asio::io_context::executor_type> reaper_strand_;
  asio::steady_timer reaper_timer_;
  std::atomic<uint64_t> sandbox_counter_{0};
  // Each with its own lock; declared last so they go first (their threads and
  // coroutines use the settings above).
  SpareVolumes spares_;
  ContainerStorage storage_;
  SandboxPool pool_;
};

}  // namespace sandboxd::service
