#include "runtime/sandbox.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <deque>
#include <optional>
#include <sstream>

#include "base/blocking.h"
#include "runtime/net.h"
#include "runtime/netns.h"

#include "runtime/syscall_error.h"
#include "runtime/terminal.h"
#include "runtime/tree_users.h"
#include "runtime/trust_bundle.h"

namespace sandboxd::runtime {
namespace {

using boost::system::error_code;
using Clock = std::chrono::steady_clock;
// How long connect_inside waits for PID 1 to make a connection inside.
constexpr std::chrono::seconds kDialLimit{10};

constexpr std::array<const char*, 5> kFixedEnv = {
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/home/agent", "USER=agent",
    "LANG=C.UTF-8", "TERM=dumb"};

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

// Waits on `timer` until it is cancelled (an event) or expires (a deadline).
// Returns true when the deadline passed.
asio::awaitable<bool> wait_event(asio::steady_timer& timer) {
  error_code ec;
  co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

}  // namespace

std::string timeout_message(std::chrono::milliseconds timeout) {
  char seconds[32];
  if (timeout.count() % 1000 == 0)
    std::snprintf(seconds, sizeof seconds, "%lld", static_cast<long long>(timeout.count() / 1000));
  else
    std::snprintf(seconds, sizeof seconds, "%g", static_cast<double>(timeout.count()) / 1000.0);
  return std::string("Command timed out after ") + seconds + "s.";
}

// One pipe of a running command. Keeps the first `limit` bytes and counts the rest as
// truncated. Most commands are short: their whole output waits in the pipe until the
// shell exits and is read then, with the pipe never registered with the reactor (each
// readiness event would wake an I/O thread, a third of a short command's cost in the
// server); PID 1 sends the pipe with the exit. A command still running after
// protocol::kHoldOutputMs has its pipes sent earlier and is read continuously from then
// on, so a writer never waits long on a full pipe. After the shell exits the result is
// taken, and the stream keeps draining (and discarding) what background processes still
// write, until they close it.
struct Sandbox::OutputStream : std::enable_shared_from_this<OutputStream> {
  OutputStream(Strand& strand, int fd, size_t limit) : strand(strand), fd(fd), limit(limit) {}
  ~OutputStream() {
    if (!pipe && fd >= 0) ::close(fd);  // (a registered pipe closes its own)
  }

  void take(const char* bytes, size_t n) {
    if (detached) return;
    size_t room = data.size() < limit ? limit - data.size() : 0;
    size_t kept = std::min(n, room);
    data.append(bytes, kept);
    if (n > room) truncated = true;
    if (observer && kept) observer(std::string_view(bytes, kept));
  }

  // Reads continuously from now on (the first call registers the pipe). Waits for
  // readiness and reads here, never through async_read_some: a read that completed in
  // the reactor but whose handler had not run yet would otherwise be lost when the
  // result is taken at exit.
  void read_more() {
    if (fd < 0) return;  // at its end already
    if (!pipe) pipe.emplace(strand, fd);
    pipe->async_wait(asio::posix::descriptor_base::wait_read, [self = shared_from_this()](error_code ec) {
      if (ec || !self->drain_now()) {
        self->close();
        return;
      }
      self->read_more();
    });
  }
  bool reading() const { return pipe.has_value(); }

