// Sandboxes as E2B's control plane sees them: a sandboxd container of its owner plus what
// E2B attaches to it (a template name, metadata, environment variables, an end time and
// whether it is paused). The container keeps the files; this registry keeps the rest, in
// one small JSON file per sandbox under <data_dir>/e2b/sandboxes/ (so a restarted
// server still knows its sandboxes), and ends each sandbox at its end time: killed (the
// container deleted) or, when it asked for auto-pause, paused (the container's sandbox
// stopped, its files kept).
//
// Pause is sandboxd's stop: the workspace (/home/user), outputs and uploads are kept;
// processes, memory, /tmp and /home/agent are not. Resume (connect) clears the paused
// mark; the sandbox itself starts again on the next command, over the same files.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "service/container_service.h"

namespace sandboxd::service {

class SandboxProcesses;

struct E2bSandbox {
  std::string id;  // also the container's id
  std::string owner;
  std::string template_id;  // as asked for ("base", "code-interpreter-v1", ...)
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> env_vars;  // every process of the sandbox gets them
  int64_t started_at_ms = 0;
  int64_t end_at_ms = 0;
  bool auto_pause = false;  // at the end time: paused instead of killed
  bool paused = false;
};

struct E2bCreate {
  std::string template_id;
  std::map<std::string, std::string> metadata, env_vars;
  int64_t timeout_sec = 300;
  bool auto_pause = false;
};

// What a listing asks for (every filter optional).
struct E2bListQuery {
  std::map<std::string, std::string> metadata;  // all must match
  std::optional<bool> paused;                   // nullopt: running and paused
  std::string after_id;                         // the page continues after this id
  size_t limit = 100;
};

class E2bSandboxes {
 public:
  // The templates that map to sandboxd's sandbox image (there is one image for now).
  static bool known_template(std::string_view name);
  // The longest timeout a sandbox may ask for: E2B's own cap for its larger plans.
  static constexpr int64_t kMaxTimeoutSec = 24 * 3600;

  E2bSandboxes(asio::io_context& io, ContainerService& containers, std::string data_dir);
  ~E2bSandboxes();

  // Reads the records a previous run left (blocking; before serving) and starts the
  // timer that ends sandboxes at their end time.
  void start();
  // The processes of each sandbox: stopped with it when it is paused or killed.
  void set_processes(SandboxProcesses* processes) { processes_ = processes; }

  // Makes the container and the record. Quotas (containers per owner) apply as for any
  // container; an unknown template is a 404.
  asio::awaitable<Result<E2bSandbox>> create(std::string owner, E2bCreate request);
  // The owner's sandbox; 404 for a missing one or another owner's.
  Result<E2bSandbox> find(const std::string& owner, const std::string& id) const;
  // The container of the owner's sandbox (opened if need be); 404 as find.
  asio::awaitable<Result<std::shared_ptr<Container>>> open(const std::string& owner, const std::string& id);
  std::vector<E2bSandbox> list(const std::string& owner, const E2bListQuery& query, bool& has_more) const;
  // The end time becomes now + timeout.
  asio::awaitable<Result<void>> set_timeout(const std::string& owner, const std::string& id,
                                            int64_t timeout_sec);
  // Stops the sandbox keeping its files; 409 when it is paused already.
  asio::awaitable<Result<void>> pause(const std::string& owner, const std::string& id);
  // Clears the paused mark and sets the end time (when timeout_sec is given). Returns
  // whether it was paused.
  asio::awaitable<Result<bool>> resume(const std::string& owner, const std::string& id,
                                       std::optional<int64_t> timeout_sec);
  // Deletes the container (files included) and the record.
  asio::awaitable<Result<void>> kill(const std::string& owner, const std::string& id);

  ContainerService& containers() { return containers_; }

 private:
  asio::awaitable<void> end_expired();
  asio::awaitable<void> save(E2bSandbox record);
  void forget_record(const std::string& id);
  std::string record_path(const std::string& id) const;

  asio::io_context& io_;
  ContainerService& containers_;
  std::string dir_;
  SandboxProcesses* processes_ = nullptr;
  mutable std::mutex mutex_;
  std::map<std::string, E2bSandbox> sandboxes_;  // by id (ids are unique across owners)
  asio::steady_timer timer_;
  std::atomic<bool> stopping_{false};
};

}  // namespace sandboxd::service
