#include "e2b/service/processes.h"

#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>

#include "ops/logging.h"

namespace sandboxd::e2b {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
// How long a process's output may wait in its pipes before they are read as it comes:
// a process that writes more than a pipe holds in that time waits at most this long,
// and a reader sees the first output this late at most.
constexpr auto kReadAfter = std::chrono::milliseconds(20);

// Waits on a timer used as an event: woken by cancel(), or at its expiry.
asio::awaitable<void> wait_on(asio::steady_timer& timer, std::chrono::steady_clock::duration limit) {
  timer.expires_after(limit);
  boost::system::error_code ec;
  co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

// Waits for `event` (a list of waiters woken together by wake()), at most `limit`. Each
// waiter has its own timer: setting a shared timer's expiry would cancel the others'
// waits, and two waiters would wake each other without end.
asio::awaitable<void> wait_for(std::vector<asio::steady_timer*>& event,
                               std::chrono::steady_clock::duration limit) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  event.push_back(&timer);
  co_await wait_on(timer, limit);
  std::erase(event, &timer);
}

void wake(std::vector<asio::steady_timer*>& event) {
  for (auto* timer : event) timer->cancel();
}

size_t size_of(const ProcessOutput& piece) { return piece.data.size(); }

// One read of what waits in `fd`, without waiting for more: read(2)'s answer (0 at the
// pipe's end, -1 with errno), the bytes in `out`. The buffer is the thread's, never
// zeroed (a read fills what it returns): at a short process's end both pipes are read
// and are usually empty, and a fresh zeroed 64 KiB buffer for each was the largest part
// of the server's work for such a process.
ssize_t read_waiting(int fd, std::string& out) {
  thread_local const std::unique_ptr<char[]> buffer(new char[kReadChunk]);
  ssize_t n;
  do n = ::read(fd, buffer.get(), kReadChunk);
  while (n < 0 && errno == EINTR);
  if (n > 0) out.assign(buffer.get(), static_cast<size_t>(n));
  return n;
}

bool valid_env_name(const std::string& name) {
  return !name.empty() && name.find('=') == std::string::npos && name.find('\0') == std::string::npos;
}

// `text` as one word for a POSIX shell: in single quotes, each ' as '\''.
std::string single_quoted(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'')
      out += "'\\''";
    else
      out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

}  // namespace

ProcessReader::ProcessReader(std::shared_ptr<Process> process)
    : process_(std::move(process)), wake_(process_->strand_) {}

asio::awaitable<std::optional<ProcessOutput>> ProcessReader::next(std::chrono::milliseconds wait) {
  auto step = [this, wait]() -> asio::awaitable<std::optional<ProcessOutput>> {
    if (queue_.empty()) co_await wait_on(wake_, wait);
    if (queue_.empty()) co_return std::nullopt;
    ProcessOutput piece = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= size_of(piece);
    if (piece.kind == ProcessOutput::Kind::kEnd) queue_.push_front(piece);  // stays the last word
    wake(process_->room_);
    co_return piece;
  };
  co_return co_await asio::co_spawn(process_->strand_, step(), asio::use_awaitable);
}

Process::Process(uint32_t pid, ProcessConfig config, std::optional<std::string> tag,
                 std::shared_ptr<Container> container, service::ContainerExecution::StartedProcess started,
                 bool keep_stdin)
    : pid_(pid),
      config_(std::move(config)),
      tag_(std::move(tag)),
      sandbox_id_(container->id),
      container_(std::move(container)),
      sandbox_(std::move(started.sandbox)),
      execution_id_(started.channel.id),
      strand_(asio::make_strand(container_->strand.get_inner_executor().context())),
      stdout_fd_(-1),
      stderr_fd_(-1),
      terminal_(started.channel.terminal),
      read_after_(strand_),
      pumps_done_(strand_),
      deadline_(strand_) {
  take_channel(started.channel, keep_stdin || terminal_);  // (a terminal's input is always the client's)
  ++container_->executing;  // the idle reaper leaves a sandbox alone while it runs
}

void Process::take_channel(const runtime::ProcessChannel& channel, bool keep_stdin) {
  stdout_fd_ = channel.stdout_read;
  stderr_fd_ = channel.stderr_read;
  // Read without waiting, at the exit (a pipe as sandboxd-init made it has no status
  // flag set to keep).
  fcntl(stdout_fd_, F_SETFL, O_NONBLOCK);
  fcntl(stderr_fd_, F_SETFL, O_NONBLOCK);
  if (keep_stdin)
    stdin_.emplace(strand_, channel.stdin_write);
  else
    ::close(channel.stdin_write);  // the process reads end of file at once
}