  // Reads what is in the pipe now, at most `max_reads` chunks (a writer that never
  // stops must not keep us here). Returns false at end of file.
  bool drain_now(int max_reads = 16) {
    if (fd < 0) return false;
    // One read buffer per thread (its bytes are copied out at once), not 64 KiB per
    // stream to allocate and clear for every command.
    static thread_local std::array<char, 64 * 1024> buffer;
    for (int reads = 0; reads < max_reads; ++reads) {
      ssize_t n = read_now(buffer.data(), buffer.size());
      if (n > 0) {
        take(buffer.data(), static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return n < 0 && errno == EAGAIN;
    }
    return true;
  }

  // The shell has exited: what it wrote is in the pipe. At its end (no background
  // writer holds it) it closes now, else it goes on discarding until they close it.
  void finish() {
    if (!drain_now(64))
      close();
    else if (!pipe)
      read_more();
  }

  // A read that never waits, without setting O_NONBLOCK on the pipe first (a system call
  // per pipe, per command): RWF_NOWAIT, which pipes take since Linux 5.8; an older
  // kernel refuses it, and the pipe is then made non-blocking once.
  ssize_t read_now(char* bytes, size_t size) {
    if (!nonblocking) {
      iovec iov{bytes, size};
      ssize_t n = preadv2(fd, &iov, 1, -1, RWF_NOWAIT);
      if (n >= 0 || errno != EOPNOTSUPP) return n;
      fcntl(fd, F_SETFL, O_NONBLOCK);
      nonblocking = true;
    }
    return ::read(fd, bytes, size);
  }

  std::string result() {
    detached = true;
    std::string out = std::move(data);
    data = std::string();
    if (truncated) out.append(kTruncationMarker);
    return out;
  }

  void close() {
    if (pipe) {
      error_code ignored;
      pipe->close(ignored);
    } else if (fd >= 0) {
      ::close(fd);
    }
    fd = -1;
  }

  Strand& strand;
  int fd;
  std::optional<asio::posix::stream_descriptor> pipe;
  size_t limit;
  std::function<void(std::string_view)> observer;  // ExecRequest::on_output, for this stream
  std::string data;
  bool truncated = false;
  bool detached = false;
  bool nonblocking = false;  // O_NONBLOCK set (a kernel without RWF_NOWAIT for pipes)
};

struct Sandbox::Execution {
  explicit Execution(Strand& strand) : wake(strand) {}
  asio::steady_timer wake;
  bool spawned = false;
  bool failed = false;
  bool exited = false;
  int status = 0;
  std::string error;
  int error_code = 0;  // kSpawnFailed's errno
  std::vector<int> fds;
  // What PID 1 did to make room for the command (kLeftoversEnded): the client is told,
  // on a line of its own before the command's stderr.
  std::string notice;
  // A command whose output PID 1 carries in kOutput messages (the gvisor tier) instead of
  // passing its pipes: the streams it goes into, made at its first bytes, with the
  // command's cap and observer.
  size_t output_limit = 0;
  std::function<void(OutputStreamId, std::string_view)> on_output;
  std::shared_ptr<OutputStream> carried_out, carried_err;
  // A long-lived process (start_process): a kSpawned without descriptors means PID 1
  // keeps its pipes, and a relay stands in for them.
  bool process = false;
  // A process on a terminal; on the native tier, `terminal_master` is a descriptor of its
  // master of the server's own, for its window size (the caller's may close first).
  bool terminal = false;
  int terminal_master = -1;
  ~Execution() {
    if (terminal_master >= 0) ::close(terminal_master);
  }
};

// The server's side of a relayed process: host pipes whose far ends the caller holds as
// it would hold the process's own, and what moves between them and PID 1's messages.
// Both directions are bounded by protocol::kRelayWindow: bytes are acknowledged only
// once a pipe has taken them, so a caller that stops reading (or a process that stops
// reading its stdin) holds the other side back instead of filling the server's memory.
struct Sandbox::Relay {
  Relay(Strand& strand, uint32_t id) : id(id), stdin_room(strand, Clock::time_point::max()) {}

  // A network channel's socket stands for both pipes: its end of writing is a shutdown
  // (the same connection still reads), and until it is connected what arrives waits.
  bool socket = false;
  bool connecting = false;

  struct Output {
    std::optional<asio::posix::stream_descriptor> pipe;  // the write end; the caller reads
    std::string pending;                                 // received, not yet taken by the pipe
    bool ended = false;                                  // PID 1 sent the stream's end
    bool waiting = false;                                // waiting for room in the pipe
  };
  uint32_t id;
  std::array<Output, 2> out;                                 // stdout, stderr
  std::optional<asio::posix::stream_descriptor> stdin_pipe;  // the read end; the caller writes
  size_t stdin_in_flight = 0;                                // sent in kStdin, not yet taken
  asio::steady_timer stdin_room;                             // cancelled by a kStdinTaken
};

namespace {
// Threads that enter a sandbox's network namespace to make a socket there (a socket
// belongs to the namespace it was made in; a thread of the I/O pool never enters one).
asio::thread_pool& namespace_pool() {
  static asio::thread_pool pool(2);
  return pool;
}

// Threads for what a stopping sandbox waits on the kernel for: thawing and removing its
// cgroups. Their own, so that a shutdown stopping every sandbox at once neither holds
// up the blocking pool's file work nor waits behind it.
asio::thread_pool& teardown_pool() {
  static asio::thread_pool pool(4);
  return pool;
}

// Every sandbox's executor belongs to the server's io_context (a strand of it, or it).
asio::io_context& io_context_of(const asio::any_io_executor& executor) {
  using IoExecutor = asio::io_context::executor_type;
  if (auto* io = executor.target<IoExecutor>()) return io->context();
  if (auto* strand = executor.target<asio::strand<IoExecutor>>())
    return strand->get_inner_executor().context();
  throw std::logic_error("a sandbox's executor must be an io_context's or a strand of one");
}
}  // namespace

Sandbox::Sandbox(asio::any_io_executor executor, std::string name, int control_fd, pid_t launcher,
                 CgroupBackend* cgroups)
    : executor_(executor),
      strand_(asio::make_strand(io_context_of(executor_))),
      name_(std::move(name)),
      control_(strand_, control_fd),
      launcher_(launcher),
      cgroups_(cgroups),
      state_changed_(strand_, Clock::time_point::max()),
      started_at_(Clock::now()) {}

Sandbox::~Sandbox() {
  // stop() is the orderly way; a sandbox dropped while running is killed so that it
  // never outlives its owner unnoticed (cgroups are then removed by cleanup_stale).
  if (pidfd_ && pidfd_->is_open() && state_ != State::kStopped)
    syscall(SYS_pidfd_send_signal, pidfd_->native_handle(), SIGKILL, nullptr, 0);
  for (int fd : listeners_) close(fd);
}

int Sandbox::send(protocol::Type type, uint32_t id, std::string_view payload, int64_t value) {
  if (!control_.is_open()) return -EPIPE;
  outbox_.push_back({type, id, value, std::string(payload)});
  flush_outbox();
  return 0;
}

void Sandbox::flush_outbox() {
  while (!outbox_waiting_ && !outbox_.empty()) {
    if (!control_.is_open()) {
      outbox_.clear();
      return;
    }
    const Outgoing& message = outbox_.front();
    const int rc = protocol::send_message(control_.native_handle(), message.type, message.id, message.value,
                                          message.payload, nullptr, 0, /*dont_wait=*/true);
    if (rc == -EAGAIN) {
      outbox_waiting_ = true;
      control_.async_wait(asio::posix::descriptor_base::wait_write,
                          [self = shared_from_this()](error_code ec) {
                            self->outbox_waiting_ = false;
                            if (ec) {
                              self->outbox_.clear();  // the sandbox is stopping
                              return;
                            }
                            self->flush_outbox();
                          });
      return;
    }
    outbox_.pop_front();  // sent (or PID 1 is gone, which the control reader sees)
  }
}

uint64_t Sandbox::memory_usage() const { return cgroups_->memory_usage(name_); }

std::optional<double> Sandbox::cpu_used_percent(int64_t cpus) {
  const auto usage = cgroups_->cpu_usage_usec(name_);
  if (!usage) return std::nullopt;
  const auto now = Clock::now();
  std::lock_guard lock(cpu_sample_mutex_);
  const bool first = cpu_sampled_at_ == std::chrono::steady_clock::time_point{};
  const auto since = first ? started_at_ : cpu_sampled_at_;
  const uint64_t before = first ? 0 : cpu_sampled_usec_;
  const double interval_usec =
      static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(now - since).count());
  cpu_sampled_at_ = now;
  cpu_sampled_usec_ = *usage;
  if (interval_usec <= 0 || cpus <= 0) return 0.0;
  const double used = static_cast<double>(*usage >= before ? *usage - before : 0);
  return std::min(100.0, used * 100.0 / (interval_usec * static_cast<double>(cpus)));
}

void Sandbox::wake_all() {
  state_changed_.cancel();
  for (auto& [id, dial] : dials_) dial->wake.cancel();
  for (auto& [id, exec] : executions_) exec->wake.cancel();
}

asio::awaitable<void> Sandbox::wait_ready(std::chrono::milliseconds limit) {
  co_await asio::co_spawn(strand_, wait_ready_on_strand(limit), asio::use_awaitable);
}

asio::awaitable<void> Sandbox::wait_ready_on_strand(std::chrono::milliseconds limit) {
  asio::co_spawn(strand_, read_control(), asio::detached);
  // A restored PID 1 is past its start: it answers this with its kReady.
  if (restoring_) send(protocol::Type::kRestored, 0);
  auto deadline = Clock::now() + limit;
  while (state_ == State::kStarting && setup_error_.empty()) {
    state_changed_.expires_at(deadline);
    if (co_await wait_event(state_changed_)) {
      setup_error_ = "sandbox did not become ready in time";
      break;
    }
  }
  if (state_ == State::kRunning) co_return;
  // Failed: make sure nothing is left, then report why.
  std::string reason = setup_error_.empty() ? "sandboxd-init exited during set-up" : setup_error_;
  if (pidfd_) syscall(SYS_pidfd_send_signal, pidfd_->native_handle(), SIGKILL, nullptr, 0);
  co_await stop_on_strand();
  throw SandboxError("sandbox " + name_ + " failed to start: " + reason);
}

asio::awaitable<void> Sandbox::read_control() {
  auto self = shared_from_this();
  for (;;) {
    error_code ec;
    co_await control_.async_wait(asio::posix::descriptor_base::wait_read,
                                 asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    for (;;) {
      protocol::Message msg;
      int rc = protocol::receive_message(control_.native_handle(), msg, /*dont_wait=*/true);
      if (rc == -EAGAIN) break;
      if (rc <= 0) {
        // PID 1 is gone or on its way (its descriptors close before it waits for the
        // rest of its namespace): the pidfd watcher finishes the stop, in bounded time.
        control_.close(ec);
        wake_all();
        if (!pidfd_)
          co_await finish_stop();  // PID 1 was never announced
        else
          co_await bound_pid1_exit();
        co_return;
      }
      dispatch(msg);
    }
  }
}

void Sandbox::dispatch(protocol::Message& msg) {
  using protocol::Type;
  switch (msg.header.type) {
    case Type::kInitPid: {
      pid1_ = static_cast<pid_t>(msg.header.value);
      if (!msg.fds.empty()) {
        pidfd_ = std::make_unique<asio::posix::stream_descriptor>(strand_, msg.fds[0]);
        // The gvisor tier's listeners come from its launcher, which opens them in the
        // sandbox's namespace (its PID 1 is inside gVisor and cannot pass host sockets).
        std::lock_guard lock(hooks_mutex_);
        for (size_t i = 1; i < msg.fds.size(); ++i) listeners_.push_back(msg.fds[i]);
        asio::co_spawn(strand_, watch_pid1(), asio::detached);
      }
      // The launcher exits right after sending this; reap it (a few microseconds).
      if (launcher_ > 0) {
        int status;
        retry_eintr([&] { return waitpid(launcher_, &status, 0); });
        launcher_ = -1;
      }
      return;
    }
    case Type::kReady: {
      std::lock_guard lock(hooks_mutex_);
      // The native PID 1's listeners; none from the gvisor tier's (they came with kInitPid).
      if (!msg.fds.empty()) {
        for (int fd : listeners_) close(fd);
        listeners_ = std::move(msg.fds);
      }
      if (restoring_ && state_ == State::kStarting) take_restored_commands(msg.payload);
      if (state_ == State::kStarting) state_ = State::kRunning;
      state_changed_.cancel();
      return;
    }
    case Type::kSetupFailed:
      setup_error_ = msg.payload;
      state_changed_.cancel();
      return;
    default:
      break;
  }
  if (msg.header.type == Type::kDialed) {
    if (auto it = dials_.find(msg.header.id); it != dials_.end()) {
      it->second->result = static_cast<int>(msg.header.value);
      it->second->wake.cancel();
    } else if (msg.header.value == 0) {
      send(Type::kKill, msg.header.id);  // its waiter gave up: not wanted any more
    }
    return;
  }
  if (msg.header.type == Type::kConnect) {
    for (int fd : msg.fds) close(fd);
    connect_channel(msg.header.id, msg.payload);
    return;
  }
  if (msg.header.type == Type::kOutput || msg.header.type == Type::kStdinTaken) {
    if (auto found = relays_.find(msg.header.id); found != relays_.end()) {
      for (int fd : msg.fds) close(fd);
      auto relay = found->second;
      if (msg.header.type == Type::kOutput) {
        relay_output(relay, msg.header.value == protocol::kOutputStderr ? 1 : 0, msg.payload);
      } else if (msg.header.value > 0) {
        const auto taken = static_cast<size_t>(msg.header.value);
        relay->stdin_in_flight = taken >= relay->stdin_in_flight ? 0 : relay->stdin_in_flight - taken;
        relay->stdin_room.cancel();
      }
      return;
    }
  }
  auto it = executions_.find(msg.header.id);
  if (it == executions_.end()) {
    for (int fd : msg.fds) close(fd);
    return;
  }
  Execution& exec = *it->second;
  switch (msg.header.type) {
    case Type::kSpawned:
      if (exec.process && msg.fds.empty()) {
        // PID 1 keeps the process's pipes (they cannot leave gVisor): relayed from here on.
        exec.fds = start_relay(msg.header.id);
        if (exec.fds.empty()) {
          const int e = errno;
          exec.failed = true;
          exec.error = describe_errno("pipe2 (the host's end of a relayed process)", e);
          send(Type::kKill, msg.header.id);
          break;
        }
      } else {
        exec.fds = std::move(msg.fds);
      }
      exec.spawned = true;
      break;
    case Type::kSpawnFailed:
      exec.failed = true;
      exec.error = msg.payload;
      exec.error_code = static_cast<int>(msg.header.value);
      break;
    case Type::kOutput: {
      if (!exec.carried_out) {
        exec.carried_out = std::make_shared<OutputStream>(strand_, -1, exec.output_limit);
        exec.carried_err = std::make_shared<OutputStream>(strand_, -1, exec.output_limit);
        if (exec.on_output) {
          exec.carried_out->observer = [observe = exec.on_output](std::string_view bytes) {
            observe(OutputStreamId::kStdout, bytes);
          };
          exec.carried_err->observer = [observe = exec.on_output](std::string_view bytes) {
            observe(OutputStreamId::kStderr, bytes);
          };
        }
      }
      auto& stream = msg.header.value == protocol::kOutputStderr ? exec.carried_err : exec.carried_out;
      stream->take(msg.payload.data(), msg.payload.size());
      for (int fd : msg.fds) close(fd);
      return;  // (nothing to wake for: the result is taken at the exit)
    }
    case Type::kLeftoversEnded:
      exec.notice = std::move(msg.payload);
      for (int fd : msg.fds) close(fd);
      return;  // (nothing to wake for)
    case Type::kExited:
      exec.exited = true;
      exec.status = static_cast<int>(msg.header.value);
      if (!msg.fds.empty()) {  // a plain command's pipes (see exec_on_strand)
        for (int fd : exec.fds) close(fd);
        exec.fds = std::move(msg.fds);
      }
      break;
    default:
      for (int fd : msg.fds) close(fd);
      break;
  }
  exec.wake.cancel();
}

asio::awaitable<void> Sandbox::watch_pid1() {
  auto self = shared_from_this();
  error_code ec;
  co_await pidfd_->async_wait(asio::posix::descriptor_base::wait_read,
                              asio::redirect_error(asio::use_awaitable, ec));
  // We are PID 1's parent once the launcher has exited (we are a child subreaper).
  for (int attempt = 0; attempt < 1000; ++attempt) {
    siginfo_t info{};
    int rc = waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd_->native_handle()), &info,
                    WEXITED | WNOHANG);
    if (rc == 0 && info.si_pid != 0) break;
    if (rc != 0 && errno != ECHILD && errno != EINTR) break;
    asio::steady_timer pause(strand_, std::chrono::milliseconds(1));
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_await finish_stop();
}

asio::awaitable<void> Sandbox::bound_pid1_exit() {
  auto self = shared_from_this();
  if (exit_bounded_ || finishing_) co_return;
  exit_bounded_ = true;
  // PID 1 freezes a command's cgroup to kill its tree (v1) and thaws it after; killed in
  // between, it leaves the cgroup frozen, and a frozen process never acts on the
  // SIGKILL that the end of the namespace sends it, so PID 1 would wait for it forever.
  // PID 1 freezes nothing once it is killed: thawing now lets the rest go. Tried again
  // while PID 1 has not exited (it may have been inside its write to freezer.state).
  const auto give_up = Clock::now() + kPid1ExitLimit;
  auto pause = std::chrono::milliseconds(5);
  asio::steady_timer timer(strand_);
  while (!finishing_ && state_ != State::kStopped) {
    timer.expires_after(pause);
    error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (finishing_ || state_ == State::kStopped) break;
    auto thaw = [this] { return cgroups_->thaw(name_); };
    if (const size_t thawed = co_await run_on(teardown_pool(), std::move(thaw)); thawed > 0)
      std::fprintf(stderr,
                   "sandboxd: sandbox %s: thawed %zu frozen cgroup(s) so that its processes can end\n",
                   name_.c_str(), thawed);
    if (finishing_ || state_ == State::kStopped) break;
    if (Clock::now() >= give_up) {
      std::fprintf(stderr,
                   "sandboxd: sandbox %s: PID 1 (host pid %d) did not exit within %lld s of being killed; "
                   "what is left in its cgroups is killed and the sandbox counts as stopped\n",
                   name_.c_str(), static_cast<int>(pid1_), static_cast<long long>(kPid1ExitLimit.count()));
      co_await finish_stop();
      break;
    }
    pause = std::min(pause * 2, std::chrono::milliseconds(250));
  }
}

asio::awaitable<void> Sandbox::finish_stop() {
  auto self = shared_from_this();
  if (finishing_ || state_ == State::kStopped) {
    while (state_ != State::kStopped) {  // (another caller is finishing it)
      state_changed_.expires_at(Clock::time_point::max());
      co_await wait_event(state_changed_);
    }
    co_return;
  }
  finishing_ = true;
  state_ = State::kStopping;  // (no command is started from now on)
  error_code ec;
  control_.close(ec);
  // The relayed processes are gone with PID 1: their callers see their pipes' end.
  for (auto& [id, relay] : std::exchange(relays_, {})) close_relay(*relay);
  if (pidfd_) pidfd_->close(ec);
  if (launcher_ > 0) {
    int status;
    retry_eintr([&] { return waitpid(launcher_, &status, 0); });
    launcher_ = -1;
  }
  // PID 1 is gone, so is every process of its namespace; remove the cgroups. That waits
  // for the kernel (a memory cgroup refuses rmdir for a moment after its last task), so
  // it runs on a pool of its own, never on an I/O thread, and many sandboxes stopping
  // at once (a shutdown) remove theirs side by side.
  auto destroy = [this] {
    try {
      cgroups_->destroy(name_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sandboxd: removing cgroups of sandbox %s: %s\n", name_.c_str(), e.what());
    }
  };
  co_await run_on(teardown_pool(), std::move(destroy));
  state_ = State::kStopped;
  wake_all();
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard lock(hooks_mutex_);
    for (int fd : listeners_) close(fd);
    listeners_.clear();
    stopped_for_hooks_ = true;
    hooks.swap(stop_hooks_);
  }
  for (auto& hook : hooks) hook();
}

std::vector<int> Sandbox::take_listeners() {
  std::vector<int> taken;
  std::lock_guard lock(hooks_mutex_);
  taken.swap(listeners_);  // the sandbox keeps none: they are closed by their new owner
  return taken;
}

void Sandbox::on_stopped(std::function<void()> hook) {
  {
    std::lock_guard lock(hooks_mutex_);
    if (!stopped_for_hooks_) {
      stop_hooks_.push_back(std::move(hook));
      return;
    }
  }
  hook();
}

asio::awaitable<void> Sandbox::stop() {
  co_await asio::co_spawn(strand_, stop_on_strand(), asio::use_awaitable);
}

asio::awaitable<void> Sandbox::stop_on_strand() {
  auto self = shared_from_this();
  if (state_ == State::kStopped) co_return;
  if (state_ != State::kStopping) {
    state_ = State::kStopping;
    if (pidfd_ && pidfd_->is_open()) {
      syscall(SYS_pidfd_send_signal, pidfd_->native_handle(), SIGKILL, nullptr, 0);
      asio::co_spawn(strand_, bound_pid1_exit(), asio::detached);
    } else {
      co_await finish_stop();  // never got as far as PID 1
    }
  }
  while (state_ != State::kStopped) {
    state_changed_.expires_at(Clock::time_point::max());
    co_await wait_event(state_changed_);
  }
}

void Sandbox::send_spawn(uint32_t id, std::vector<std::string> argv, std::vector<std::string> extra_env,
                         int64_t spawn_value) {
  protocol::SpawnRequest spawn;
  spawn.argv = std::move(argv);
  spawn.env.assign(kFixedEnv.begin(), kFixedEnv.end());
  spawn.env.push_back(std::string("PWD=") + kWorkspacePath);
  if (trust_env_)
    for (std::string_view trust : kTrustEnv) {
      const std::string_view name = trust.substr(0, trust.find('=') + 1);
      if (std::none_of(extra_env.begin(), extra_env.end(),
                       [&](const auto& e) { return e.starts_with(name); }))
        spawn.env.emplace_back(trust);
    }
  for (auto& extra : extra_env) spawn.env.push_back(std::move(extra));
  spawn.cwd = kWorkspacePath;
  std::string payload = protocol::encode(spawn);
  if (payload.size() + sizeof(protocol::Header) > protocol::kMaxMessage)
    throw SandboxError("command too long (" + std::to_string(payload.size()) + " bytes)");
  if (int rc = send(protocol::Type::kSpawn, id, payload, spawn_value); rc < 0)
    throw SandboxError(describe_errno("sending the command to sandbox " + name_, -rc));
}

asio::awaitable<std::vector<int>> Sandbox::spawn_process_on_strand(uint32_t id, Execution& exec,
                                                                   ProcessRequest request) {
  exec.process = true;
  const bool on_terminal = request.terminal.has_value();
  send_spawn(id, std::move(request.argv), std::move(request.extra_env),
             protocol::spawn_value(/*keep_stdin=*/true, on_terminal ? &*request.terminal : nullptr));
  while (!exec.spawned && !exec.failed && state_ == State::kRunning) {
    exec.wake.expires_at(Clock::time_point::max());
    co_await wait_event(exec.wake);
  }
  if (exec.failed) throw SandboxError("starting the command failed: " + exec.error);
  if (!exec.spawned || exec.fds.size() != 3) {
    for (int fd : exec.fds) close(fd);
    exec.fds.clear();
    throw SandboxError("sandbox " + name_ + " stopped");
  }
  co_return std::exchange(exec.fds, {});
}

std::vector<int> Sandbox::start_relay(uint32_t id) {
  std::array<std::array<int, 2>, 3> pipes{};  // stdout, stderr, stdin
  for (size_t made = 0; made < pipes.size(); ++made) {
    if (pipe2(pipes[made].data(), O_CLOEXEC) != 0) {
      const int e = errno;
      for (size_t i = 0; i < made; ++i) {
        close(pipes[i][0]);
        close(pipes[i][1]);
      }
      errno = e;
      return {};
    }
  }
  // The server's ends never block its strand; the caller's stay as a pipe from PID 1 is.
  fcntl(pipes[0][1], F_SETFL, O_NONBLOCK);
  fcntl(pipes[1][1], F_SETFL, O_NONBLOCK);
  fcntl(pipes[2][0], F_SETFL, O_NONBLOCK);
  auto relay = std::make_shared<Relay>(strand_, id);
  relay->out[0].pipe.emplace(strand_, pipes[0][1]);
  relay->out[1].pipe.emplace(strand_, pipes[1][1]);
  relay->stdin_pipe.emplace(strand_, pipes[2][0]);
  relays_[id] = relay;
  asio::co_spawn(strand_, relay_stdin(relay), asio::detached);
  return {pipes[0][0], pipes[1][0], pipes[2][1]};
}

void Sandbox::relay_output(const std::shared_ptr<Relay>& relay, int stream, std::string_view bytes) {
  auto& out = relay->out[static_cast<size_t>(stream)];
  if (bytes.empty()) {
    out.ended = true;
  } else if (!out.pipe && !relay->connecting) {
    // Its reader is gone: taken and dropped, as a write to a closed pipe would be.
    send(protocol::Type::kOutputTaken, relay->id, {}, static_cast<int64_t>(bytes.size()));
    return;
  } else if (out.pending.size() + bytes.size() > protocol::kRelayWindow) {
    // Past the window PID 1 keeps to: never held (and never acknowledged).
    std::fprintf(stderr, "sandboxd: sandbox %s: process %u sent output past its window; dropped\n",
                 name_.c_str(), relay->id);
    return;
  } else {
    out.pending.append(bytes);
  }
  flush_output(relay, stream);
}

void Sandbox::flush_output(const std::shared_ptr<Relay>& relay, int stream) {
  auto& out = relay->out[static_cast<size_t>(stream)];
  if (out.waiting) return;
  size_t taken = 0;
  while (out.pipe && !out.pending.empty()) {
    const ssize_t n = ::write(out.pipe->native_handle(), out.pending.data(), out.pending.size());
    if (n > 0) {
      out.pending.erase(0, static_cast<size_t>(n));
      taken += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {  // the caller has not read yet: on once it has
      out.waiting = true;
      out.pipe->async_wait(asio::posix::descriptor_base::wait_write,
                           [self = shared_from_this(), relay, stream](error_code) {
                             relay->out[static_cast<size_t>(stream)].waiting = false;
                             self->flush_output(relay, stream);
                           });
      break;
    }
    if (relay->socket) {  // the connection is gone: the sandbox's is reset
      reset_channel(*relay);
      return;
    }
    // EPIPE: the caller closed its end; what is left is dropped, and so is what comes.
    taken += out.pending.size();
    out.pending.clear();
    error_code ignored;
    out.pipe->close(ignored);
    out.pipe.reset();
  }
  if (taken > 0) send(protocol::Type::kOutputTaken, relay->id, {}, static_cast<int64_t>(taken));
  if (out.pipe && out.ended && out.pending.empty() && !out.waiting) {
    error_code ignored;  // its end: the caller reads end of file
    if (relay->socket) ::shutdown(out.pipe->native_handle(), SHUT_WR);
    out.pipe->close(ignored);
    out.pipe.reset();
  }
  forget_relay_if_done(relay->id);
}

asio::awaitable<void> Sandbox::relay_stdin(std::shared_ptr<Relay> relay) {
  auto self = shared_from_this();
  std::string buffer(64 * 1024, '\0');
  auto open = [&] { return relay->stdin_pipe && relay->stdin_pipe->is_open(); };
  while (open()) {
    while (open() && relay->stdin_in_flight >= protocol::kRelayWindow) {
      relay->stdin_room.expires_at(Clock::time_point::max());
      co_await wait_event(relay->stdin_room);
    }
    if (!open()) break;
    error_code ec;
    co_await relay->stdin_pipe->async_wait(asio::posix::descriptor_base::wait_read,
                                           asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !open()) break;
    const size_t room = std::min(buffer.size(), protocol::kRelayWindow - relay->stdin_in_flight);
    const ssize_t n = ::read(relay->stdin_pipe->native_handle(), buffer.data(), room);
    if (n > 0) {
      relay->stdin_in_flight += static_cast<size_t>(n);
      send(protocol::Type::kStdin, relay->id, std::string_view(buffer.data(), static_cast<size_t>(n)), 0);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0 && relay->socket) {
      // The connection was reset (a service that is down, a refused one): so is the
      // sandbox's, at once, as it would be natively.
      reset_channel(*relay);
      break;
    }
    // The caller closed its end (or it broke): the process reads end of file.
    send(protocol::Type::kStdin, relay->id, {}, protocol::kStdinEnd);
    break;
  }
  if (relay->stdin_pipe) {
    error_code ignored;
    relay->stdin_pipe->close(ignored);
    relay->stdin_pipe.reset();
  }
  forget_relay_if_done(relay->id);
}

void Sandbox::close_relay(Relay& relay) {
  error_code ignored;
  for (auto& out : relay.out) {
    if (out.pipe) out.pipe->close(ignored);
    out.pending.clear();
  }
  if (relay.stdin_pipe) relay.stdin_pipe->close(ignored);
  relay.stdin_room.cancel();
}

void Sandbox::relay_network(UniqueFd netns) { netns_ = std::make_shared<UniqueFd>(std::move(netns)); }

void Sandbox::end_folder_users(std::string host_dir, std::string inside_dir, size_t max_entries) {
  if (processes_invisible_to_host_) {
    asio::post(strand_, [self = shared_from_this(), inside_dir = std::move(inside_dir)] {
      if (self->state_ == State::kRunning) self->send(protocol::Type::kEndFolderUsers, 0, inside_dir);
    });
    return;
  }
  const pid_t pid1 = pid1_;
  if (pid1 <= 0) return;
  auto end_holders = [pid1, host_dir = std::move(host_dir), max_entries, name = name_] {
    const int killed = kill_tree_users(pid1, host_dir, max_entries);
    if (killed > 0)
      std::fprintf(stderr, "sandboxd: sandbox %s: %s was taken away: ended %d process(es) still using it\n",
                   name.c_str(), host_dir.c_str(), killed);
  };
  asio::post(blocking_pool(), std::move(end_holders));
}

void Sandbox::attach_folders() {
  if (!binds_folders_inside_) return;  // the host's binds reached it by propagation
  // On the strand, as every command's kSpawn is sent: this message goes first. Dispatched,
  // not posted: a caller already on the strand (a sandbox started on its container's
  // strand) runs its next command's co_spawn inline, which would overtake a post.
  asio::dispatch(strand_, [self = shared_from_this()] {
    if (self->state_ == State::kRunning) self->send(protocol::Type::kAttachFolders, 0, {});
  });
}

void Sandbox::listen_inside(const std::string& address, uint16_t port) {
  asio::post(strand_, [self = shared_from_this(), where = address + ":" + std::to_string(port)] {
    if (self->netns_) self->send(protocol::Type::kListen, 0, where);
  });
}

asio::awaitable<int> Sandbox::connect_inside(std::string address, uint16_t port) {
  co_return co_await asio::co_spawn(strand_, connect_inside_on_strand(std::move(address), port),
                                    asio::use_awaitable);
}

asio::awaitable<int> Sandbox::connect_inside_on_strand(std::string address, uint16_t port) {
  auto self = shared_from_this();
  sockaddr_in destination{};
  destination.sin_family = AF_INET;
  destination.sin_port = htons(port);
  if (port == 0 || inet_pton(AF_INET, address.c_str(), &destination.sin_addr) != 1) co_return -EINVAL;
  // The namespace through descriptors the sandbox holds (its PID 1's pidfd, or the one the
  // launcher opened): never a pid, which a process started later could have taken.
  if (state_ != State::kRunning || !pidfd_) co_return -ESRCH;
  UniqueFd ns(fcntl(netns_ ? netns_->get() : pidfd_->native_handle(), F_DUPFD_CLOEXEC, 0));
  if (ns.get() < 0) co_return -errno;
  if (!netns_) {
    // The sandbox is in that namespace itself: a socket made there connects as one of its
    // own would.
    auto make = [ns = ns.get(), destination]() -> int {
      int fd = -1;
      int result = 0;
      try {
        in_network_namespace(ns, [&] {
          fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
          if (fd < 0) {
            result = -errno;
          } else if (::connect(fd, reinterpret_cast<const sockaddr*>(&destination), sizeof destination) !=
                         0 &&
                     errno != EINPROGRESS) {
            result = -errno;
            ::close(fd);
            fd = -1;
          }
        });
      } catch (const SyscallError& e) {
        return -e.code();
      }
      return fd >= 0 ? fd : result;
    };
    co_return co_await run_on(namespace_pool(), std::move(make));
  }
  // PID 1 relays the network: the caller gets one end of a TCP connection made in the
  // sandbox's namespace on the host (where nothing but the server can reach it), and the
  // other end is relayed to the connection PID 1 makes inside.
  auto make_pair = [ns = ns.get()]() -> std::pair<int, int> {
    int client = -1, accepted = -1;
    try {
      in_network_namespace(ns, [&] {
        UniqueFd listener(open_listener("127.0.0.1", 0));
        sockaddr_in bound{};
        socklen_t size = sizeof bound;
        if (getsockname(listener.get(), reinterpret_cast<sockaddr*>(&bound), &size) != 0) return;
        client = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (client < 0) return;
        if (::connect(client, reinterpret_cast<sockaddr*>(&bound), sizeof bound) != 0 && errno != EINPROGRESS)
          return;
        pollfd ready{listener.get(), POLLIN, 0};
        if (poll(&ready, 1, 1000) == 1)
          accepted = accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      });
    } catch (const SyscallError&) {
    }
    if (accepted < 0 && client >= 0) {
      ::close(client);
      client = -1;
    }
    return {client, accepted};
  };
  auto [client, accepted] = co_await run_on(namespace_pool(), std::move(make_pair));
  if (client < 0) co_return -EIO;
  if (state_ != State::kRunning) {
    ::close(client);
    ::close(accepted);
    co_return -ESRCH;
  }
  uint32_t id = next_id_++ & ~protocol::kChannelIdBit;
  while (id == 0 || executions_.count(id) || relays_.count(id)) id = next_id_++ & ~protocol::kChannelIdBit;
  auto dial = std::make_shared<Dial>(strand_);
  dials_[id] = dial;
  send(protocol::Type::kDial, id, address + ":" + std::to_string(port));
  dial->wake.expires_after(kDialLimit);
  while (!dial->result && state_ == State::kRunning)
    if (co_await wait_event(dial->wake)) break;  // past the limit
  dials_.erase(id);
  const int result = dial->result ? *dial->result : state_ == State::kRunning ? ETIMEDOUT : ESRCH;
  if (result != 0 || state_ != State::kRunning) {
    if (!dial->result) send(protocol::Type::kKill, id);  // PID 1 may still make it: reset then
    ::close(client);
    ::close(accepted);
    co_return -(result != 0 ? result : ESRCH);
  }
  const int writer = fcntl(accepted, F_DUPFD_CLOEXEC, 0);
  if (writer < 0) {
    const int e = errno;
    send(protocol::Type::kKill, id);
    ::close(client);
    ::close(accepted);
    co_return -e;
  }
  auto relay = std::make_shared<Relay>(strand_, id);
  relay->socket = true;
  relay->out[0].pipe.emplace(strand_, writer);
  relay->stdin_pipe.emplace(strand_, accepted);
  relays_[id] = relay;
  asio::co_spawn(strand_, relay_stdin(relay), asio::detached);
  co_return client;
}

void Sandbox::every_address_local_inside() {
  asio::post(strand_, [self = shared_from_this()] {
    if (self->netns_) self->send(protocol::Type::kEveryAddressLocal, 0);
  });
}

void Sandbox::connect_channel(uint32_t id, const std::string& where) {
  if (!(id & protocol::kChannelIdBit) || relays_.count(id)) return;
  sockaddr_in destination{};
  destination.sin_family = AF_INET;
  const size_t colon = where.rfind(':');
  const unsigned long port =
      colon == std::string::npos ? 0 : std::strtoul(where.c_str() + colon + 1, nullptr, 10);
  if (!netns_ || port == 0 || port > 65535 ||
      inet_pton(AF_INET, where.substr(0, colon).c_str(), &destination.sin_addr) != 1) {
    send(protocol::Type::kKill, id);  // PID 1 resets it
    return;
  }
  destination.sin_port = htons(static_cast<uint16_t>(port));
  auto relay = std::make_shared<Relay>(strand_, id);
  relay->socket = true;
  relay->connecting = true;
  relays_[id] = relay;
  // The connection is made where the sandbox's own would be natively: in its namespace,
  // to the address it named, so it reaches exactly the listeners there and nothing else.
  asio::post(namespace_pool(), [self = shared_from_this(), relay, destination, netns = netns_] {
    int fd = -1;
    int error = 0;
    try {
      in_network_namespace(netns->get(), [&] {
        fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
          error = errno;
          return;
        }
        if (::connect(fd, reinterpret_cast<const sockaddr*>(&destination), sizeof destination) != 0 &&
            errno != EINPROGRESS) {
          error = errno;
          ::close(fd);
          fd = -1;
        }
      });
    } catch (const SyscallError& e) {
      error = e.code();
    }
    asio::post(self->strand_, [self, relay, fd, error] {
      asio::co_spawn(self->strand_, self->finish_connect(relay, fd, error), asio::detached);
    });
  });
}

asio::awaitable<void> Sandbox::finish_connect(std::shared_ptr<Relay> relay, int fd, int error) {
  auto self = shared_from_this();
  auto found = relays_.find(relay->id);
  if (found == relays_.end() || found->second != relay) {  // the sandbox stopped meanwhile
    if (fd >= 0) ::close(fd);
    co_return;
  }
  if (fd >= 0) {
    relay->stdin_pipe.emplace(strand_, fd);
    error_code ec;
    co_await relay->stdin_pipe->async_wait(asio::posix::descriptor_base::wait_write,
                                           asio::redirect_error(asio::use_awaitable, ec));
    socklen_t size = sizeof error;
    if (ec || getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = ec ? ECANCELED : errno;
  }
  const int writer = error == 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
  if (error != 0 || writer < 0 || !relays_.count(relay->id)) {
    // Nothing listens there (refused), or it could not be made: PID 1 resets the
    // sandbox's connection, as the kernel would have refused it natively.
    if (writer >= 0) ::close(writer);
    relay->connecting = false;
    reset_channel(*relay);
    co_return;
  }
  relay->out[0].pipe.emplace(strand_, writer);
  relay->connecting = false;
  flush_output(relay, 0);  // what the sandbox sent meanwhile
  asio::co_spawn(strand_, relay_stdin(relay), asio::detached);
}

void Sandbox::reset_channel(Relay& relay) {
  error_code ignored;
  for (auto& out : relay.out) {
    if (out.pipe) out.pipe->close(ignored);
    out.pipe.reset();
    out.pending.clear();
  }
  if (relay.stdin_pipe) relay.stdin_pipe->close(ignored);
  relay.stdin_pipe.reset();
  relay.stdin_room.cancel();
  send(protocol::Type::kKill, relay.id);  // PID 1 resets the sandbox's end
  forget_relay_if_done(relay.id);
}

void Sandbox::forget_relay_if_done(uint32_t id) {
  auto it = relays_.find(id);
  if (it == relays_.end()) return;
  const Relay& relay = *it->second;
  if (relay.connecting || relay.out[0].pipe || relay.out[1].pipe || relay.stdin_pipe) return;
  relays_.erase(it);
}

asio::awaitable<ProcessChannel> Sandbox::start_process(ProcessRequest request) {
  co_return co_await asio::co_spawn(strand_, start_process_on_strand(std::move(request)),
                                    asio::use_awaitable);
}

asio::awaitable<ProcessChannel> Sandbox::start_process_on_strand(ProcessRequest request) {
  auto self = shared_from_this();
  if (state_ != State::kRunning) throw SandboxError("sandbox " + name_ + " is not running");
  const uint32_t id = next_id_++;
  auto exec = std::make_shared<Execution>(strand_);
  executions_[id] = exec;
  std::vector<int> fds;
  const bool terminal = request.terminal.has_value();
  try {
    fds = co_await spawn_process_on_strand(id, *exec, std::move(request));
  } catch (...) {
    executions_.erase(id);
    throw;
  }
  ProcessChannel channel{id, fds[2], fds[0], fds[1], terminal};
  exec->terminal = terminal;
  if (terminal && !relays_.count(id)) {
    // The native tier: the caller holds the master. Once more here, for its window size
    // (resize_terminal): the caller's ends may be closed before.
    exec->terminal_master = fcntl(fds[0], F_DUPFD_CLOEXEC, 3);
    if (exec->terminal_master < 0) {
      const int e = errno;
      for (int fd : fds) close(fd);
      send(protocol::Type::kKill, id);
      executions_.erase(id);
      throw SandboxError(describe_errno("fcntl(terminal master, F_DUPFD_CLOEXEC)", e));
    }
  }
  // The entry stays until wait_process has seen the exit.
  co_return channel;
}

asio::awaitable<int> Sandbox::wait_process(uint32_t id) {
  co_return co_await asio::co_spawn(strand_, wait_process_on_strand(id), asio::use_awaitable);
}

asio::awaitable<int> Sandbox::wait_process_on_strand(uint32_t id) {
  auto self = shared_from_this();
  auto it = executions_.find(id);
  if (it == executions_.end()) co_return -1;
  auto exec = it->second;
  while (!exec->exited && state_ != State::kStopped) {
    exec->wake.expires_at(Clock::time_point::max());
    co_await wait_event(exec->wake);
  }
  executions_.erase(id);
  co_return exec->exited ? exit_code(exec->status) : -1;
}

void Sandbox::take_restored_commands(const std::string& listing) {
  std::istringstream lines(listing);
  std::string line;
  while (std::getline(lines, line)) {
    unsigned long id = 0;
    long pid = 0;
    int relayed = 0;
    if (std::sscanf(line.c_str(), "%lu %ld %d", &id, &pid, &relayed) != 3 || id == 0 ||
        id >= protocol::kChannelIdBit)
      continue;
    const auto command = static_cast<uint32_t>(id);
    // Ids from here on are new to PID 1 (what it still runs keeps its own).
    next_id_ = std::max(next_id_, command + 1);
    if (!relayed) continue;  // a plain command's caller is gone: its exit goes unread
    auto exec = std::make_shared<Execution>(strand_);
    exec->process = true;
    exec->terminal = relayed == 2;  // its master relayed by PID 1, as before the checkpoint
    exec->fds = start_relay(command);
    if (exec->fds.empty()) {
      std::fprintf(stderr, "sandboxd: sandbox %s: %s: process %u restored unrelayed and ended\n",
                   name_.c_str(), describe_errno("pipe2", errno).c_str(), command);
      send(protocol::Type::kKill, command);
      continue;
    }
    exec->spawned = true;
    executions_[command] = exec;
    adoptable_.push_back(command);
  }
}

asio::awaitable<std::optional<ProcessChannel>> Sandbox::adopt_process(uint32_t id) {
  // (Named before co_await: GCC 12 destroys a closure that is a temporary of the
  // co_await expression twice, and this one holds a reference count.)
  auto take = [self = shared_from_this(), id]() -> asio::awaitable<std::optional<ProcessChannel>> {
    auto listed = std::find(self->adoptable_.begin(), self->adoptable_.end(), id);
    if (listed == self->adoptable_.end()) co_return std::nullopt;
    self->adoptable_.erase(listed);
    auto it = self->executions_.find(id);
    if (it == self->executions_.end() || it->second->fds.size() != 3) co_return std::nullopt;
    std::vector<int> fds = std::exchange(it->second->fds, {});
    co_return ProcessChannel{id, fds[2], fds[0], fds[1], it->second->terminal};
  };
  co_return co_await asio::co_spawn(strand_, std::move(take), asio::use_awaitable);
}

void Sandbox::release_unadopted_processes(std::vector<uint32_t> keep) {
  asio::post(strand_, [self = shared_from_this(), keep = std::move(keep)] {
    std::erase_if(self->adoptable_, [&](uint32_t id) {
      if (std::find(keep.begin(), keep.end(), id) != keep.end()) return false;
      if (auto it = self->executions_.find(id); it != self->executions_.end()) {
        // A terminal's session is ended instead: an interactive shell that nobody can
        // ever type into again would only wait (a process on pipes may still finish
        // its work unobserved).
        if (it->second->terminal) self->send(protocol::Type::kKill, id);
        for (int fd : std::exchange(it->second->fds, {})) close(fd);
        self->executions_.erase(it);
      }
      return true;
    });
  });
}

asio::awaitable<int> Sandbox::resize_terminal(uint32_t id, protocol::TerminalSize size) {
  auto resize = [self = shared_from_this(), id, size]() -> asio::awaitable<int> {
    auto it = self->executions_.find(id);
    if (it == self->executions_.end() || it->second->exited || self->state_ != State::kRunning)
      co_return -ESRCH;
    const Execution& exec = *it->second;
    if (!exec.terminal) co_return -ENOTTY;
    if (exec.terminal_master >= 0) co_return set_terminal_size(exec.terminal_master, size);
    co_return self->send(protocol::Type::kResizeTerminal, id, {}, protocol::terminal_size_value(size));
  };
  co_return co_await asio::co_spawn(strand_, std::move(resize), asio::use_awaitable);
}

void Sandbox::kill_process(uint32_t id) {
  asio::post(strand_, [self = shared_from_this(), id] {
    auto it = self->executions_.find(id);
    if (it == self->executions_.end()) return;
    self->send(protocol::Type::kKill, id);
    // One that came back with a restored sandbox and was never adopted: nobody holds its
    // pipes' ends but this.
    if (std::erase(self->adoptable_, id) > 0) {
      for (int fd : std::exchange(it->second->fds, {})) close(fd);
      self->executions_.erase(it);
    }
  });
}

asio::awaitable<ExecResult> Sandbox::exec(ExecRequest request) {
  co_return co_await asio::co_spawn(strand_, exec_on_strand(std::move(request)), asio::use_awaitable);
}

asio::awaitable<ExecResult> Sandbox::exec_on_strand(ExecRequest request) {
  auto self = shared_from_this();
  if (state_ != State::kRunning) throw SandboxError("sandbox " + name_ + " is not running");
  const auto started = Clock::now();
  const uint32_t id = next_id_++;
  auto exec = std::make_shared<Execution>(strand_);
  exec->output_limit = request.output_limit;
  exec->on_output = request.on_output;
  executions_[id] = exec;
  ++active_;
  struct Done {
    Sandbox* sandbox;
    uint32_t id;
    ~Done() {
      sandbox->executions_.erase(id);
      --sandbox->active_;
    }
  } done{this, id};

  timespec realtime{};
  clock_gettime(CLOCK_REALTIME_COARSE, &realtime);
  const int64_t started_realtime_ns =
      static_cast<int64_t>(realtime.tv_sec) * 1'000'000'000 + realtime.tv_nsec;
  std::vector<std::string> argv{std::string("/bin/bash"), std::string("-c"), std::move(request.command)};
  send_spawn(id, std::move(argv), std::move(request.extra_env),
             protocol::spawn_value(/*keep_stdin=*/false, nullptr));
  // The output pipes come with the exit, or in a kSpawned if the command runs on past
  // protocol::kHoldOutputMs: from then on they are read as it writes.
  std::shared_ptr<OutputStream> out, err;
  auto take_pipes = [&] {
    if (out || exec->fds.size() != 2) return;
    out = std::make_shared<OutputStream>(strand_, exec->fds[0], request.output_limit);
    err = std::make_shared<OutputStream>(strand_, exec->fds[1], request.output_limit);
    exec->fds.clear();
    if (request.on_output) {
      out->observer = [observe = request.on_output](std::string_view bytes) {
        observe(OutputStreamId::kStdout, bytes);
      };
      err->observer = [observe = request.on_output](std::string_view bytes) {
        observe(OutputStreamId::kStderr, bytes);
      };
    }
  };

  ExecResult result;
  result.started_realtime_ns = started_realtime_ns;
  const auto deadline = started + request.timeout;
  bool kill_sent = false;
  // A cancelled request wakes the wait below (on this strand); it then kills the tree.
  uint64_t subscription = 0;
  if (request.cancellation) {
    std::weak_ptr<Execution> weak = exec;
    subscription = request.cancellation->subscribe([this, weak, self] {
      asio::post(strand_, [weak] {
        if (auto e = weak.lock()) e->wake.cancel();
      });
    });
  }
  struct Unsubscribe {
    std::shared_ptr<Cancellation> cancellation;
    uint64_t id;
    ~Unsubscribe() {
      if (cancellation && id) cancellation->unsubscribe(id);
    }
  } unsubscribe{request.cancellation, subscription};
  while (!exec->exited && !exec->failed && state_ != State::kStopped) {
    exec->wake.expires_at(kill_sent ? Clock::time_point::max() : deadline);
    bool expired = co_await wait_event(exec->wake);
    if (!out && exec->spawned) {  // still running past PID 1's hold: read it as it writes
      take_pipes();
      if (out) {
        out->read_more();
        err->read_more();
      }
    }
    if (!kill_sent && !exec->exited && request.cancellation && request.cancellation->cancelled()) {
      result.cancelled = true;
      kill_sent = true;
      send(protocol::Type::kKill, id);
      continue;
    }
    if (expired && !kill_sent && !exec->exited) {
      // Kill the whole tree of this call (its cgroup), nothing else.
      result.timed_out = true;
      kill_sent = true;
      send(protocol::Type::kKill, id);
    }
  }
  // Everything the shell wrote before it exited is in the pipes now (one pipe holds at
  // most 1 MiB, and whatever a background writer adds meanwhile is not owed).
  take_pipes();
  if (!out && exec->carried_out) {  // its output came in messages
    out = exec->carried_out;
    err = exec->carried_err;
  }
  for (int fd : std::exchange(exec->fds, {})) close(fd);  // (a malformed message's)
  if (exec->failed) throw SandboxError("starting the command failed: " + exec->error);
  if (out) {
    out->finish();
    err->finish();
    result.stdout_text = out->result();
    result.stderr_text = err->result();
    result.stdout_truncated = out->truncated;
    result.stderr_truncated = err->truncated;
  }
  if (!exec->notice.empty()) result.stderr_text = exec->notice + "\n" + result.stderr_text;
  if (result.timed_out) {
    result.return_code = 124;
    result.stderr_text = timeout_message(request.timeout);
  } else if (exec->exited) {
    result.return_code = exit_code(exec->status);
  } else {
    throw SandboxError("sandbox " + name_ + " stopped while the command ran");
  }
  result.duration = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started);
  co_return result;
}

}  // namespace sandboxd::runtime
