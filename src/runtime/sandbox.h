// One running sandbox, seen from the server: a PID 1 (sandboxd-init) reached over a
// control socket, executions started on request, their output read asynchronously.
// Every member runs on the sandbox's strand; the public coroutines hop onto it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.h"
#include "runtime/cancellation.h"
#include "runtime/cgroup.h"
#include "runtime/protocol.h"

namespace sandboxd::runtime {

namespace asio = boost::asio;

inline constexpr std::string_view kTruncationMarker = "...[truncated]";
inline constexpr const char* kWorkspacePath = "/home/agent/workspace";

enum class OutputStreamId { kStdout, kStderr };

struct ExecRequest {
  std::string command;
  std::chrono::milliseconds timeout{60'000};
  size_t output_limit = 1 << 20;  // per stream
  // Added to the fixed environment (PATH, HOME, USER, LANG, TERM, PWD).
  std::vector<std::string> extra_env;
  // When set and cancelled, the command's process tree is killed (its client left).
  std::shared_ptr<Cancellation> cancellation;
  // When set, sees the output as the command writes it, for surfaces that show a
  // running command's progress: each chunk kept (within output_limit, so an observer
  // is never fed more than the result holds), in order per stream. A short command's
  // output is read once it exits, so it may arrive in one piece just before the result.
  // Called on the sandbox's strand: it must copy what it needs and never block.
  std::function<void(OutputStreamId stream, std::string_view bytes)> on_output;
};

struct ExecResult {
  std::string stdout_text;  // capped; ends with "...[truncated]" past the cap
  std::string stderr_text;
  int return_code = 0;  // 128+N for a signal, 124 on timeout
  bool timed_out = false;
  bool cancelled = false;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  std::chrono::microseconds duration{};
  // CLOCK_REALTIME_COARSE just before the command was spawned: the clock the kernel
  // stamps file times with, so a file the command changed has a ctime at or after it.
  int64_t started_realtime_ns = 0;
};

// A long-lived process the server talks to (the Python kernel's driver): started like a
// command (as the agent, in its own session and execution cgroup, under the seccomp
// filter and the sandbox's limits), but with its stdin kept open for the server.
struct ProcessRequest {
  std::vector<std::string> argv;
  std::vector<std::string> extra_env;  // added to the fixed environment, as for commands
  // Set: the process runs on a pseudo-terminal of the sandbox's own (terminal.h) of this
  // window size, as its stdin, stdout, stderr and controlling terminal.
  std::optional<protocol::TerminalSize> terminal;
};

// A started process's pipe ends, owned by the caller (who closes them).
// For a process on a terminal, stdout_read reads what the process writes to it and
// stdin_write is its input (on the native tier both are its master, on the gvisor tier
// pipes PID 1 relays its master through), stderr_read only reads end of file (a
// terminal has one output), and its window size is set by Sandbox::resize_terminal.
struct ProcessChannel {
  uint32_t id = 0;
  int stdin_write = -1;
  int stdout_read = -1;
  int stderr_read = -1;
  bool terminal = false;
};

// How long a stop waits for PID 1 to exit once it is killed (frozen cgroups are thawed
// meanwhile): past it the sandbox counts as stopped, what is left in its cgroups is
// killed, and the failure is logged. Delete and shutdown never wait for longer.
inline constexpr std::chrono::seconds kPid1ExitLimit{10};

// A sandbox that cannot start, or a command that cannot be started in it.
class SandboxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "Command timed out after 60s." (fractional seconds are kept: "after 0.5s").
std::string timeout_message(std::chrono::milliseconds timeout);

class Sandbox : public std::enable_shared_from_this<Sandbox> {
 public:
  // A strand of the io_context's own executor (the one `executor` belongs to), not of
  // `executor` itself: copied into every handler and coroutine of a command, it fits an
  // any_io_executor without an allocation, where a strand of an any_io_executor (or of
  // a container's strand) is allocated at each copy and hops through both strands.
  using Strand = asio::strand<asio::io_context::executor_type>;