Process::~Process() {
  // (A pipe read as it comes is closed by its stream descriptor.)
  if (!stdout_ && stdout_fd_ >= 0) ::close(stdout_fd_);
  if (!stderr_ && stderr_fd_ >= 0) ::close(stderr_fd_);
  if (!parked_) --container_->executing;  // (a parked one gave its count back)
}

void Process::run(std::chrono::milliseconds timeout, std::function<void()> on_end) {
  auto self = shared_from_this();
  on_end_ = on_end;  // (before anything runs on the strand)
  asio::co_spawn(
      strand_, [self, on_end = std::move(on_end)]() { return self->finish(on_end); }, asio::detached);
  // The two timers' handlers run on the strand (the timers' executor); plain handlers,
  // not coroutines of their own: no frame and no spawn for each process.
  asio::dispatch(strand_, [self, timeout] {
    self->read_later();
    if (timeout.count() > 0) self->enforce_timeout(timeout);
  });
}

void Process::read_later() {
  if (exited_) return;
  read_after_.expires_after(kReadAfter);
  read_after_.async_wait([self = shared_from_this()](const boost::system::error_code&) {
    if (!self->exited_) self->start_pumps();  // (an exit seen first has read the pipes, or pumps them)
  });
}

void Process::start_pumps() {
  if (pumping_) return;
  pumping_ = true;
  stdout_.emplace(strand_, stdout_fd_);
  stderr_.emplace(strand_, stderr_fd_);
  pumps_running_ = 2;
  auto self = shared_from_this();
  asio::co_spawn(
      strand_, [self]() { return self->pump(*self->stdout_, self->stdout_kind()); }, asio::detached);
  asio::co_spawn(
      strand_, [self]() { return self->pump(*self->stderr_, ProcessOutput::Kind::kStderr); }, asio::detached);
}

asio::awaitable<bool> Process::drain(int fd, ProcessOutput::Kind kind) {
  auto self = shared_from_this();
  // At most 1 MiB here (what pipes hold); anything beyond is pumped.
  for (int reads = 0; reads < 16; ++reads) {
    ProcessOutput piece;
    piece.kind = kind;
    const ssize_t n = read_waiting(fd, piece.data);
    if (n > 0) {
      co_await deliver(std::move(piece));
      continue;
    }
    // End of file, or a broken pipe: it is done (a terminal's master reads EIO once no
    // process holds its slave).
    co_return n < 0 && errno == EAGAIN;
  }
  co_return true;
}

asio::awaitable<void> Process::pump(asio::posix::stream_descriptor& pipe, ProcessOutput::Kind kind) {
  auto self = shared_from_this();
  std::string buffer(kReadChunk, '\0');
  for (;;) {
    boost::system::error_code ec;
    const size_t n =
        co_await pipe.async_read_some(asio::buffer(buffer), asio::redirect_error(asio::use_awaitable, ec));
    if (n > 0) {
      ProcessOutput piece;
      piece.kind = kind;
      piece.data.assign(buffer.data(), n);
      co_await deliver(std::move(piece));
    }
    if (ec) break;
  }
  --pumps_running_;
  pumps_done_.cancel();
}

asio::awaitable<void> Process::deliver(ProcessOutput piece) {
  auto self = shared_from_this();
  for (;;) {
    bool full = false;
    std::erase_if(readers_, [](const auto& reader) { return reader.expired(); });
    for (const auto& weak : readers_)
      if (auto reader = weak.lock(); reader && reader->queued_bytes_ >= kReaderBuffer) full = true;
    if (!full) break;
    // A reader that stopped reading without going away holds the output back (the
    // process waits on its pipe); one that went away is dropped at the next look.
    co_await wait_for(room_, std::chrono::milliseconds(100));
  }
  for (const auto& weak : readers_) {
    if (auto reader = weak.lock()) {
      reader->queued_bytes_ += size_of(piece);
      reader->queue_.push_back(piece);
      reader->wake_.cancel();
    }
  }
}

