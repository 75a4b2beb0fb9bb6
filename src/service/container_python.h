// A container's persistent Pythons (container_python.cc): the kernel of each of its
// contexts (the default one, the kernel of code_execution, and those made by request:
// E2B's code-interpreter contexts), the kernels that came back with a sandbox restored
// from a checkpoint, and the cell paused on client tool calls. Part of Container (its
// `python`); ContainerExecution makes and runs the kernels, ContainerMemory lists and
// restores them, tool_calls.cc pauses and resumes cells.
//
// Locking: every member is behind one mutex, taken inside each method (and around the
// callbacks they take) and never held across a kernel's call or a suspension; any
// thread may call any method.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sandboxd::runtime {
class Sandbox;
}

namespace sandboxd::service {

class PythonKernel;  // python_kernel.h

// A Python context of a container: a kernel of its own in the container's sandbox, with
// its own variables (E2B's code-interpreter contexts). Every container has the default
// one, the kernel of code_execution; others are made and removed by request.
inline constexpr std::string_view kDefaultPythonContext = "default";
struct PythonContext {
  std::string id;
  std::string cwd;  // its working directory; empty: the sandbox's (the workspace)
};

class ContainerPython {
 public:
  // A cell paused on client tool calls (programmatic tool calling), as the /messages
  // turn that ran it left it: the server_tool_use id the client's next request names it
  // by, and the tool_use id of each call it waits on -> the kernel's id of that call.
  struct PausedCode {
    std::string server_tool_id;
    std::weak_ptr<PythonKernel> kernel;
    uint64_t cell = 0;
    std::map<std::string, std::string> calls;
    std::chrono::milliseconds timeout{};  // the cell's, for its result's wording
    int64_t started_ns = 0;               // its start (realtime): the outputs it made since
    std::chrono::steady_clock::time_point expires;
  };

  // The contexts: the default one first, then the others in order of creation.
  std::vector<PythonContext> contexts() const;
  bool has_context(const std::string& id) const;
  // A new context (a random id), with no kernel yet; nullopt when the container holds
  // `max_contexts` (the default one included) already.
  std::optional<PythonContext> add_context(std::string cwd, size_t max_contexts);
  // Restarts the context's kernel, if it has one (its variables are lost). False: no
  // such context.
  bool restart_context(const std::string& id);
  // Removes a context other than the default one; its kernel (null when it had none)
  // is the caller's to end. nullopt: no such context.
  std::optional<std::shared_ptr<PythonKernel>> remove_context(const std::string& id);

  // The context's kernel in `sandbox`: the one it has when it belongs to that sandbox,
  // else one made by `make` (given the context's working directory) in place of an
  // earlier sandbox's: a kernel belongs to one sandbox, and after a stop the next call
  // gets a fresh one in the new sandbox. A process that came back with a restored
  // sandbox for this context is handed to that kernel, once. Null: no such context.
  std::shared_ptr<PythonKernel> kernel_for(
      const std::string& context, const runtime::Sandbox& sandbox,
      const std::function<std::shared_ptr<PythonKernel>(const std::string& cwd)>& make);

  // For a checkpoint of `sandbox`: its kernels, by context, and the restored processes
  // no call has taken over yet (listed again by the checkpoint).
  struct Kernels {
    std::vector<std::pair<std::string, std::shared_ptr<PythonKernel>>> of_sandbox;
    std::map<std::string, uint32_t> not_taken_over;
  };
  Kernels kernels_of(const runtime::Sandbox& sandbox) const;
  // The kernels' processes that came back with a restored sandbox, by context: each
  // taken over by its context's next call (PythonKernel::adopt_on_first_call). A new
  // checkpoint (which lists them) clears them.
  void set_restored(std::map<std::string, uint32_t> processes);
  void clear_restored() { set_restored({}); }

  // The default kernel's cell paused on tool calls (one at a time: a later one replaces it).
  void pause(PausedCode paused);
  // The cell paused under `server_tool_id` when it has not expired and `accept` (called
  // under the lock, with it) says yes: taken, so that another request finds it gone.
  std::optional<PausedCode> take_paused(const std::string& server_tool_id,
                                        const std::function<bool(const PausedCode&)>& accept);
  // A taken cell that could not be resumed (refused before it ran on) is paused again,
  // unless another is paused meanwhile.
  void put_back_paused(PausedCode paused);

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<PythonKernel> kernel_;  // the default context's
  std::optional<PausedCode> paused_code_;
  // The other contexts, in order of creation, each with a kernel of its own (made and
  // replaced as the default one is).
  struct NamedPython {
    PythonContext context;
    std::shared_ptr<PythonKernel> kernel;
  };
  std::vector<NamedPython> contexts_;
  std::map<std::string, uint32_t> restored_;
};

}  // namespace sandboxd::service
