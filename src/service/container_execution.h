// Executions in a container (container_execution.cc): a command, a long-lived process,
// or a cell in one of its persistent Pythons, and the container's Python contexts.
// Each execution is admitted first (a slot, fairly shared between the owners that
// wait), runs in the container's sandbox (started if need be: ContainerLifecycle), and
// is counted, logged and audited. Also the /ready probe (a throwaway sandbox).
//
// Holds no state of its own: the slots are the service's admission (ContainerParts),
// the kernels and contexts are the container's `python` part, guarded by its mutex.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "ops/admission.h"
#include "runtime/runtime.h"
#include "service/container.h"
#include "service/container_lifecycle.h"
#include "service/container_parts.h"
#include "service/python_kernel.h"

namespace sandboxd::service {

// One cell for the container's persistent Python (ContainerExecution::run_python).
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

class ContainerExecution {
 public:
  ContainerExecution(ContainerParts& parts, ContainerLifecycle& lifecycle)
      : parts_(parts), lifecycle_(lifecycle) {}

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

  // Starts a throwaway sandbox and runs `true` in it: what /ready reports. Empty when
  // that worked, else the reason.
  asio::awaitable<std::string> probe();

 private:
  // Admission for one execution (a slot, fairly shared between the owners that wait)
  // and the running sandbox, started if need be. The ticket is held for the execution.
  asio::awaitable<Result<std::shared_ptr<runtime::Sandbox>>> admit(std::shared_ptr<Container> container,
                                                                   ops::Admission::Ticket& ticket);

  ContainerParts& parts_;
  ContainerLifecycle& lifecycle_;
};

}  // namespace sandboxd::service
