// The processes clients start in a container's sandbox and talk to while they run (what
// E2B's envd offers: start one, read its output as it comes, connect to it again later,
// write its stdin, signal it, list the running ones). Each is a long-lived process of
// the sandbox (runtime::Sandbox::start_process): its own session and execution cgroup,
// the agent user, the sandbox's limits; its output goes to whoever reads it now.
//
// A slow reader holds back only its own process: the output waits in the process's
// pipes (and a bounded queue per reader), never in the server without bound.
//
// On a tier that keeps memory (gvisor), a stop that checkpoints the sandbox keeps its
// processes (service::SandboxMemoryListener, implemented by Processes): each stays
// listed under its pid, parked while the sandbox is stopped, and after the restore takes
// its process back (runtime::Sandbox::adopt_process) with its output, stdin, signals
// and end for the readers that connect then (those connected at the checkpoint see the
// sandbox stop, as E2B's clients lose envd at a pause). A start that
// is fresh (no checkpoint, or one that could not be restored) ends them as "the sandbox
// stopped".
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "runtime/protocol.h"
#include "service/container_service.h"

namespace sandboxd::e2b {

// The service's names E2B's service uses.
namespace asio = boost::asio;
using service::Container;
using service::ContainerService;

struct ProcessConfig {
  std::string cmd;
  std::vector<std::string> args;
  std::map<std::string, std::string> envs;  // added to the sandbox's environment
  std::optional<std::string> cwd;           // a sandbox path; the workspace when unset
  // Set: the process runs on a terminal of this window size (runtime/terminal.h): its
  // output is the terminal's (Kind::kPty), its input goes to the terminal.
  std::optional<runtime::protocol::TerminalSize> terminal;
};

// One piece of a process's life as a reader sees it.
struct ProcessOutput {
  enum class Kind { kStdout, kStderr, kPty, kEnd };
  Kind kind = Kind::kStdout;
  std::string data;  // kStdout, kStderr, kPty (what a process on a terminal wrote to it)
  // kEnd: how it ended.
  int exit_code = 0;             // its exit status; -1 when killed or the sandbox stopped
  std::optional<int> killed_by;  // the signal that ended it (a kill, its timeout)
  bool timed_out = false;        // killed at the timeout it was started with
  bool sandbox_stopped = false;  // the sandbox stopped under it
};

class Process;

// A reader of one process's output from the moment it subscribed.
class ProcessReader {
 public:
  explicit ProcessReader(std::shared_ptr<Process> process);
  // The next piece, waiting at most `wait` for it: nullopt when nothing came meanwhile
  // (the caller may send a keep-alive). After kEnd, every call returns kEnd again.
  asio::awaitable<std::optional<ProcessOutput>> next(std::chrono::milliseconds wait);
  Process& process() { return *process_; }

 private:
  friend class Process;
  std::shared_ptr<Process> process_;
  // On the process's strand.
  std::deque<ProcessOutput> queue_;
  size_t queued_bytes_ = 0;
  asio::steady_timer wake_;
};

class Process : public std::enable_shared_from_this<Process> {
 public:
  // What one reader may have waiting before its process's output is held back.
  static constexpr size_t kReaderBuffer = 1u << 20;
  // What may wait for a process to read its stdin (beyond what its pipe holds).
  static constexpr size_t kStdinQueue = 2u << 20;

  Process(uint32_t pid, ProcessConfig config, std::optional<std::string> tag,
          std::shared_ptr<Container> container, service::ContainerExecution::StartedProcess started,
          bool keep_stdin);
  ~Process();

  uint32_t pid() const { return pid_; }
  const ProcessConfig& config() const { return config_; }
  const std::optional<std::string>& tag() const { return tag_; }
  const std::string& sandbox_id() const { return sandbox_id_; }
  bool ended() const { return ended_.load(); }
  bool on_terminal() const { return terminal_; }

