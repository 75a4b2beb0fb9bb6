// The persistent Python of one running sandbox: IPython's InteractiveShell in a
// long-lived process inside the sandbox (helpers/python_kernel_driver.py), reached over
// its stdin and stdout pipes. Variables, imports and open files live as long as that
// process: until the sandbox stops, the kernel is restarted, or it dies.
//
// One kernel per context of a sandbox (the default one, and those E2B's code interpreter
// creates); a kernel's calls run one at a time, in order. The surfaces (code_execution
// in /messages, the direct tool endpoint, MCP, E2B's runCode) all go through
// ContainerExecution::run_python, which owns the kernels.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/cancellation.h"
#include "runtime/sandbox.h"

namespace sandboxd::service {

namespace asio = boost::asio;

// A client tool the cell called (programmatic tool calling), waiting for its answer.
struct KernelToolCall {
  std::string call;  // the driver's id of this call
  std::string name;
  boost::json::object input;
};
// The answer to one KernelToolCall: the tool_result's text, or its error.
struct KernelToolAnswer {
  std::string call;
  std::string content;
  bool is_error = false;
};

// Client tools a cell may call as async functions (programmatic tool calling). A cell
// that calls them pauses (kPaused) until resume() answers; a pause unanswered for
// `answer_limit` expires: the calls raise in the code, which runs on unobserved.
struct CellTools {
  std::vector<std::string> names;
  std::chrono::milliseconds answer_limit{270'000};
};

// One call's outcome.
struct KernelResult {
  enum class Status {
    kOk,          // the cell ran to its end
    kError,       // it raised: outputs end with an error output
    kTimedOut,    // interrupted at its timeout (KeyboardInterrupt); the state is kept
    kKernelDied,  // the kernel process exited or broke its protocol: the state is lost
    kPaused,      // the cell waits on `tool_calls`: resume(cell, answers) goes on
  };
  Status status = Status::kOk;
  std::string stdout_text;  // print(), and what processes it started wrote to fd 1
  std::string stderr_text;  // stderr, and the traceback as text
  // Jupyter's output types, in order: {"type":"execute_result"|"display_data",
  // "data":{mime: value}} (binary values base64), {"type":"error","ename","evalue",
  // "traceback":[lines]}.
  boost::json::array outputs;
  // kTimedOut: the interrupt did not take and the kernel was restarted (state lost).
  bool restarted = false;
  // kKernelDied: the kernel's exit code (128+N for a signal), -1 when not known.
  int exit_code = -1;
  // kKernelDied because the server ended it for breaking its channel (what it sent: a
  // frame over kMaxFrame, one that is not a JSON object, a flood of stray frames);
  // empty when it exited by itself.
  std::string channel_broken;
  // IPython's number for this cell (1 for a fresh kernel's first); 0 when it never ran.
  int64_t execution_count = 0;
  std::chrono::microseconds duration{};
  // kPaused: the cell (for resume) and the calls it waits on.
  uint64_t cell = 0;
  std::vector<KernelToolCall> tool_calls;
};

// Takes one event of a streamed call as it happens: {"type": "start",
// "execution_count": n}, {"type": "stdout" | "stderr", "text": str}, or an output as in
// KernelResult::outputs. The kernel reads its next frame only once this returns (the
// consumer's pace holds the cell back, memory stays bounded); false: the consumer is
// gone, the cell is interrupted and nothing more is sent to it.
using KernelEventSink = std::function<asio::awaitable<bool>(boost::json::object event)>;

// One cell and how to run it.
struct KernelCall {
  std::string code;
  std::chrono::milliseconds timeout{60'000};
  size_t output_limit = 1 << 20;  // per stream
  // Set in os.environ for this cell only.
  std::vector<std::pair<std::string, std::string>> env;
  // Set: the call is streamed; its KernelResult then has no text and no outputs (they
  // went to the sink), only the status and counts.
  KernelEventSink on_event;
  // Cancelled (the client went away): the cell is interrupted as at its timeout.
  std::shared_ptr<runtime::Cancellation> cancellation;
  // Client tools the code may call (programmatic tool calling): the cell may pause.
  CellTools tools;
};

class PythonKernel : public std::enable_shared_from_this<PythonKernel> {
 public:
  // `driver` is the driver script's text; `extra_env` is added to the process's
  // environment (as for commands); `cwd`, when not empty, is its working directory
  // (a start fails when it cannot be entered). Nothing starts until the first execute.
  PythonKernel(std::shared_ptr<runtime::Sandbox> sandbox, std::shared_ptr<const std::string> driver,
               std::vector<std::string> extra_env, std::string cwd = {});
  ~PythonKernel();
  PythonKernel(const PythonKernel&) = delete;
  PythonKernel& operator=(const PythonKernel&) = delete;