asio::awaitable<void> Process::finish(std::function<void()> on_end) {
  auto self = shared_from_this();
  // The exit is waited for on the sandbox's strand while the process runs; the end
  // goes out once both pipes are at their end too, after all of its output.
  const int status = co_await sandbox_->wait_process(execution_id_);
  exited_ = true;
  read_after_.cancel();
  if (!pumping_) {
    // Ended within kReadAfter: what it wrote waits in the pipes.
    const bool stdout_open = co_await drain(stdout_fd_, stdout_kind());
    const bool stderr_open = co_await drain(stderr_fd_, ProcessOutput::Kind::kStderr);
    if (stdout_open || stderr_open) start_pumps();  // what it started still writes
  }
  while (pumps_running_ > 0) co_await wait_on(pumps_done_, std::chrono::seconds(1));
  if (status < 0 && suspended_ && !abandoned_) {
    // Its sandbox stopped for a checkpoint: the process is in the image, and comes back
    // with the restore (take_back). Its readers' streams end as the sandbox's (E2B's
    // clients lose their connections to envd at a pause): each is told "the sandbox
    // stopped" without waiting for room (a reader that stopped reading holds nothing
    // back now), and a connect after the restore reads on. Its old pipes are closed.
    // (Those who connected since the checkpoint began read on after the restore.)
    ProcessOutput stopped;
    stopped.kind = ProcessOutput::Kind::kEnd;
    stopped.exit_code = -1;
    stopped.sandbox_stopped = true;
    for (const auto& weak : readers_at_checkpoint_) {
      auto reader = weak.lock();
      if (!reader) continue;
      reader->queue_.push_back(stopped);
      reader->wake_.cancel();
      std::erase_if(readers_, [&reader](const auto& other) { return other.lock() == reader; });
    }
    readers_at_checkpoint_.clear();
    stdout_.reset();
    stderr_.reset();
    if (stdout_fd_ >= 0 && !pumping_) ::close(stdout_fd_);
    if (stderr_fd_ >= 0 && !pumping_) ::close(stderr_fd_);
    stdout_fd_ = stderr_fd_ = -1;
    pumping_ = false;
    parked_ = true;
    --container_->executing;  // a stopped sandbox is not busy
    if (adopted_) take_back();
    co_return;
  }
  co_await end_with(status, std::move(on_end));
}

asio::awaitable<void> Process::end_with(int status, std::function<void()> on_end) {
  auto self = shared_from_this();
  ProcessOutput end;
  end.kind = ProcessOutput::Kind::kEnd;
  const int asked = kill_signal_.load();
  if (status < 0) {
    end.exit_code = -1;
    end.sandbox_stopped = true;
  } else if ((asked || timed_out_) && status > 128) {
    end.exit_code = -1;
    end.killed_by = status - 128;
    end.timed_out = timed_out_;
  } else {
    end.exit_code = status;
  }
  deadline_.cancel();
  stdin_.reset();  // (a stdin write under way ends with an error and drops the queue)
  ended_ = true;
  co_await deliver(end);
  end_ = std::move(end);
  ops::log_event_batched(spdlog::level::info, "process_ended",
                         {{"owner", container_->owner},
                          {"container", container_->id},
                          {"pid", int64_t{pid_}},
                          {"exit_code", int64_t{end_->exit_code}}});
  on_end();
}

void Process::suspend() {
  suspended_ = true;
  asio::dispatch(strand_, [self = shared_from_this()] { self->readers_at_checkpoint_ = self->readers_; });
}

void Process::resume(std::shared_ptr<Container> container, std::shared_ptr<runtime::Sandbox> sandbox,
                     runtime::ProcessChannel channel) {
  asio::dispatch(strand_, [self = shared_from_this(), container = std::move(container),
                           sandbox = std::move(sandbox), channel] {
    self->adopted_ = Adopted{container, sandbox, channel};
    // (Before its old sandbox's end has parked it: finish() takes it back then.)
    if (self->parked_) self->take_back();
  });
}

