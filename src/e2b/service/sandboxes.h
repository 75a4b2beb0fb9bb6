// Sandboxes as E2B's control plane sees them: a sandboxd container of its owner plus what
// E2B attaches to it (a template name, metadata, environment variables, an end time and
// whether it is paused). The container keeps the files; the record the rest, in the
// metadata database (store/e2b_records.h), so that every replica of a cluster knows
// every sandbox and a restarted server (or a replica that took a dead one's containers
// over) still knows its sandboxes. Each sandbox ends at its end time: killed (the
// container deleted) or, when it asked for auto-pause, paused (the container's sandbox
// stopped, its files kept). In a cluster the replica that serves the container ends it;
// one nobody serves is ended by whichever replica takes its lease first.
//
// Pause is sandboxd's stop: the workspace (/home/user), outputs and uploads are kept
// (in a cluster, flushed to the sessions bucket); on the gvisor tier its memory too
// (processes, /tmp, the Python kernels: service/container_memory.h) unless the pause
// asks for files only. Resume (connect) clears the paused mark; the sandbox itself starts
// again on the next command, over the same files, on whichever replica serves that command.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "ops/sandbox_egress.h"
#include "service/container_service.h"
#include "store/e2b_records.h"

namespace sandboxd::e2b {

// The service's names E2B's service uses.
namespace asio = boost::asio;
using service::Container;
using service::ContainerService;

using Sandbox = store::E2bRecord;
using SandboxPage = store::E2bRecordPage;

struct NewSandbox {
  std::string template_id;
  std::map<std::string, std::string> metadata, env_vars;
  int64_t timeout_sec = 300;
  bool auto_pause = false;
  bool auto_pause_memory = true;  // that pause keeps memory (where the tier does), else files only
  // Its network options, checked against the operator's policy already (null: none).
  std::shared_ptr<const ops::SandboxEgress> egress;
  // Gives the new container its first state before its sandbox starts (a snapshot's:
  // e2b/service/snapshots.h); set, the template is the caller's to have checked.
  std::function<asio::awaitable<Result<void>>(std::shared_ptr<Container>)> seed;
};

// What a listing asks for (every filter optional).
struct SandboxQuery {
  std::map<std::string, std::string> metadata;                    // all must match
  std::optional<bool> paused;                                     // nullopt: running and paused
  std::optional<std::string> template_id;                         // only this template's sandboxes
  int64_t started_from_ms = std::numeric_limits<int64_t>::min();  // started at or after
  int64_t started_to_ms = std::numeric_limits<int64_t>::max();    // started at or before
  bool newest_first = true;                                       // E2B's default order (by start time)
  // The page continues after this sandbox (the last of the page before).
  int64_t after_started_ms = 0;
  std::string after_id;
  size_t limit = 100;
};

class Sandboxes {
 public:
  // The templates that map to sandboxd's sandbox image (there is one image for now).
  static bool known_template(std::string_view name);
  // The longest timeout a sandbox may ask for: E2B's own cap for its larger plans.
  static constexpr int64_t kMaxTimeoutSec = 24 * 3600;

  Sandboxes(asio::io_context& io, ContainerService& containers, store::E2bRecords& records,
            std::string data_dir);
  ~Sandboxes();

  // Cluster mode: whether this replica may end the container of this storage at its end
  // time: not when another replica serves it now (that one ends it); when a replica whose
  // heartbeat ran out held it, once the takeover's pace allows (ending it takes it over,
  // as a request for it would). Set once, before start().
  using MayEndHere = std::function<asio::awaitable<bool>(std::string storage)>;
  void set_may_end_here(MayEndHere may_end_here) { may_end_here_ = std::move(may_end_here); }

  // Where a sandbox's record may be answered from memory (store/e2b_records.h), so that
  // a call to a sandbox makes no database call. On a single host (no scope) every
  // record: the server is its database's only writer. In cluster mode the scope gives,
  // for a container's storage, the epoch of its lease while this replica holds it
  // confirmed (nullopt otherwise): then only the calls to a sandbox whose container is
  // held here are answered from memory, and only for what its holder alone writes (the
  // owner, environment variables, the paused mark), since set timeout may land on any
  // replica; get, list and the end-time pass read the database. Set once, before start().
  using CacheScope = std::function<std::optional<int64_t>(const std::string& storage)>;
  void set_cache_scope(CacheScope scope) { cache_scope_ = std::move(scope); }