  // Runs `call.code` as one cell, starting the kernel first if it is not running. At
  // its timeout the cell is interrupted (SIGINT: KeyboardInterrupt in the code); if that
  // does not end it within kInterruptGrace the kernel is killed (state lost). stdout
  // and stderr are each capped at `output_limit` bytes. Throws runtime::SandboxError
  // when the sandbox is not running or the kernel cannot start.
  // With `call.tools` the cell may call them (kPaused, see CellTools); while it is
  // paused the kernel's other calls wait, and its timeout does not run.
  asio::awaitable<KernelResult> execute(KernelCall call);
  // Answers the calls a paused cell waits on and runs it on: its end, or kPaused again.
  // nullopt when that cell is not paused (it ended, its pause expired, a restart).
  asio::awaitable<std::optional<KernelResult>> resume(uint64_t cell, std::vector<KernelToolAnswer> answers);
  // Kills the kernel's process tree; the next call starts a fresh one. Any thread.
  void restart();
  // The kernel's process when it is up and between cells (nothing in flight on its
  // channel): the one a checkpoint of its sandbox can bring back (adopt). nullopt while a
  // cell runs or is paused, or with no process.
  asio::awaitable<std::optional<uint32_t>> idle_process();
  // The process of a kernel of an earlier sandbox came back with this one (a restored
  // checkpoint): the first call takes it over (runtime::Sandbox::adopt_process) instead
  // of starting a process, its variables, imports and working directory as they were.
  // Before the first execute.
  void adopt_on_first_call(uint32_t process_id) { adopt_id_ = process_id; }

  const runtime::Sandbox* sandbox() const { return sandbox_.get(); }
  // False once this kernel can never run again (its sandbox stopped).
  bool usable() const { return sandbox_->running(); }

  // How long an interrupted cell may take to stop before the kernel is killed.
  static constexpr std::chrono::milliseconds kInterruptGrace{2000};
  // How long a kernel may take to start (import IPython) before it counts as failed.
  static constexpr std::chrono::milliseconds kStartLimit{60000};
  // The largest frame accepted from the kernel (a cell's outputs, images included). Its
  // bytes are taken as they arrive: a header alone costs nothing.
  static constexpr size_t kMaxFrame = 64u << 20;
  // Frames a cell's stretch may send that are not its own (the code writing to the
  // protocol's descriptor: another call's id, an event of a call that is not streamed,
  // an unknown op, a malformed event), by count and by bytes; past either the kernel
  // is ended for breaking its channel. The driver itself sends none.
  static constexpr size_t kMaxStrayFrames = 64;
  static constexpr size_t kMaxStrayBytes = 1u << 20;
  // A frame larger than this is parsed on a pool thread (tree_pool), not on the I/O thread.
  static constexpr size_t kParseOffThread = 256u << 10;

 private:
  struct Process;
  struct Cell;
  // One frame read: the message; or nothing at the end of the channel (the process
  // exited or closed it), with `broken` saying how the frame broke the protocol when it did.
  struct Frame {
    std::optional<boost::json::object> message;
    size_t bytes = 0;  // its length, header included
    std::string broken;
  };
  asio::awaitable<KernelResult> execute_on_strand(KernelCall call);
  asio::awaitable<std::optional<KernelResult>> resume_on_strand(uint64_t cell,
                                                                std::vector<KernelToolAnswer> answers);
  // Runs a written cell until it ends or pauses (its timeout counted meanwhile).
  asio::awaitable<KernelResult> run_cell(std::shared_ptr<Cell> cell);
  void pause(std::shared_ptr<Cell> cell);
  // A pause that expired: its calls fail in the code, which runs to its end unobserved.
  asio::awaitable<void> finish_abandoned(std::shared_ptr<Cell> cell);
  void release_turn();
  asio::awaitable<void> start_process();
  // Watches a started (or adopted) process's exit.
  void watch_exit(const std::shared_ptr<Process>& process);
  // Reads one frame, its body as it arrives.
  asio::awaitable<Frame> read_frame(Process& process);
  asio::awaitable<bool> write_frame(Process& process, const boost::json::object& message);
  // Ends the process (kills its tree) and waits until it has exited: its exit code.
  asio::awaitable<int> end_process(std::shared_ptr<Process> process);

  std::shared_ptr<runtime::Sandbox> sandbox_;
  std::shared_ptr<const std::string> driver_;
  std::vector<std::string> extra_env_;
  std::string cwd_;
  asio::strand<asio::any_io_executor> strand_;
  std::shared_ptr<Process> process_;  // on the strand
  uint32_t adopt_id_ = 0;             // adopt_on_first_call; then on the strand
  uint64_t next_call_ = 1;
  // Cells waiting for the one running now (calls run one at a time, in order).
  bool busy_ = false;
  asio::steady_timer turn_;
  std::shared_ptr<Cell> paused_;  // the cell waiting on tool answers (it keeps busy_)
};

// What the server keeps of one stream of a cell (stdout or stderr), whatever the kernel
// sent: its first `limit` bytes, then "...[truncated]" past them, as a command's output
// is kept (runtime::kTruncationMarker).
std::string capped_output(std::string_view text, size_t limit);

// The sentence a result ends with when the kernel died or was ended (kKernelDied).
std::string kernel_died_message(const KernelResult& result);

// The driver script shipped beside the binary (python_kernel_driver.py next to
// sandboxd in the build tree, /usr/lib/sandboxd/ in the package), read once. Throws
// runtime::SandboxError when it is missing.
std::shared_ptr<const std::string> python_kernel_driver();

}  // namespace sandboxd::service
