// ContainerExecution (container_execution.h): executions in a container, its Python
// contexts, and the /ready probe.
#include "service/container_execution.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "base/blocking.h"
#include "base/ids.h"
#include "ops/logging.h"
#include "ops/metrics.h"

namespace sandboxd::service {
namespace {

namespace fs = std::filesystem;

// One execution (a command, a Python call) under way in a container: counted in
// `executing` while it runs, and with the bucket a change before and after it, so that
// what it writes is flushed after it (cluster/container_durability.h).
class ExecutionMark {
 public:
  ExecutionMark(Container& container, bool durable) : container_(container), durable_(durable) {
    ++container_.executing;
    if (durable_) container_.bucket.note_change();
  }
  ~ExecutionMark() {
    if (durable_) container_.bucket.note_change();
    --container_.executing;
  }
  ExecutionMark(const ExecutionMark&) = delete;
  ExecutionMark& operator=(const ExecutionMark&) = delete;

 private:
  Container& container_;
  const bool durable_;
};

}  // namespace

asio::awaitable<Result<runtime::ExecResult>> ContainerExecution::exec(std::shared_ptr<Container> container,
                                                                      runtime::ExecRequest request,
                                                                      bool restart) {
  lifecycle_.touch(*container);
  if (parts_.durability) {  // the bucket's copy first, when the local one is missing or stale
    if (auto ready = co_await parts_.durability->ensure_local(container); !ready) co_return ready.error();
  }
  if (restart) {
    co_await asio::co_spawn(container->strand, lifecycle_.stop_on_strand(container, "restart"),
                            asio::use_awaitable);
    // restart empties the workspace (a tree walk: the blocking pool); uploads and
    // outputs are kept.
    auto empty_workspace = [&container] { ContainerStorage::empty_workspace(*container); };
    co_await run_blocking(std::move(empty_workspace));
    if (request.command.empty()) co_return runtime::ExecResult{};
  }
  // Under way from here, its wait for the sandbox included: the idle reaper must not stop
  // a sandbox that started (slowly, past the TTL) for a command that has yet to run.
  const ExecutionMark mark(*container, parts_.durability != nullptr);
  ops::Admission::Ticket ticket;
  auto sandbox = co_await admit(container, ticket);
  if (!sandbox) co_return sandbox.error();
  Result<runtime::ExecResult> outcome = runtime::ExecResult{};  // (a placeholder that allocates nothing)
  const auto started = std::chrono::steady_clock::now();
  const char* label = "failed";
  const std::string command_head = request.command.substr(0, 4096);  // for the audit log
  try {
    outcome = co_await (*sandbox)->exec(std::move(request));
    label = outcome->cancelled          ? "cancelled"
            : outcome->timed_out        ? "timeout"
            : outcome->return_code == 0 ? "ok"
                                        : "nonzero";
  } catch (const runtime::SandboxError& e) {
    spdlog::warn("execution in container {} failed: {}", container->id, e.what());
    // Decided on the sandbox's state, not on the message: one that still runs could not
    // start the command (the host or the sandbox is out of processes or memory).
    outcome = (*sandbox)->running()
                  ? ApiError::overloaded(
                        "The command could not be started (the sandbox or the host is out of "
                        "processes or memory); try again later",
                        parts_.settings()->capacity_retry_after_sec)
                  : ApiError::unavailable("The sandbox stopped during the command",
                                          parts_.settings()->capacity_retry_after_sec);
  } catch (const std::exception& e) {
    spdlog::error("execution in container {} failed: {}", container->id, e.what());
    outcome = ApiError::overloaded("The command could not be run; try again later",
                                   parts_.settings()->capacity_retry_after_sec);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ops::metrics().execution_completed(label, seconds);
  const int64_t return_code = outcome ? outcome->return_code : -1;
  const bool truncated = outcome && (outcome->stdout_truncated || outcome->stderr_truncated);
  const bool timed_out = outcome && outcome->timed_out;
  // Both lines go out with their request's (an execution is always part of one), in
  // the same write: not a write of their own each.
  ops::log_event_batched(spdlog::level::info, "execution",
                         {{"owner", container->owner},
                          {"container", container->id},
                          {"ms", seconds * 1000},
                          {"outcome", label},
                          {"return_code", return_code},
                          {"truncated", truncated},
                          {"timed_out", timed_out}});
  if (auto* audit = ops::audit())
    audit->record_batched("execution", {{"owner", container->owner},
                                        {"container", container->id},
                                        {"command", command_head},
                                        {"outcome", label},
                                        {"return_code", return_code}});
  lifecycle_.touch(*container);
  co_return outcome;
}

asio::awaitable<Result<KernelResult>> ContainerExecution::run_python(std::shared_ptr<Container> container,
                                                                     PythonCall call) {
  lifecycle_.touch(*container);
  if (parts_.durability) {  // the bucket's copy first, when the local one is missing or stale
    if (auto ready = co_await parts_.durability->ensure_local(container); !ready) co_return ready.error();
  }
  auto read_driver = [] { return python_kernel_driver(); };
  std::shared_ptr<const std::string> driver;
  try {
    driver = co_await run_blocking(std::move(read_driver));
  } catch (const runtime::SandboxError& e) {
    spdlog::error("{}", e.what());
    co_return ApiError::unavailable("The Python kernel is not installed on this server",
                                    parts_.settings()->capacity_retry_after_sec);
  }
  // The context is looked for before a slot is taken, and again once it is (it may
  // have been removed meanwhile).
  auto missing_context = [&] { return ApiError::not_found("Context " + call.context + " not found"); };
  if (!container->python.has_context(call.context)) co_return missing_context();
  const ExecutionMark mark(*container, parts_.durability != nullptr);  // its wait included, as exec's
  ops::Admission::Ticket ticket;
  auto sandbox = co_await admit(container, ticket);
  if (!sandbox) co_return sandbox.error();
  auto make_kernel = [&](const std::string& cwd) {
    return std::make_shared<PythonKernel>(*sandbox, driver, call.extra_env, cwd);
  };
  const std::shared_ptr<PythonKernel> kernel =
      container->python.kernel_for(call.context, **sandbox, make_kernel);
  if (!kernel) co_return missing_context();
  if (call.restart) {
    kernel->restart();
    if (call.code.empty()) co_return KernelResult{};
  }
  const auto started = std::chrono::steady_clock::now();
  Result<KernelResult> outcome = ApiError::internal();
  const char* label = "failed";
  try {
    KernelCall cell;
    cell.code = std::move(call.code);
    cell.timeout = call.timeout;
    cell.output_limit = call.output_limit;
    cell.env = std::move(call.env);
    cell.on_event = std::move(call.on_event);
    cell.cancellation = std::move(call.cancellation);
    cell.tools = std::move(call.tools);
    outcome = co_await kernel->execute(std::move(cell));
    switch (outcome->status) {
      case KernelResult::Status::kPaused:
        label = "paused";
        break;
      case KernelResult::Status::kOk:
        label = "ok";
        break;
      case KernelResult::Status::kError:
        label = "nonzero";
        break;
      case KernelResult::Status::kTimedOut:
        label = "timeout";
        break;
      case KernelResult::Status::kKernelDied:
        label = "kernel_died";
        break;
    }
  } catch (const runtime::SandboxError& e) {
    spdlog::warn("python in container {} failed: {}", container->id, e.what());
    outcome = ApiError::unavailable(
        sandbox->get()->running() ? std::string(e.what()) : "The sandbox stopped during the code",
        parts_.settings()->capacity_retry_after_sec);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ops::metrics().execution_completed(label, seconds);
  ops::log_event(spdlog::level::info, "python_execution",
                 {{"owner", container->owner},
                  {"container", container->id},
                  {"ms", seconds * 1000},
                  {"outcome", label}});
  lifecycle_.touch(*container);
  co_return outcome;
}

asio::awaitable<Result<std::optional<KernelResult>>> ContainerExecution::resume_python(
    std::shared_ptr<Container> container, std::shared_ptr<PythonKernel> kernel, uint64_t cell,
    std::vector<KernelToolAnswer> answers) {
  lifecycle_.touch(*container);
  // The paused cell runs on as a cell does: it holds an execution slot while it runs
  // (not while it waited).
  ops::Admission::Ticket ticket;
  auto sandbox = co_await admit(container, ticket);
  if (!sandbox) co_return sandbox.error();
  if (kernel->sandbox() != sandbox->get()) co_return std::optional<KernelResult>();  // its sandbox is gone
  const ExecutionMark mark(*container, parts_.durability != nullptr);
  const auto started = std::chrono::steady_clock::now();
  std::optional<KernelResult> outcome;
  try {
    outcome = co_await kernel->resume(cell, std::move(answers));
  } catch (const runtime::SandboxError& e) {
    spdlog::warn("python in container {} failed: {}", container->id, e.what());
    co_return ApiError::unavailable("The sandbox stopped during the code",
                                    parts_.settings()->capacity_retry_after_sec);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ops::log_event(spdlog::level::info, "python_resumed",
                 {{"owner", container->owner},
                  {"container", container->id},
                  {"ms", seconds * 1000},
                  {"outcome", !outcome                                           ? "expired"
                              : outcome->status == KernelResult::Status::kPaused ? "paused"
                                                                                 : "ended"}});
  lifecycle_.touch(*container);
  co_return outcome;
}

std::vector<PythonContext> ContainerExecution::python_contexts(Container& container) {
  return container.python.contexts();
}

Result<PythonContext> ContainerExecution::create_python_context(Container& container, std::string cwd) {
  // Each context can hold a Python process in the sandbox: a bound keeps one client
  // from filling the sandbox's process and memory limits with idle kernels by accident.
  auto context = container.python.add_context(std::move(cwd), kMaxPythonContexts);
  if (!context)
    return ApiError::invalid_request("A container has at most " + std::to_string(kMaxPythonContexts) +
                                     " Python contexts; remove one first");
  return *context;
}

Result<void> ContainerExecution::restart_python_context(Container& container, const std::string& id) {
  if (!container.python.restart_context(id)) return ApiError::not_found("Context " + id + " not found");
  return {};
}

Result<void> ContainerExecution::remove_python_context(Container& container, const std::string& id) {
  if (id == kDefaultPythonContext)
    return ApiError::invalid_request("The default context cannot be removed; restart it instead");
  auto kernel = container.python.remove_context(id);
  if (!kernel) return ApiError::not_found("Context " + id + " not found");
  if (*kernel) (*kernel)->restart();  // its process ends now, not when the last call lets go of it
  return {};
}

asio::awaitable<Result<ContainerExecution::StartedProcess>> ContainerExecution::start_process(
    std::shared_ptr<Container> container, runtime::ProcessRequest request) {
  lifecycle_.touch(*container);
  if (parts_.durability) {  // the bucket's copy first, when the local one is missing or stale
    if (auto ready = co_await parts_.durability->ensure_local(container); !ready) co_return ready.error();
  }
  ops::Admission::Ticket ticket;
  auto sandbox = co_await admit(container, ticket);
  if (!sandbox) co_return sandbox.error();
  std::string command_head;
  for (const auto& arg : request.argv) command_head += (command_head.empty() ? "" : " ") + arg;
  command_head.resize(std::min<size_t>(command_head.size(), 4096));
  Result<StartedProcess> outcome = ApiError::internal();
  try {
    auto channel = co_await (*sandbox)->start_process(std::move(request));
    outcome = StartedProcess{*sandbox, channel};
  } catch (const runtime::SandboxError& e) {
    spdlog::warn("starting a process in container {} failed: {}", container->id, e.what());
    outcome = ApiError::overloaded(
        "The process could not be started (the sandbox or the host is out of "
        "processes or memory); try again later",
        parts_.settings()->capacity_retry_after_sec);
  }
  // With its request's record (within a second while the request streams on).
  if (auto* audit = ops::audit())
    audit->record_batched("process_started", {{"owner", container->owner},
                                              {"container", container->id},
                                              {"command", command_head},
                                              {"outcome", outcome ? "ok" : "failed"}});
  co_return outcome;
}

asio::awaitable<Result<std::shared_ptr<runtime::Sandbox>>> ContainerExecution::admit(
    std::shared_ptr<Container> container, ops::Admission::Ticket& ticket) {
  // A slot (waiting in the owner's line if need be) before a sandbox is started for it:
  // an owner alone may use every slot, and when slots are short they go round the
  // owners that wait (ops/owner_admission.h), so one owner's commands never keep another
  // waiting behind all of theirs.
  std::chrono::duration<double> waited{};
  ticket = co_await parts_.admission->acquire(container->owner, &waited);
  ops::metrics().admission_waited(waited.count());
  if (!ticket) {
    const auto snapshot = parts_.settings();
    const bool at_own_cap =
        snapshot->max_concurrent_executions_per_owner > 0 &&
        parts_.admission->active_of(container->owner) >= snapshot->max_concurrent_executions_per_owner;
    ops::metrics().execution_rejected("429", at_own_cap ? "owner_queue_timeout" : "queue_timeout");
    co_return ApiError::rate_limited(
        (at_own_cap
             ? "Too many commands of this owner are running (capacity.maxConcurrentExecutionsPerOwner: " +
                   std::to_string(snapshot->max_concurrent_executions_per_owner) + " at once)"
             : std::string("Too many commands are running")) +
            "; none finished within " + std::to_string(snapshot->queue_timeout_sec) + "s. Try again later.",
        snapshot->retry_after_sec);
  }
  // A running sandbox is used as is; starting one (or finding it stopped) is the
  // strand's business.
  Result<std::shared_ptr<runtime::Sandbox>> sandbox = container->live_sandbox.load();
  if (!*sandbox || !(*sandbox)->running() || container->deleted)
    sandbox =
        co_await asio::co_spawn(container->strand, lifecycle_.ensure_sandbox(container), asio::use_awaitable);
  if (!sandbox) ops::metrics().execution_completed("failed", 0);
  co_return sandbox;
}

asio::awaitable<std::string> ContainerExecution::probe() {
  if (!parts_.runtime) co_return parts_.why_unavailable();
  // A sandbox over empty folders of its own, with one command, as a container gets.
  const std::string name = parts_.next_sandbox_name("probe-");
  const fs::path root = fs::path(parts_.settings()->data_dir) / "probes" / name;
  const uid_t uid = parts_.settings()->sandbox_host_uid;
  ContainerPaths dirs{(root / "workspace").string(), (root / "uploads").string(), (root / "outputs").string(),
                      ""};
  // The disk's checks and the folders: the blocking pool's work. Empty when ready.
  auto prepare = [this, &dirs, uid]() -> std::string {
    struct statvfs disk {};
    if (statvfs(parts_.settings()->data_dir.c_str(), &disk) == 0 &&
        static_cast<uint64_t>(disk.f_bavail) * disk.f_frsize < (64ull << 20))
      return "the data directory's disk is full (less than 64 MiB free)";
    std::error_code ec;
    for (const auto* dir : {&dirs.workspace, &dirs.uploads, &dirs.outputs}) {
      fs::create_directories(*dir, ec);
      if (ec) return "a sandbox cannot start: creating " + *dir + ": " + ec.message();
      if (chown(dir->c_str(), uid, uid) != 0)
        return "a sandbox cannot start: chown " + *dir + ": " + std::strerror(errno);
    }
    return {};
  };
  std::string problem = co_await run_blocking(std::move(prepare));
  if (problem.empty()) {
    try {
      auto sandbox =
          co_await parts_.runtime->start(parts_.io.get_executor(), parts_.sandbox_options(dirs, name));
      runtime::ExecRequest request;
      request.command = "true";
      request.timeout = std::chrono::seconds(10);
      try {
        auto result = co_await sandbox->exec(std::move(request));
        if (result.return_code != 0)
          problem = "a probe command exited with " + std::to_string(result.return_code);
      } catch (const std::exception& e) {
        problem = std::string("a probe command could not run: ") + e.what();
      }
      co_await sandbox->stop();
    } catch (const std::exception& e) {
      problem = std::string("a sandbox cannot start: ") + e.what();
    }
  }
  auto clean_up = [&root] {
    std::error_code ec;
    fs::remove_all(root, ec);
    if (ec) spdlog::warn("removing the probe's folder {}: {}", root.string(), ec.message());
  };
  co_await run_blocking(std::move(clean_up));
  co_return problem;
}

}  // namespace sandboxd::service
