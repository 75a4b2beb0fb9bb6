// Containers and their sandboxes: the service behind the containers, tools, files and
// thread endpoints. A container is a persistent file space (owner, id) on disk — an
// ext4 volume for workspace and outputs (the size limit) and a folder for uploads —
// and at most one running sandbox, started on demand and stopped when idle for
// sessionTTLSeconds (files kept).
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "service/python_kernel.h"
#include "service/cluster_hooks.h"
#include "service/sandbox_networking.h"
#include "service/sandbox_pool.h"
#include "service/spare_volumes.h"
#include "base/error.h"
#include "base/sandbox_paths.h"
#include "ops/admission.h"
#include "ops/config.h"
#include "ops/live_config.h"
#include "ops/owner_admission.h"
#include "runtime/runtime.h"
#include "store/file_store.h"
#include "store/metadata.h"

namespace sandboxd::service {

namespace asio = boost::asio;


// Seed 002's error for code execution with no provider behind it.
inline constexpr std::string_view kNoProvider = "code_execution provider is not configured.";

// A Python context of a container: a kernel of its own in the container's sandbox, with
// its own variables (E2B's code-interpreter contexts). Every container has the default
// one, the kernel of code_execution; others are made and removed by request.
inline constexpr std::string_view kDefaultPythonContext = "default";
struct PythonContext {
  std::string id;
  std::string cwd;  // its working directory; empty: the sandbox's (the workspace)
};

struct Container {
  std::string owner;
  std::string id;
  std::string storage;
  int64_t created_at = 0;
  std::atomic<int64_t> last_used_at{0};  // unix seconds
  ContainerPaths paths;
  std::string volume_image, volume_mount;
  // Keys the container's scoped API tokens (sandbox_credentials.h); never leaves the server.
  std::string api_secret;

  // Guarded by `strand`.
  asio::strand<asio::any_io_executor> strand;
  std::shared_ptr<runtime::Sandbox> sandbox;
  // The same sandbox for readers on any thread: a command in a running sandbox needs no
  // hop onto the container's strand.
  std::atomic<std::shared_ptr<runtime::Sandbox>> live_sandbox;
  std::shared_ptr<Slot> slot;  // when the sandbox came from the pre-started pool
  std::shared_ptr<NetworkLink> link;  // the sandbox's network
  bool starting = false;
  std::atomic<bool> deleted{false};  // read from other threads (tokens, the fast path)
  std::unique_ptr<asio::steady_timer> started_event;  // cancelled when a start ends
  std::string start_error;

  // File discovery (see discovery.h), guarded by sync_mutex.
  std::mutex sync_mutex;
  std::chrono::steady_clock::time_point synced_at{};
  bool index_dirty = true;  // code may have written files since the last sync
  bool sync_scheduled = false;
  int walks_running = 0;  // a listing meanwhile walks too: a running walk may not have reached its files yet
  // The outputs the last commands were told they changed, by ctime (store::OutputChanges).
  std::unordered_map<std::string, int64_t> reported_outputs;

  // The durable copy in the sessions bucket (storage.backend s3; container_durability.h).
  std::mutex durability_mutex;            // one flush or restore at a time (blocking threads)
  std::atomic<bool> local_ready{false};   // checked against the manifest (and restored)
  std::atomic<uint64_t> changes{0};       // bumped by commands and API deletions
  std::atomic<uint64_t> flushed_changes{0};  // `changes` as of the last good flush
  std::atomic<bool> flush_failed{false};  // retried with backoff; never released meanwhile
  std::atomic<int> flush_failures{0};
  std::atomic<int64_t> last_flush_ms{0}, retry_at_ms{0};  // steady clock
  std::atomic<uint64_t> unflushed_bytes{0};  // what the last flush could not send

  explicit Container(asio::any_io_executor executor) : strand(asio::make_strand(executor)) {}
  // Readable from any thread (the sandbox pointer itself belongs to the strand).
  bool running() const { return sandbox_up.load(); }
  std::atomic<bool> sandbox_up{false};
  std::atomic<int> executing{0};  // commands running now