  Sandbox(asio::any_io_executor executor, std::string name, int control_fd, pid_t launcher,
          CgroupBackend* cgroups);
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Runs `bash -c command` as agent in the workspace. Throws SandboxError when the
  // command cannot be started (the sandbox stopped, the spawn failed).
  asio::awaitable<ExecResult> exec(ExecRequest request);
  // Starts a long-lived process (see ProcessRequest). It is not counted in
  // active_executions: a kernel waiting for its next call does not keep the sandbox busy.
  // Throws SandboxError like exec.
  asio::awaitable<ProcessChannel> start_process(ProcessRequest request);
  // Waits until the process exits: its exit code (128+N for a signal), or -1 when the
  // sandbox stopped first. Call it once per process: it forgets the process afterwards.
  asio::awaitable<int> wait_process(uint32_t id);
  // Kills the process's whole tree (its execution cgroup), nothing else. Any thread.
  void kill_process(uint32_t id);
  // Sets the window size of a process's terminal (the kernel signals SIGWINCH to its
  // foreground process group), on either tier: the native tier's server holds the
  // master and sets it here; on the gvisor tier PID 1 holds it and is asked to
  // (protocol::kResizeTerminal, answered by nothing: 0 once asked). Returns 0, -ESRCH
  // when the process has ended or is unknown, -ENOTTY when it runs on pipes, or the
  // failed ioctl's -errno.
  asio::awaitable<int> resize_terminal(uint32_t id, protocol::TerminalSize size);
  // Ends the sandbox's processes that still use a folder taken away from it: a skill
  // that came off, its host bind `host_dir` detached, seen inside at `inside_dir`.
  // Linux has no revoke(2): a detached bind stays readable through a working directory,
  // an open or a mapped file that was inside it. Where the sandbox's processes are host
  // processes, the host walks them (runtime/tree_users.h: by device and inode over at
  // most `max_entries` of the folder's entries). Where they are not
  // (set_processes_invisible_to_host: gVisor's), the host's walk would find runsc's
  // gofer and sentry holding the folder and end the whole sandbox, so PID 1 walks its
  // own processes instead (protocol::kEndFolderUsers). Any thread; the walk runs off
  // the I/O threads.
  void end_folder_users(std::string host_dir, std::string inside_dir, size_t max_entries);
  // Set once by the gvisor launcher, before the sandbox is handed out: its processes
  // are the sentry's, not host processes.
  void set_processes_invisible_to_host() { processes_invisible_to_host_ = true; }
  // A sandbox started over slot folders (SandboxOptions::pre_started) whose container's
  // folders are now bound onto the slots: makes them its own. Where binds on the host
  // reach the sandbox's mounts by propagation (the native tier) there is nothing left to
  // do; where they do not (set_binds_folders_inside: gVisor's), PID 1 binds them inside
  // (protocol::kAttachFolders), before any command sent after this call. Any thread.
  void attach_folders();
  // Set once by the gvisor launcher for a sandbox over slot folders.
  void set_binds_folders_inside() { binds_folders_inside_ = true; }
  // Kills everything in the sandbox and removes its cgroups. Idempotent.
  asio::awaitable<void> stop();

  const std::string& name() const { return name_; }
  // Every command from now on gets kTrustEnv (runtime/trust_bundle.h) where it does not
  // set those names itself: the sandbox has the trust folder. Before the first command.
  void set_trust_env() { trust_env_ = true; }
  // The resolver its /etc/resolv.conf names (SandboxOptions::nameserver; empty: none),
  // set by Runtime::start: whoever serves the sandbox's network serves one there exactly
  // when it is named, whatever a reload of the policy changed since the start.
  void set_nameserver(std::string address) { nameserver_ = std::move(address); }
  const std::string& nameserver() const { return nameserver_; }
  asio::any_io_executor executor() const { return executor_; }
  bool running() const { return state_ == State::kRunning; }
  pid_t pid() const { return pid1_; }  // host pid of PID 1
  std::chrono::steady_clock::time_point started_at() const { return started_at_; }
  uint64_t memory_usage() const;
  // The share of `cpus` CPUs the sandbox used, in percent, over the interval since the
  // previous call (since its start for the first): its cgroup's CPU time over that
  // interval's length. nullopt when the kernel does not account its CPU time.
  std::optional<double> cpu_used_percent(int64_t cpus);

  // The listening sockets PID 1 opened in the sandbox's network namespace (Spec order),
  // handed over once: the caller owns them. Empty before the sandbox is ready.
  std::vector<int> take_listeners();
  // Runs `hook` once the sandbox has stopped (at once if it has): what depends on the
  // sandbox (its relays) ends with it. Any thread.
  void on_stopped(std::function<void()> hook);