  // Moves the records an older version kept as JSON files under <data_dir>/e2b/sandboxes/
  // into the database (blocking; before serving), then starts the timer that ends
  // sandboxes at their end time.
  void start();
  // Ends the timer's loop and waits until a pass under way is over (shutdown: before the
  // containers stop, so that no pass works on them, or on the database, afterwards).
  asio::awaitable<void> stop();

  // Makes the container and the record. Quotas (containers per owner) apply as for any
  // container; an unknown template is a 404.
  asio::awaitable<Result<Sandbox>> create(std::string owner, NewSandbox request);
  // The owner's sandbox; 404 for a missing one or another owner's.
  asio::awaitable<Result<Sandbox>> find(const std::string& owner, const std::string& id);
  // The same for a call to the sandbox (envd's, the code interpreter's): from memory
  // where the scope allows (see set_cache_scope; in cluster mode its end time may be
  // older than the database's).
  asio::awaitable<Result<Sandbox>> find_addressed(const std::string& owner, const std::string& id);
  // The container of the owner's sandbox (opened if need be, its files made current from
  // the sessions bucket when this replica just took it); 404 as find.
  asio::awaitable<Result<std::shared_ptr<Container>>> open(const std::string& owner, const std::string& id);
  // The same for a sandbox found a moment ago (no second read of its record).
  asio::awaitable<Result<std::shared_ptr<Container>>> open(const Sandbox& found);
  asio::awaitable<SandboxPage> list(const std::string& owner, const SandboxQuery& query);
  // The end time becomes now + timeout.
  asio::awaitable<Result<void>> set_timeout(const std::string& owner, const std::string& id,
                                            int64_t timeout_sec);
  // Stops the sandbox keeping its files, and its memory with `keep_memory` where the
  // runtime keeps memory (runtime.keepMemory); 409 when it is paused already.
  asio::awaitable<Result<void>> pause(const std::string& owner, const std::string& id,
                                      bool keep_memory = true);
  // Clears the paused mark and sets the end time (when timeout_sec is given). Returns
  // whether it was paused.
  asio::awaitable<Result<bool>> resume(const std::string& owner, const std::string& id,
                                       std::optional<int64_t> timeout_sec);
  // Deletes the container (files included) and the record.
  asio::awaitable<Result<void>> kill(const std::string& owner, const std::string& id);
  // Replaces the sandbox's network options (checked against the operator's policy
  // already; null clears them): its next lookups and connections follow them.
  asio::awaitable<Result<void>> update_network(const std::string& owner, const std::string& id,
                                               std::shared_ptr<const ops::SandboxEgress> egress);
  // The network options of the owner's sandbox whose container is open here (null: none).
  std::shared_ptr<const ops::SandboxEgress> network(const std::string& owner, const std::string& id) const;
  // The same for any of the owner's sandboxes: from its container's row when it is not
  // open here (after a restart, or on another replica).
  asio::awaitable<std::shared_ptr<const ops::SandboxEgress>> stored_network(const std::string& owner,
                                                                            const std::string& id);

  ContainerService& containers() { return containers_; }

 private:
  // The container of a sandbox, without a restore from the bucket (pause, kill).
  asio::awaitable<Result<std::shared_ptr<Container>>> open_container(const std::string& owner,
                                                                     const std::string& id);
  // From memory under `hold` when it is held there, else from the database (held
  // from then on).
  asio::awaitable<Result<Sandbox>> find_held(const std::string& owner, const std::string& id,
                                             const std::optional<store::E2bHold>& hold);
  // Stores the sandbox's network options with its container, then puts them in force
  // (the next lookup and connection see them). False when its container went meanwhile.
  asio::awaitable<bool> keep_network(const std::shared_ptr<Container>& container,
                                     std::shared_ptr<const ops::SandboxEgress> egress);
  asio::awaitable<void> end_expired();
  // One pass over the sandboxes past their end time (a bounded batch, continued at the
  // next pass where this one stopped, so that sandboxes left to other replicas never
  // hide the rest).
  asio::awaitable<void> end_due_batch();
  asio::awaitable<void> end_one(const Sandbox& sandbox);
  void import_json_records();
  template <typename Fn>
  auto store(Fn fn);

  asio::io_context& io_;
  ContainerService& containers_;
  store::E2bRecords& records_;
  std::string json_dir_;
  MayEndHere may_end_here_;
  CacheScope cache_scope_;
  store::E2bDueCursor due_cursor_;  // used by end_expired() only
  asio::steady_timer timer_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> loop_running_{false};
};

}  // namespace sandboxd::e2b