  // The running sandbox's persistent Python (python_kernel.h), made on its first call;
  // one of an earlier sandbox is replaced. Guarded by python_mutex.
  std::mutex python_mutex;
  std::shared_ptr<PythonKernel> python;
  // The other Python contexts, in order of creation, each with a kernel of its own
  // (made and replaced as the default one is). Guarded by python_mutex.
  struct NamedPython {
    PythonContext context;
    std::shared_ptr<PythonKernel> kernel;
  };
  std::vector<NamedPython> python_contexts;
};

// One cell for the container's persistent Python (ContainerService::run_python).
struct PythonCall {
  std::string code;
  std::chrono::milliseconds timeout{60'000};
  size_t output_limit = 1 << 20;  // per stream
  // Restarts the kernel first (its variables are lost; the sandbox and files stay).
  bool restart = false;
  // The kernel's environment when this call starts it (as for commands).
  std::vector<std::string> extra_env;
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
  asio::awaitable<Result<std::shared_ptr<Container>>> async_open(std::string owner, std::string id, bool create);
  // list() as a store call.
  asio::awaitable<std::vector<store::ContainerRecord>> async_list(std::string owner, size_t limit,
                                                                  std::string after_id);
  std::vector<store::ContainerRecord> list(const std::string& owner, size_t limit, const std::string& after_id);
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
  // The container's Python contexts: the default one first, then the others in order
  // of creation. Made, restarted and removed without starting anything: a context's
  // kernel starts on its first cell (and a restart or removal kills a running one).
  static constexpr size_t kMaxPythonContexts = 16;  // the default one included
  std::vector<PythonContext> python_contexts(Container& container);
  Result<PythonContext> create_python_context(Container& container, std::string cwd);
  Result<void> restart_python_context(Container& container, const std::string& id);
  Result<void> remove_python_context(Container& container, const std::string& id);

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
  // `reason` labels the stop in the metrics (api, idle, deleted, restart, shutdown).
  asio::awaitable<void> stop(std::shared_ptr<Container> container, const char* reason = "api");
  asio::awaitable<void> remove(std::shared_ptr<Container> container);

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
  // Every open container (its volume mounted).
  std::vector<std::shared_ptr<Container>> open_containers() const;

 private:
  using Key = std::pair<std::string, std::string>;  // (owner, id)
  // A container being opened, its lease confirmed, or being closed (unmounted,
  // deleted): requests for it wait here for the outcome, on a strand of its own, with
  // no thread held; nothing else waits for it. Defined in the .cc.
  struct Transition;
  static asio::awaitable<void> await_end(Transition* transition);
  // Removes `transition` from transitions_ and wakes its waiters (from any thread).
  void end_transition(const Key& key, const std::shared_ptr<Transition>& transition);
  // A closing of `key`, once any other transition of it has ended.
  asio::awaitable<std::shared_ptr<Transition>> begin_closing(Key key);
  asio::awaitable<Result<std::shared_ptr<Container>>> run_opening(Key key, bool create, std::shared_ptr<Container> open,
                                                                  std::shared_ptr<Transition> transition);
  // What opening does that waits (blocking: a pool thread): confirms the lease of a
  // container open here (`open`), or finds (or makes) and mounts it. Touches no map.
  Result<std::shared_ptr<Container>> open_blocking(const std::string& owner, const std::string& id, bool create,
                                                   const std::shared_ptr<Container>& open);
  // The container was deleted through another replica (this one found its record or
  // lease gone): its sandbox stops, nothing more is flushed, its mount and local copy go.
  asio::awaitable<void> forget_locally(std::shared_ptr<Container> container);
  // Blocking: the container's skills folder, volume mount and host folder go.
  void discard_local(const Container& container);
  asio::awaitable<Result<std::shared_ptr<runtime::Sandbox>>> ensure_sandbox(std::shared_ptr<Container> container);
  asio::awaitable<void> stop_on_strand(std::shared_ptr<Container> container, const char* reason);
  // Admission for one execution (a slot, fairly shared between the owners that wait)
  // and the running sandbox, started if need be. The ticket is held for the execution.
  asio::awaitable<Result<std::shared_ptr<runtime::Sandbox>>> admit(std::shared_ptr<Container> container,
                                                                   ops::Admission::Ticket& ticket);
  // Under opensandbox.runtime.resourceQuota, reserves room for one more sandbox, stopping
  // the least recently used idle one if need be; 503 (overloaded) when none is idle.
  // Also keeps each owner under quotas.runningSandboxesPerOwner, stopping that owner's
  // least recently used idle sandbox if need be; 429 (rate limited) when none is idle.
  // The caller releases the reservation (release_room) once its sandbox runs.
  asio::awaitable<Result<void>> make_room(std::shared_ptr<Container> for_container);
  void release_room(const std::string& owner);
  // 503 overloaded_error for an unexpected host failure (the detail goes to the log).
  ApiError host_out_of_something(const std::string& what, const std::exception& e) const;
  // 503 (unavailable_volume) when the host cannot make or mount the volume.
  Result<std::shared_ptr<Container>> load(const store::ContainerRecord& record);
  // open_blocking() of a container that has a record: its lease, then its volume.
  Result<std::shared_ptr<Container>> open_existing(const store::ContainerRecord& record);
  Result<void> prepare_storage(Container& container, bool fresh);
  // Removes what a container that could not be made left (volume mount, folders).
  void discard_storage(Container& container);
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
  std::string unavailable_reason_;
  std::shared_ptr<ops::Admission> admission_;
  std::atomic<int> quota_reserved_{0};  // sandboxes being started (counted against the quota)
  std::map<std::string, int> owner_reserved_;  // the same, per owner (under mutex_)
  store::Metadata& metadata_;
  std::string containers_dir_;

  // Guards the maps below (and owner_reserved_); held for map operations only, never
  // across a database, lease, disk or mount call.
  mutable std::mutex mutex_;
  std::map<Key, std::shared_ptr<Container>> open_;
  std::map<Key, std::shared_ptr<Transition>> transitions_;

  std::atomic<bool> shutting_down_{false};
  // touch()'s PostgreSQL writes still queued (shared with them).
  std::shared_ptr<std::atomic<int>> background_touches_ = std::make_shared<std::atomic<int>>(0);
  asio::steady_timer reaper_timer_;
  std::atomic<uint64_t> sandbox_counter_{0};
  // Each with its own lock; declared last so they go first (their threads and
  // coroutines use the settings above).
  SpareVolumes spares_;
  SandboxPool pool_;
};

}  // namespace sandboxd::service