void Process::take_back() {
  Adopted adopted = std::move(*adopted_);
  adopted_.reset();
  const bool keep_stdin = stdin_ && !stdin_closing_;
  stdin_.reset();  // (the old sandbox's pipe)
  container_ = std::move(adopted.container);
  sandbox_ = std::move(adopted.sandbox);
  execution_id_ = adopted.channel.id;
  take_channel(adopted.channel, keep_stdin);
  ++container_->executing;
  parked_ = false;
  suspended_ = false;
  exited_ = false;
  // A kill asked for, or a timeout that came, while it was parked.
  if (kill_signal_ || timed_out_) sandbox_->kill_process(execution_id_);
  ops::log_event(spdlog::level::info, "process_restored",
                 {{"owner", container_->owner}, {"container", container_->id}, {"pid", int64_t{pid_}}});
  read_later();
  auto self = shared_from_this();
  asio::co_spawn(
      strand_, [self]() { return self->finish(self->on_end_); }, asio::detached);
}

void Process::abandon() {
  auto self = shared_from_this();
  auto end = [self]() -> asio::awaitable<void> {
    self->abandoned_ = true;
    if (auto& adopted = self->adopted_) {  // (taken back by nobody: its pipes are closed)
      for (int fd :
           {adopted->channel.stdin_write, adopted->channel.stdout_read, adopted->channel.stderr_read})
        if (fd >= 0) ::close(fd);
      adopted.reset();
    }
    if (!self->parked_) co_return;  // its end comes as it would have without a checkpoint
    self->parked_ = false;
    ++self->container_->executing;  // (given back by the end, as the destructor does)
    co_await self->end_with(-1, self->on_end_);
  };
  asio::co_spawn(strand_, std::move(end), asio::detached);
}

void Process::enforce_timeout(std::chrono::milliseconds timeout) {
  deadline_.expires_after(timeout);
  deadline_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->ended_) return;
    self->timed_out_ = true;
    self->sandbox_->kill_process(self->execution_id_);
  });
}

asio::awaitable<std::shared_ptr<ProcessReader>> Process::subscribe() {
  auto self = shared_from_this();
  auto add = [self]() -> asio::awaitable<std::shared_ptr<ProcessReader>> {
    auto reader = std::make_shared<ProcessReader>(self);
    if (self->end_)
      reader->queue_.push_back(*self->end_);
    else
      self->readers_.push_back(reader);
    co_return reader;
  };
  co_return co_await asio::co_spawn(strand_, add(), asio::use_awaitable);
}

asio::awaitable<Result<void>> Process::write_stdin(std::string bytes) {
  auto self = shared_from_this();
  auto take = [self, bytes = std::move(bytes)]() mutable -> asio::awaitable<Result<void>> {
    if (!self->stdin_ || self->stdin_closing_ || self->ended_)
      co_return ApiError::invalid_request("The process's stdin is closed (start it with stdin enabled)");
    if (bytes.empty()) co_return Result<void>{};
    if (self->stdin_queued_ + bytes.size() > kStdinQueue)
      co_return ApiError::rate_limited("The process has not read the " + std::to_string(self->stdin_queued_) +
                                           " bytes of stdin waiting for it; at most " +
                                           std::to_string(kStdinQueue) + " bytes may wait (this write has " +
                                           std::to_string(bytes.size()) +
                                           "): none of it was taken, send it again once the process reads",
                                       1);
    self->stdin_queued_ += bytes.size();
    self->stdin_queue_.push_back(std::move(bytes));
    if (!self->stdin_writing_) {
      self->stdin_writing_ = true;
      asio::co_spawn(
          self->strand_, [self]() { return self->write_queued_stdin(); }, asio::detached);
    }
    co_return Result<void>{};
  };
  co_return co_await asio::co_spawn(strand_, take(), asio::use_awaitable);
}