  // A reader of everything the process writes from now on (and of its end).
  asio::awaitable<std::shared_ptr<ProcessReader>> subscribe();
  // Takes bytes for its stdin, written in the order of the calls as the process reads
  // them: answered once queued, not once read. At most kStdinQueue bytes wait per
  // process: beyond that a write is refused (429) and nothing of it is taken, so a
  // process that never reads costs the server that much and no more. 400 when its
  // stdin is closed.
  asio::awaitable<Result<void>> write_stdin(std::string bytes);
  // Closes its stdin once what waits for it is written (the process reads its end of
  // file after the last byte taken).
  asio::awaitable<Result<void>> close_stdin();
  // Kills its whole process tree (sandboxd runs each process in its own execution
  // cgroup, and ends it as a whole: every signal asked for is a kill). One parked across
  // a checkpoint is killed as its sandbox comes back.
  void kill(int signal);
  // Sets the window size of its terminal (the kernel signals SIGWINCH to the terminal's
  // foreground process group), on either isolation tier (runtime::Sandbox::resize_terminal).
  // 400 for a process on pipes, 404 once it has ended.
  asio::awaitable<Result<void>> resize_terminal(runtime::protocol::TerminalSize size);

 private:
  friend class Processes;
  friend class ProcessReader;
  // Reads the output until both pipes close, and waits for the exit; `on_end` runs
  // once it has ended (the registry forgets it).
  void run(std::chrono::milliseconds timeout, std::function<void()> on_end);
  asio::awaitable<void> pump(asio::posix::stream_descriptor& pipe, ProcessOutput::Kind kind);
  // Still running kReadAfter after its start: its pipes are read as the output comes.
  void read_later();
  void start_pumps();
  // What its stdout descriptor carries: its stdout, or its terminal's output.
  ProcessOutput::Kind stdout_kind() const {
    return terminal_ ? ProcessOutput::Kind::kPty : ProcessOutput::Kind::kStdout;
  }
  // Reads what waits in an exited process's pipe; true when the pipe is still open (a
  // process it started holds it) or more is coming.
  asio::awaitable<bool> drain(int fd, ProcessOutput::Kind kind);
  asio::awaitable<void> finish(std::function<void()> on_end);
  // Its end for readers (from its exit status, -1: the sandbox stopped), then `on_end`.
  asio::awaitable<void> end_with(int status, std::function<void()> on_end);
  void enforce_timeout(std::chrono::milliseconds timeout);
  // Hands `piece` to every reader; waits while one of them has kReaderBuffer queued.
  asio::awaitable<void> deliver(ProcessOutput piece);
  // Writes the queued stdin bytes as the process takes them (one at a time per process).
  asio::awaitable<void> write_queued_stdin();
  // Across a checkpoint of its sandbox (Processes' SandboxMemoryListener calls). Any
  // thread: each hops to the strand.
  // Its sandbox is being checkpointed: an end for "the sandbox stopped" parks it instead.
  void suspend();
  // Its sandbox came back: it goes on with the adopted process's pipes.
  void resume(std::shared_ptr<Container> container, std::shared_ptr<runtime::Sandbox> sandbox,
              runtime::ProcessChannel channel);
  // Its sandbox will not come back: it ends as "the sandbox stopped".
  void abandon();
  // On the strand: the parked process takes the adopted one's pipes and runs on.
  void take_back();
  // On the strand: a parked process ends for good (its readers get the end).
  asio::awaitable<void> end_parked();
  // Opens the channel's descriptors (the constructor's and take_back's).
  void take_channel(const runtime::ProcessChannel& channel, bool keep_stdin);