  // The gvisor tier's network: PID 1 runs gVisor's own network stack (whose loopback is
  // the sandbox's alone) and relays each connection made there to the server, which
  // makes it to the same address in `netns`, the sandbox's network namespace on the
  // host, where its listeners are (the runtime's and the server's alike). Set once, by
  // the launcher, before the sandbox is handed out.
  void relay_network(UniqueFd netns);
  // Where the server listens in the sandbox's namespace, PID 1 listens too when it relays
  // the network (a no-op otherwise: the sandbox is in that namespace itself). Any thread.
  void listen_inside(const std::string& address, uint16_t port);
  // A connection to ADDRESS:PORT inside the sandbox (a server a process there listens
  // on), made as one from within would be: a socket of the sandbox's namespace, or, when
  // PID 1 relays the network, a connection PID 1 makes inside and relays. Returns the
  // caller's socket (non-blocking; one that may still be connecting: wait until it is
  // writable, then read SO_ERROR) or -errno (ECONNREFUSED: nothing listens there).
  asio::awaitable<int> connect_inside(std::string address, uint16_t port);
  // Every IPv4 address local inside too, when the server has made them so in the
  // sandbox's namespace (runtime::route_every_address_locally). Any thread.
  void every_address_local_inside();

  // Used by Runtime::start: waits for PID 1 to report ready. Throws SandboxError.
  asio::awaitable<void> wait_ready(std::chrono::milliseconds limit);
  // Set by the launcher before wait_ready when the sandbox goes on from a checkpoint:
  // its PID 1 is asked to forget the server it had (protocol::kRestored) and says which
  // long-lived processes it still relays; each waits to be adopted.
  void expect_restore() { restoring_ = true; }
  bool restored() const { return restoring_; }

  // Takes over a process that came back with a restored sandbox: its pipes as
  // start_process gave them (wait_process and kill_process work on it). nullopt when
  // there is none of that id (or it was adopted already).
  asio::awaitable<std::optional<ProcessChannel>> adopt_process(uint32_t id);
  // Lets the processes that came back run on unobserved, except those in `keep` (still
  // to be adopted): nobody will read them, so what they write is dropped (as if their
  // reader had closed its pipe) instead of holding them back. One on a terminal is
  // killed with its tree instead (nobody can type into it again). Any thread.
  void release_unadopted_processes(std::vector<uint32_t> keep);

 private:
  enum class State { kStarting, kRunning, kStopping, kStopped };
  struct Execution;
  struct OutputStream;
  struct Relay;

  asio::awaitable<ExecResult> exec_on_strand(ExecRequest request);
  asio::awaitable<ProcessChannel> start_process_on_strand(ProcessRequest request);
  asio::awaitable<int> wait_process_on_strand(uint32_t id);
  // Sends kSpawn for `argv` (the fixed environment and `extra_env`, in the workspace).
  // Throws SandboxError when the request cannot be sent.
  void send_spawn(uint32_t id, std::vector<std::string> argv, std::vector<std::string> extra_env,
                  int64_t spawn_value);
  // Spawns a process the server talks to and waits for kSpawned: its stdout, stderr and
  // stdin's write end.
  asio::awaitable<std::vector<int>> spawn_process_on_strand(uint32_t id, Execution& exec,
                                                            ProcessRequest request);
  asio::awaitable<void> stop_on_strand();
  asio::awaitable<void> wait_ready_on_strand(std::chrono::milliseconds limit);
  asio::awaitable<void> read_control();
  asio::awaitable<void> watch_pid1();
  void dispatch(protocol::Message& msg);
  // A restored PID 1's kReady listing (protocol::kRestored): its relayed processes become
  // adoptable, and new ids start past every id it still holds.
  void take_restored_commands(const std::string& listing);
  // PID 1 has exited (or is given up on): removes the cgroups (on a pool, not here) and
  // marks the sandbox stopped. Idempotent.
  asio::awaitable<void> finish_stop();
  // Once PID 1 is killed or its control socket closed: while it has not exited, thaws
  // the sandbox's frozen cgroups, and past kPid1ExitLimit gives up on it. Idempotent.
  asio::awaitable<void> bound_pid1_exit();
  void wake_all();
  // A long-lived process whose pipes PID 1 keeps (the gvisor tier: a pipe made inside
  // gVisor cannot be passed out): host pipes for the caller, their bytes relayed as
  // messages (protocol::kStdin, kOutput). Returns the caller's ends [stdout, stderr,
  // stdin], or an empty vector with errno when the pipes cannot be made.
  std::vector<int> start_relay(uint32_t id);
  void relay_output(const std::shared_ptr<Relay>& relay, int stream, std::string_view bytes);
  void flush_output(const std::shared_ptr<Relay>& relay, int stream);
  asio::awaitable<void> relay_stdin(std::shared_ptr<Relay> relay);
  void close_relay(Relay& relay);
  void forget_relay_if_done(uint32_t id);
  // A connection PID 1 accepted (protocol::kConnect): made to `where` in the sandbox's
  // namespace, then relayed as a process's pipes are, the socket standing for them.
  void connect_channel(uint32_t id, const std::string& where);
  asio::awaitable<void> finish_connect(std::shared_ptr<Relay> relay, int fd, int error);
  asio::awaitable<int> connect_inside_on_strand(std::string address, uint16_t port);
  // A channel whose connection broke: closed here and reset in the sandbox.
  void reset_channel(Relay& relay);
  // Sends to PID 1, in order. The control socket is non-blocking (the reactor made it
  // so), and PID 1 may be slow to read (inside gVisor, one message per turn of its loop):
  // what the socket cannot take now waits in outbox_ and goes once it has room, never
  // dropped (a lost kSpawn would fail a command, a lost kKill leave a tree running, a lost
  // kStdin lose bytes, a lost acknowledgement stall a relayed process). Bounded by what
  // the callers bound: executions by the owner's limits, relayed bytes by the window.
  // Returns -EPIPE when the socket is closed, else 0.
  int send(protocol::Type type, uint32_t id, std::string_view payload = {}, int64_t value = 0);
  void flush_outbox();