asio::awaitable<void> Process::write_queued_stdin() {
  auto self = shared_from_this();
  while (!stdin_queue_.empty() && stdin_) {
    boost::system::error_code ec;
    // (The front stays in the queue while it is written: the buffer outlives the write,
    // even when the process's end closes the pipe under it.)
    co_await asio::async_write(*stdin_, asio::buffer(stdin_queue_.front()),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (stdin_queue_.empty()) break;
    stdin_queued_ -= stdin_queue_.front().size();
    stdin_queue_.pop_front();
    if (ec) {
      // The process closed its stdin or ended: what waits can never be read.
      stdin_queue_.clear();
      stdin_queued_ = 0;
      stdin_.reset();
    }
  }
  stdin_queue_.clear();
  stdin_queued_ = 0;
  stdin_writing_ = false;
  if (stdin_closing_) stdin_.reset();
}

asio::awaitable<Result<void>> Process::close_stdin() {
  auto self = shared_from_this();
  auto close = [self]() -> asio::awaitable<Result<void>> {
    self->stdin_closing_ = true;
    if (!self->stdin_writing_) self->stdin_.reset();  // else once the queue is written
    co_return Result<void>{};
  };
  co_return co_await asio::co_spawn(strand_, close(), asio::use_awaitable);
}

asio::awaitable<Result<void>> Process::resize_terminal(runtime::protocol::TerminalSize size) {
  if (!terminal_)
    co_return ApiError::invalid_request("Process " + std::to_string(pid_) +
                                        " does not run on a terminal (PTY)");
  if (ended_) co_return ApiError::not_found("Process " + std::to_string(pid_) + " has ended");
  // Its sandbox and id as the strand has them (they change when it comes back from a
  // checkpoint; a parked one's old sandbox answers -ESRCH).
  auto self = shared_from_this();
  auto current = [self]() -> asio::awaitable<std::pair<std::shared_ptr<runtime::Sandbox>, uint32_t>> {
    co_return std::pair{self->sandbox_, self->execution_id_};
  };
  const auto [sandbox, execution_id] = co_await asio::co_spawn(strand_, current(), asio::use_awaitable);
  const int rc = co_await sandbox->resize_terminal(execution_id, size);
  if (rc == -ESRCH) co_return ApiError::not_found("Process " + std::to_string(pid_) + " has ended");
  if (rc < 0) {
    spdlog::warn("resizing the terminal of process {} in container {} failed: {}", pid_, container_->id,
                 std::strerror(-rc));
    co_return ApiError::internal();
  }
  co_return Result<void>{};
}

void Process::kill(int signal) {
  kill_signal_ = signal > 0 ? signal : SIGKILL;
  // On the strand: its sandbox changes when it comes back from a checkpoint (a parked
  // one is killed as it does).
  asio::dispatch(strand_, [self = shared_from_this()] {
    if (!self->parked_) self->sandbox_->kill_process(self->execution_id_);
  });
}

struct Processes::Reservation {
  Processes* processes;
  Key key;
  std::optional<std::string> tag;
  bool held = true;
  ~Reservation() {
    if (!held) return;
    std::lock_guard lock(processes->mutex_);
    processes->release_locked(key, tag);
  }
};

void Processes::release_locked(const Key& key, const std::optional<std::string>& tag) {
  if (auto it = starting_.find(key); it != starting_.end() && --it->second == 0) starting_.erase(it);
  if (!tag) return;
  if (auto it = starting_tags_.find(key); it != starting_tags_.end()) {
    if (auto one = it->second.find(*tag); one != it->second.end()) it->second.erase(one);
    if (it->second.empty()) starting_tags_.erase(it);
  }
}

asio::awaitable<Result<Processes::Started>> Processes::start(std::shared_ptr<Container> container,
                                                             ContainerService& service, ProcessConfig config,
                                                             std::optional<std::string> tag,
                                                             std::map<std::string, std::string> env,
                                                             bool keep_stdin,
                                                             std::chrono::milliseconds timeout) {
  if (config.cmd.empty()) co_return ApiError::invalid_request("'process.cmd' is required");
  for (const auto& [name, value] : config.envs) env[name] = value;
  runtime::ProcessRequest request;
  request.terminal = config.terminal;
  for (const auto& [name, value] : env) {
    if (!valid_env_name(name) || value.find('\0') != std::string::npos)
      co_return ApiError::invalid_request("Environment variable names may not be empty or hold '=' or NUL");
    request.extra_env.push_back(name + "=" + value);
  }
  auto has_nul = [](const std::string& s) { return s.find('\0') != std::string::npos; };
  if (has_nul(config.cmd) || std::any_of(config.args.begin(), config.args.end(), has_nul) ||
      (config.cwd && has_nul(*config.cwd)))
    co_return ApiError::invalid_request("A command, argument or working directory may not hold NUL");
  const Key key{container->owner, container->id};
  {
    std::lock_guard lock(mutex_);
    auto it = running_.find(key);
    const size_t running = it == running_.end() ? 0 : it->second.size();
    const size_t starting = starting_.contains(key) ? starting_[key] : 0;
    if (running + starting >= kMaxPerSandbox)
      co_return ApiError::rate_limited("This sandbox runs " + std::to_string(kMaxPerSandbox) +
                                           " processes already; wait for one to end or kill one",
                                       service.settings()->retry_after_sec);
    if (tag) {
      bool taken = starting_tags_.contains(key) && starting_tags_[key].contains(*tag);
      if (it != running_.end())
        for (const auto& [pid, process] : it->second) taken = taken || process->tag() == tag;
      if (taken) co_return ApiError::conflict("A process tagged '" + *tag + "' runs already");
      starting_tags_[key].insert(*tag);
    }
    ++starting_[key];
  }
  Reservation reservation{this, key, tag};
  // The working directory is entered by a shell in front of the command (the runtime
  // starts every process in the workspace): the command's own argv follows unchanged.
  // What E2B's SDKs send for a command, `bash -l -c SCRIPT`, enters it in that same
  // bash, at the start of the script's first line (its line numbers stay): one process
  // exec'd instead of two, the same pid, $$ and environment.
  const std::string cwd = config.cwd.value_or("/home/user");
  if (config.cmd == "/bin/bash" && config.args.size() == 3 && config.args[0] == "-l" &&
      config.args[1] == "-c") {
    request.argv = {"/bin/bash", "-l", "-c", "cd -- " + single_quoted(cwd) + " || exit 1; " + config.args[2]};
  } else {
    request.argv = {"/bin/sh", "-c", "cd -- \"$1\" || exit 1; shift; exec \"$@\"", "sh", cwd, config.cmd};
    request.argv.insert(request.argv.end(), config.args.begin(), config.args.end());
  }
  auto started = co_await service.execution().start_process(container, std::move(request));
  if (!started) co_return started.error();
  const uint32_t pid = next_pid_++;
  auto process = std::make_shared<Process>(pid, std::move(config), std::move(tag), container,
                                           std::move(*started), keep_stdin);
  {
    std::lock_guard lock(mutex_);
    running_[key][pid] = process;
    release_locked(key, process->tag());
    reservation.held = false;
  }
  // Its first reader before anything runs: nothing it writes is missed.
  auto reader = std::make_shared<ProcessReader>(process);
  process->readers_.push_back(reader);
  process->run(timeout, [this, key, pid] { forget(key, pid); });
  co_return Started{process, reader};
}

void Processes::forget(const Key& key, uint32_t pid) {
  std::lock_guard lock(mutex_);
  auto it = running_.find(key);
  if (it == running_.end()) return;
  it->second.erase(pid);
  if (it->second.empty()) running_.erase(it);
}

void Processes::checkpointing(const Container& container) {
  for (const auto& process : list(container)) process->suspend();
}

asio::awaitable<void> Processes::restored(std::shared_ptr<Container> container,
                                          std::shared_ptr<runtime::Sandbox> sandbox) {
  for (const auto& process : list(*container)) {
    if (!process->suspended_) continue;  // started after the checkpoint's look (none: the strand)
    // Its pipes as the restored sandbox relays them; none when it ended inside before
    // the checkpoint was taken (its end then comes from its old sandbox's stop).
    auto channel = co_await sandbox->adopt_process(process->execution_id_);
    if (channel)
      process->resume(container, sandbox, *channel);
    else
      process->abandon();
  }
}

void Processes::memory_lost(const Container& container) {
  for (const auto& process : list(container))
    if (process->suspended_) process->abandon();
}

std::vector<std::shared_ptr<Process>> Processes::list(const Container& container) const {
  std::vector<std::shared_ptr<Process>> out;
  std::lock_guard lock(mutex_);
  if (auto it = running_.find({container.owner, container.id}); it != running_.end())
    for (const auto& [pid, process] : it->second) out.push_back(process);
  return out;
}

std::shared_ptr<Process> Processes::find(const Container& container, uint32_t pid) const {
  std::lock_guard lock(mutex_);
  auto it = running_.find({container.owner, container.id});
  if (it == running_.end()) return nullptr;
  auto found = it->second.find(pid);
  return found == it->second.end() ? nullptr : found->second;
}

std::shared_ptr<Process> Processes::find_tag(const Container& container, const std::string& tag) const {
  std::lock_guard lock(mutex_);
  auto it = running_.find({container.owner, container.id});
  if (it == running_.end()) return nullptr;
  for (const auto& [pid, process] : it->second)
    if (process->tag() == tag) return process;
  return nullptr;
}

}  // namespace sandboxd::e2b