  const uint32_t pid_;
  const ProcessConfig config_;
  const std::optional<std::string> tag_;
  const std::string sandbox_id_;
  // Replaced (on the strand) when it comes back from a checkpoint: the container may
  // have been closed and opened anew meanwhile, the sandbox is a new one.
  std::shared_ptr<Container> container_;
  std::shared_ptr<runtime::Sandbox> sandbox_;
  uint32_t execution_id_;
  // A strand of the io_context's own executor (as the container's and the sandbox's):
  // it fits an any_io_executor without an allocation at every copy into a handler, a
  // timer or a coroutine, where a strand of an any_io_executor does not.
  asio::strand<asio::io_context::executor_type> strand_;
  // On the strand.
  std::optional<asio::posix::stream_descriptor> stdin_;
  // The output pipes' read ends. Most processes are short: what they write waits in the
  // pipes until they exit and is read then, the pipes never registered with the reactor
  // (two descriptors added and removed, two wake-ups for their end, as much as the rest
  // of a short process's cost in the server). One that runs on past kReadAfter is read
  // as it writes (pump), from then on.
  int stdout_fd_, stderr_fd_;
  // It runs on a terminal: its stdout is the terminal's output, its stdin the terminal's
  // input, its window size the sandbox's to set (resize_terminal).
  const bool terminal_;
  std::optional<asio::posix::stream_descriptor> stdout_, stderr_;
  asio::steady_timer read_after_;
  bool pumping_ = false;
  bool exited_ = false;
  std::vector<std::weak_ptr<ProcessReader>> readers_;
  std::optional<ProcessOutput> end_;
  int pumps_running_ = 0;
  std::deque<std::string> stdin_queue_;    // taken, not yet written
  size_t stdin_queued_ = 0;                // their bytes
  bool stdin_writing_ = false;             // write_queued_stdin runs
  bool stdin_closing_ = false;             // closed once the queue is written
  std::vector<asio::steady_timer*> room_;  // woken when a reader drains
  asio::steady_timer pumps_done_;          // woken as each pipe closes
  asio::steady_timer deadline_;
  std::atomic<bool> ended_{false};
  std::atomic<int> kill_signal_{0};  // the signal a client asked for (0: none)
  std::atomic<bool> timed_out_{false};
  // Across a checkpoint. suspended_: any thread; the rest on the strand.
  std::atomic<bool> suspended_{false};
  bool parked_ = false;  // its sandbox stopped under it, kept for a restore
  bool abandoned_ = false;
  struct Adopted {
    std::shared_ptr<Container> container;
    std::shared_ptr<runtime::Sandbox> sandbox;
    runtime::ProcessChannel channel;
  };
  std::optional<Adopted> adopted_;  // a restore that came before the park
  // Its readers as the checkpoint began: their streams end with the sandbox.
  std::vector<std::weak_ptr<ProcessReader>> readers_at_checkpoint_;
  std::function<void()> on_end_;  // run()'s, kept for the end after a restore
};

// Every sandbox's processes, by sandbox (owner and container id) and pid. Told of
// checkpoints and restores of their sandboxes (watch_memory): the processes a
// checkpoint keeps stay listed, and come back with the restore.
class Processes : public service::SandboxMemoryListener {
 public:
  // Registers this as the service's memory listener (once, before serving; this
  // outlives the service's last stop).
  void watch_memory(ContainerService& service) {
    service.set_memory_listener(this);
    watched_ = &service;
  }
  Processes() = default;
  Processes(const Processes&) = delete;
  Processes& operator=(const Processes&) = delete;
  ~Processes() override {
    if (watched_) watched_->set_memory_listener(nullptr);
  }
  void checkpointing(const Container& container) override;
  asio::awaitable<void> restored(std::shared_ptr<Container> container,
                                 std::shared_ptr<runtime::Sandbox> sandbox) override;
  void memory_lost(const Container& container) override;

  // Running at once in one sandbox (beyond it, a 429): each holds pipes and a reader.
  // Counted from the moment a start is accepted, before it runs, so that concurrent
  // starts cannot pass it together.
  static constexpr size_t kMaxPerSandbox = 64;

  // Starts `config` in the container's sandbox (starting it if need be). `env` is the
  // sandbox's own environment (config.envs win over it). `timeout` > 0 kills it then.
  // The reader sees all of its output, from the first byte.
  struct Started {
    std::shared_ptr<Process> process;
    std::shared_ptr<ProcessReader> reader;
  };
  asio::awaitable<Result<Started>> start(std::shared_ptr<Container> container, ContainerService& service,
                                         ProcessConfig config, std::optional<std::string> tag,
                                         std::map<std::string, std::string> env, bool keep_stdin,
                                         std::chrono::milliseconds timeout);
  // The running processes of the container, by pid.
  std::vector<std::shared_ptr<Process>> list(const Container& container) const;
  std::shared_ptr<Process> find(const Container& container, uint32_t pid) const;
  std::shared_ptr<Process> find_tag(const Container& container, const std::string& tag) const;

 private:
  using Key = std::pair<std::string, std::string>;  // (owner, container id)
  void forget(const Key& key, uint32_t pid);
  // A place among kMaxPerSandbox taken for a start under way (and its tag), given back
  // when the start fails or its process is counted as running.
  struct Reservation;
  void release_locked(const Key& key, const std::optional<std::string>& tag);

  mutable std::mutex mutex_;
  std::map<Key, std::map<uint32_t, std::shared_ptr<Process>>> running_;
  // Starts accepted and not running yet, per sandbox, and the tags they will have.
  std::map<Key, size_t> starting_;
  std::map<Key, std::multiset<std::string>> starting_tags_;
  std::atomic<uint32_t> next_pid_{1000};
  ContainerService* watched_ = nullptr;
};

}  // namespace sandboxd::e2b