  asio::any_io_executor executor_;  // as given
  Strand strand_;
  std::string name_;
  bool trust_env_ = false;
  std::string nameserver_;
  bool processes_invisible_to_host_ = false;  // set_processes_invisible_to_host
  bool binds_folders_inside_ = false;         // set_binds_folders_inside
  asio::posix::stream_descriptor control_;
  pid_t launcher_;
  CgroupBackend* cgroups_;
  // Written on the strand; read anywhere (running() is asked from other threads).
  std::atomic<State> state_{State::kStarting};
  std::string setup_error_;
  pid_t pid1_ = -1;
  std::unique_ptr<asio::posix::stream_descriptor> pidfd_;
  asio::steady_timer state_changed_;  // cancelled to wake waiters on state changes
  std::map<uint32_t, std::shared_ptr<Execution>> executions_;
  // By execution id, until every end of the process's pipes is closed (its exit may come
  // before its output's end, which outlives wait_process's look at executions_).
  std::map<uint32_t, std::shared_ptr<Relay>> relays_;
  uint32_t next_id_ = 1;
  size_t active_ = 0;
  std::chrono::steady_clock::time_point started_at_;
  bool finishing_ = false;     // finish_stop() has begun
  bool exit_bounded_ = false;  // bound_pid1_exit() runs
  struct Outgoing {
    protocol::Type type;
    uint32_t id;
    int64_t value;
    std::string payload;
  };
  std::deque<Outgoing> outbox_;      // see send()
  std::shared_ptr<UniqueFd> netns_;  // relay_network
  // Connections PID 1 is making inside for connect_inside, by channel id: its answer
  // (kDialed: 0 or errno), and the timer that wakes the waiter.
  struct Dial {
    explicit Dial(Strand& strand) : wake(strand, std::chrono::steady_clock::time_point::max()) {}
    std::optional<int> result;
    asio::steady_timer wake;
  };
  std::map<uint32_t, std::shared_ptr<Dial>> dials_;
  bool outbox_waiting_ = false;         // waiting for room in the control socket
  std::atomic<bool> restoring_{false};  // expect_restore
  // Restored processes not yet adopted (adopt_process), with their pipes in executions_.
  std::vector<uint32_t> adoptable_;  // on the strand

  // The previous CPU sample (cpu_used_percent), under its own mutex (any thread).
  std::mutex cpu_sample_mutex_;
  std::chrono::steady_clock::time_point cpu_sampled_at_{};
  uint64_t cpu_sampled_usec_ = 0;

  // Guarded by hooks_mutex_ (touched from other threads than the strand's).
  std::mutex hooks_mutex_;
  std::vector<int> listeners_;
  std::vector<std::function<void()>> stop_hooks_;
  bool stopped_for_hooks_ = false;
};

}  // namespace sandboxd::runtime
