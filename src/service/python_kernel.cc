#include "service/python_kernel.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include <spdlog/spdlog.h>

#include "base/blocking.h"

namespace sandboxd::service {
namespace {

using boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr const char* kPython = "/usr/bin/python3";
// What the driver's own start may print before it fails, kept for the error.
constexpr size_t kStartErrorLimit = 4096;
// How much of a frame is read at a time (a pipe's default capacity).
constexpr size_t kReadChunk = 64 << 10;

// The driver's frames: a 4-byte big-endian length, then that many bytes of JSON.
std::string frame(const boost::json::object& message) {
  std::string body = boost::json::serialize(message);
  const uint32_t n = static_cast<uint32_t>(body.size());
  std::string out;
  out.reserve(4 + body.size());
  out.push_back(static_cast<char>(n >> 24));
  out.push_back(static_cast<char>(n >> 16));
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(n));
  out += body;
  return out;
}

std::string_view string_view_field(const boost::json::object& o, const char* key) {
  auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string_view(v->as_string()) : std::string_view();
}
std::string string_field(const boost::json::object& o, const char* key) {
  return std::string(string_view_field(o, key));
}

// An output as the driver sent it, checked: only the documented types and fields pass.
std::optional<boost::json::object> checked_output(const boost::json::value& value) {
  if (!value.is_object()) return std::nullopt;
  const auto& o = value.as_object();
  const std::string type = string_field(o, "type");
  if (type == "execute_result" || type == "display_data") {
    auto* data = o.if_contains("data");
    if (!data || !data->is_object()) return std::nullopt;
    return boost::json::object{{"type", type}, {"data", *data}};
  }
  if (type == "error") {
    boost::json::array traceback;
    if (auto* t = o.if_contains("traceback"); t && t->is_array())
      for (const auto& line : t->as_array())
        if (line.is_string()) traceback.push_back(line);
    return boost::json::object{{"type", "error"},
                               {"ename", string_field(o, "ename")},
                               {"evalue", string_field(o, "evalue")},
                               {"traceback", std::move(traceback)}};
  }
  return std::nullopt;
}

// An event of a streamed call as the driver sent it, checked like an output.
std::optional<boost::json::object> checked_event(const boost::json::value& value) {
  if (!value.is_object()) return std::nullopt;
  const auto& o = value.as_object();
  const std::string type = string_field(o, "type");
  if (type == "start") {
    auto* count = o.if_contains("execution_count");
    if (!count || !count->is_int64()) return std::nullopt;
    return boost::json::object{{"type", type}, {"execution_count", count->as_int64()}};
  }
  if (type == "stdout" || type == "stderr") {
    auto* text = o.if_contains("text");
    if (!text || !text->is_string()) return std::nullopt;
    return boost::json::object{{"type", type}, {"text", *text}};
  }
  return checked_output(value);
}

bool is_call(const boost::json::object& message, const char* op, uint64_t call) {
  auto* id = message.if_contains("id");
  return string_field(message, "op") == op && id && id->is_number() && id->to_number<double>() == call;
}

}  // namespace

struct PythonKernel::Process {
  Process(asio::strand<asio::any_io_executor>& strand, const runtime::ProcessChannel& channel)
      : id(channel.id),
        in(strand, channel.stdin_write),
        out(strand, channel.stdout_read),
        stderr_fd(channel.stderr_read),
        exited(strand, Clock::time_point::max()) {
    fcntl(stderr_fd, F_SETFL, fcntl(stderr_fd, F_GETFL) | O_NONBLOCK);
    chunk.resize(kReadChunk);
  }
  ~Process() {
    if (stderr_fd >= 0) ::close(stderr_fd);
  }
  // What the process wrote to its own stderr before it moved it (its start's errors).
  std::string early_stderr() {
    std::string text;
    char buffer[1024];
    while (text.size() < kStartErrorLimit) {
      ssize_t n = ::read(stderr_fd, buffer, sizeof buffer);
      if (n <= 0) break;
      text.append(buffer, static_cast<size_t>(n));
    }
    return text.substr(0, kStartErrorLimit);
  }
  void close_pipes() {
    error_code ignored;
    in.close(ignored);
    out.close(ignored);
  }

  uint32_t id;
  asio::posix::stream_descriptor in, out;
  int stderr_fd;
  bool ready = false;
  bool broken = false;  // EOF, or a frame that broke the protocol: it is ended
  bool killed = false;
  std::vector<char> chunk;  // what read_frame reads into (one frame at a time)
  std::optional<int> exit_code;
  asio::steady_timer exited;  // cancelled when exit_code is known
};

struct PythonKernel::Cell {
  explicit Cell(asio::strand<asio::any_io_executor>& strand) : expiry(strand) {}
  uint64_t id = 0;
  std::shared_ptr<Process> process;
  std::chrono::milliseconds time_left{};  // of its timeout: it runs only while the code does
  std::set<std::string, std::less<>> tools;
  std::chrono::milliseconds answer_limit{};
  bool written = false;
  bool abandoned = false;  // its pause expired: its calls are answered with errors at once
  Clock::time_point started;
  std::vector<KernelToolCall> pending;
  size_t output_limit = 1 << 20;  // per stream: what the server keeps of its text
  bool streamed = false;
  KernelEventSink sink;              // a streamed cell's consumer (none: it is not streamed, or it went)
  size_t streamed_text[2] = {0, 0};  // stdout's and stderr's bytes sent to the sink
  bool streamed_cut[2] = {false, false};
  std::shared_ptr<runtime::Cancellation> cancellation;  // cancelled: interrupted as at its timeout
  asio::steady_timer expiry;                            // of its pause

  // A streamed cell's text as the server passes it on: each stream capped at
  // output_limit in all, the marker where it was cut, nothing after it (as the driver
  // does; the code's own "event" frames are cut the same). False: drop the event.
  bool keep_streamed_text(boost::json::object& event) {
    const std::string_view type = event.at("type").as_string();
    const int stream = type == "stdout" ? 0 : type == "stderr" ? 1 : -1;
    if (stream < 0) return true;
    if (streamed_cut[stream]) return false;
    const std::string_view text = event.at("text").as_string();
    const size_t room = output_limit - streamed_text[stream];
    if (text.size() <= room) {
      streamed_text[stream] += text.size();
      return true;
    }
    streamed_cut[stream] = true;
    streamed_text[stream] = output_limit;
    event["text"] = capped_output(text, room);
    return true;
  }
};

PythonKernel::PythonKernel(std::shared_ptr<runtime::Sandbox> sandbox,
                           std::shared_ptr<const std::string> driver, std::vector<std::string> extra_env,
                           std::string cwd)
    : sandbox_(std::move(sandbox)),
      driver_(std::move(driver)),
      extra_env_(std::move(extra_env)),
      cwd_(std::move(cwd)),
      strand_(asio::make_strand(sandbox_->executor())),
      turn_(strand_, Clock::time_point::max()) {}

PythonKernel::~PythonKernel() {
  // A kernel that is dropped (its container is gone, or a new sandbox replaced it)
  // takes its process tree with it.
  if (process_ && !process_->exit_code) sandbox_->kill_process(process_->id);
}

void PythonKernel::restart() {
  asio::post(strand_, [self = shared_from_this()] {
    // A paused cell ends with its kernel: its turn goes to the next call.
    if (auto cell = std::exchange(self->paused_, nullptr)) {
      cell->expiry.cancel();
      self->release_turn();
    }
    // A process still to be taken over from a restored sandbox goes too.
    if (const uint32_t adopted = std::exchange(self->adopt_id_, 0)) self->sandbox_->kill_process(adopted);
    if (auto process = std::exchange(self->process_, nullptr)) {
      process->killed = true;
      self->sandbox_->kill_process(process->id);
      process->close_pipes();
    }
  });
}

asio::awaitable<KernelResult> PythonKernel::execute(KernelCall call) {
  co_return co_await asio::co_spawn(strand_, execute_on_strand(std::move(call)), asio::use_awaitable);
}

asio::awaitable<PythonKernel::Frame> PythonKernel::read_frame(Process& process) {
  Frame frame;
  unsigned char header[4];
  error_code ec;
  co_await asio::async_read(process.out, asio::buffer(header), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return frame;
  const size_t n =
      (size_t{header[0]} << 24) | (size_t{header[1]} << 16) | (size_t{header[2]} << 8) | header[3];
  frame.bytes = 4 + n;
  if (n > kMaxFrame) {
    frame.broken = "a frame of " + std::to_string(n) + " bytes, over the limit of " +
                   std::to_string(kMaxFrame >> 20) + " MiB";
    co_return frame;
  }
  // The body grows with what arrives (a header that announces a large frame and then
  // nothing more holds no memory), read through the process's own chunk buffer.
  std::string body;
  while (body.size() < n) {
    const size_t want = std::min(n - body.size(), process.chunk.size());
    const size_t got = co_await process.out.async_read_some(asio::buffer(process.chunk.data(), want),
                                                            asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return frame;  // the end of the channel in the middle of a frame: it exited
    body.append(process.chunk.data(), got);
  }
  auto parse = [&body] {
    boost::system::error_code parse_error;
    boost::json::value value = boost::json::parse(body, parse_error);
    std::string().swap(body);  // its bytes go before the message is used
    return parse_error || !value.is_object() ? std::optional<boost::json::object>()
                                             : std::optional(std::move(value.as_object()));
  };
  // A large frame is parsed on a pool thread: the I/O thread serves others meanwhile.
  if (n > kParseOffThread)
    frame.message = co_await run_on(tree_pool(), std::move(parse));
  else
    frame.message = parse();
  if (!frame.message) frame.broken = "a frame of " + std::to_string(n) + " bytes that is not a JSON object";
  co_return frame;
}

asio::awaitable<bool> PythonKernel::write_frame(Process& process, const boost::json::object& message) {
  std::string bytes = frame(message);
  error_code ec;
  co_await asio::async_write(process.in, asio::buffer(bytes), asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

asio::awaitable<int> PythonKernel::end_process(std::shared_ptr<Process> process) {
  if (!process->exit_code) {
    sandbox_->kill_process(process->id);
    process->close_pipes();
    // The exit comes within milliseconds of the kill; a sandbox that stops meanwhile
    // answers -1 (wait_process) just as well.
    process->exited.expires_after(std::chrono::seconds(10));
    error_code ec;
    while (!process->exit_code) {
      co_await process->exited.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (!ec) break;  // the bound passed
    }
  }
  if (process_ == process) process_.reset();
  co_return process->exit_code.value_or(-1);
}

void PythonKernel::watch_exit(const std::shared_ptr<Process>& process) {
  // Its exit, whenever it comes (a crash, a kill, the sandbox's stop).
  asio::co_spawn(
      strand_,
      [sandbox = sandbox_, process]() -> asio::awaitable<void> {
        int code = co_await sandbox->wait_process(process->id);
        process->exit_code = code;
        process->exited.cancel();
      },
      asio::detached);
}

asio::awaitable<std::optional<uint32_t>> PythonKernel::idle_process() {
  // (Named before co_await: GCC 12 destroys a closure that is a temporary of the
  // co_await expression twice, and this one holds a reference count.)
  auto look = [self = shared_from_this()]() -> asio::awaitable<std::optional<uint32_t>> {
    const auto& process = self->process_;
    if (self->busy_ || !process || !process->ready || process->broken || process->killed ||
        process->exit_code)
      co_return std::nullopt;
    co_return process->id;
  };
  co_return co_await asio::co_spawn(strand_, std::move(look), asio::use_awaitable);
}

asio::awaitable<void> PythonKernel::start_process() {
  runtime::ProcessRequest request;
  request.argv = {kPython, "-c", *driver_};
  if (!cwd_.empty()) request.argv.push_back(cwd_);
  request.extra_env = extra_env_;
  auto channel = co_await sandbox_->start_process(std::move(request));
  auto process = std::make_shared<Process>(strand_, channel);
  process_ = process;
  watch_exit(process);
  // The first frame says IPython is up; a driver that cannot import it exits instead.
  asio::steady_timer limit(strand_, kStartLimit);
  limit.async_wait([weak = std::weak_ptr<Process>(process), sandbox = sandbox_](error_code ec) {
    if (ec) return;
    if (auto p = weak.lock(); p && !p->ready) sandbox->kill_process(p->id);
  });
  auto ready = co_await read_frame(*process);
  limit.cancel();
  if (!ready.message || string_field(*ready.message, "op") != "ready") {
    std::string early = process->early_stderr();
    int code = co_await end_process(process);
    throw runtime::SandboxError("the Python kernel did not start (exit code " + std::to_string(code) + ")" +
                                (early.empty() ? std::string() : ": " + early));
  }
  process->ready = true;
}

namespace {

// The timeout of one stretch of a cell's run (from its start or a resume to its end or
// a pause): SIGINT first (through the driver), a kill if that does not take.
struct Watch {
  explicit Watch(asio::strand<asio::any_io_executor>& strand) : timer(strand) {}
  asio::steady_timer timer;
  bool done = false;
  bool written = false;
  bool interrupted = false;
  bool killed = false;
};

boost::json::object tool_results_frame(uint64_t cell, const std::vector<KernelToolAnswer>& answers) {
  boost::json::array results;
  for (const auto& answer : answers)
    results.push_back(boost::json::object{
        {"call", answer.call}, {"content", answer.content}, {"is_error", answer.is_error}});
  boost::json::object frame;
  frame["op"] = "tool_results";
  frame["id"] = cell;
  frame["results"] = std::move(results);
  return frame;
}

// The calls a tool_calls frame holds: well-formed ones of offered tools pause the cell
// (at most kMaxCallsPerPause); the rest, which only code writing to the protocol's
// descriptor itself can make, are answered with an error at once.
constexpr size_t kMaxCallsPerPause = 100;
void sort_tool_calls(const boost::json::object& frame, const std::set<std::string, std::less<>>& offered,
                     std::vector<KernelToolCall>& calls, std::vector<KernelToolAnswer>& refused) {
  auto* list = frame.if_contains("calls");
  if (!list || !list->is_array()) return;
  for (const auto& value : list->as_array()) {
    if (!value.is_object()) continue;
    const auto& o = value.as_object();
    const std::string call = string_field(o, "call");
    if (call.empty() || call.size() > 64) continue;
    const std::string name = string_field(o, "name");
    auto* input = o.if_contains("input");
    if (!offered.count(name) || (input && !input->is_object()) || calls.size() >= kMaxCallsPerPause) {
      refused.push_back(
          {call, "The tool call was refused: '" + name + "' is not a tool this code may call", true});
      continue;
    }
    calls.push_back({call, name, input ? input->as_object() : boost::json::object{}});
  }
}

}  // namespace

void PythonKernel::release_turn() {
  busy_ = false;
  turn_.cancel_one();
}

asio::awaitable<KernelResult> PythonKernel::execute_on_strand(KernelCall call_input) {
  auto self = shared_from_this();
  // One cell at a time, in order of arrival (a paused cell keeps its turn).
  while (busy_) {
    error_code ec;
    turn_.expires_at(Clock::time_point::max());
    co_await turn_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  busy_ = true;
  struct Turn {
    PythonKernel* kernel;
    bool kept = false;  // by a paused cell
    ~Turn() {
      if (!kept) kernel->release_turn();
    }
  } turn{this};

  if (!sandbox_->running()) throw runtime::SandboxError("sandbox " + sandbox_->name() + " is not running");
  if (process_ && (process_->broken || process_->exit_code)) co_await end_process(process_);
  if (!process_ && adopt_id_ != 0) {
    if (auto channel = co_await sandbox_->adopt_process(std::exchange(adopt_id_, 0))) {
      process_ = std::make_shared<Process>(strand_, *channel);
      process_->ready = true;  // it was between cells when its sandbox was checkpointed
      watch_exit(process_);
    }
  }
  if (!process_) co_await start_process();

  auto cell = std::make_shared<Cell>(strand_);
  cell->id = next_call_++;
  cell->process = process_;
  cell->time_left = call_input.timeout;
  cell->tools.insert(call_input.tools.names.begin(), call_input.tools.names.end());
  cell->answer_limit = call_input.tools.answer_limit;
  cell->started = Clock::now();
  cell->output_limit = call_input.output_limit;
  cell->sink = std::move(call_input.on_event);
  cell->streamed = static_cast<bool>(cell->sink);
  cell->cancellation = std::move(call_input.cancellation);
  boost::json::object request;
  request["op"] = "execute";
  request["id"] = cell->id;
  request["code"] = std::move(call_input.code);
  request["limit"] = static_cast<uint64_t>(call_input.output_limit);
  if (cell->sink) request["stream"] = true;
  if (!call_input.env.empty()) {
    boost::json::object env;
    for (auto& [name, value] : call_input.env) env[name] = value;
    request["env"] = std::move(env);
  }
  if (!call_input.tools.names.empty()) {
    boost::json::array names;
    for (const auto& name : call_input.tools.names) names.push_back(boost::json::string(name));
    request["tools"] = std::move(names);
  }
  cell->written = co_await write_frame(*cell->process, request);
  KernelResult result = co_await run_cell(cell);
  if (result.status == KernelResult::Status::kPaused) {
    turn.kept = true;
    pause(cell);
  }
  co_return result;
}

asio::awaitable<std::optional<KernelResult>> PythonKernel::resume(uint64_t cell,
                                                                  std::vector<KernelToolAnswer> answers) {
  co_return co_await asio::co_spawn(strand_, resume_on_strand(cell, std::move(answers)), asio::use_awaitable);
}

asio::awaitable<std::optional<KernelResult>> PythonKernel::resume_on_strand(
    uint64_t id, std::vector<KernelToolAnswer> answers) {
  auto self = shared_from_this();
  if (!paused_ || paused_->id != id) co_return std::nullopt;
  auto cell = std::exchange(paused_, nullptr);
  cell->expiry.cancel();
  cell->pending.clear();
  // A failed write shows as the kernel's end when run_cell reads.
  co_await write_frame(*cell->process, tool_results_frame(cell->id, answers));
  KernelResult result = co_await run_cell(cell);
  if (result.status == KernelResult::Status::kPaused)
    pause(cell);
  else
    release_turn();
  co_return result;
}

void PythonKernel::pause(std::shared_ptr<Cell> cell) {
  paused_ = cell;
  cell->expiry.expires_after(cell->answer_limit);
  cell->expiry.async_wait([weak = weak_from_this(), cell](error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->paused_ != cell) return;
    self->paused_.reset();
    cell->abandoned = true;
    asio::co_spawn(self->strand_, self->finish_abandoned(cell), asio::detached);
  });
}

asio::awaitable<void> PythonKernel::finish_abandoned(std::shared_ptr<Cell> cell) {
  auto self = shared_from_this();
  std::vector<KernelToolAnswer> answers;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(cell->answer_limit).count();
  for (const auto& call : cell->pending)
    answers.push_back({call.call,
                       "TimeoutError: the tool's result did not come within " + std::to_string(seconds) +
                           "s (the client did not answer in time)",
                       true});
  cell->pending.clear();
  co_await write_frame(*cell->process, tool_results_frame(cell->id, answers));
  co_await run_cell(cell);  // abandoned: it never pauses again; its result has no reader
  release_turn();
}

asio::awaitable<KernelResult> PythonKernel::run_cell(std::shared_ptr<Cell> cell) {
  auto self = shared_from_this();
  auto process = cell->process;
  const uint64_t call = cell->id;
  KernelResult result;
  result.cell = call;
  auto watch = std::make_shared<Watch>(strand_);
  watch->written = cell->written;
  const auto stretch_start = Clock::now();
  watch->timer.expires_after(cell->time_left);
  // An interrupt before the timeout: the watch's timer expires now (a wait already
  // under way is cancelled, one that comes later ends at once), and it goes on as at
  // a timeout.
  auto interrupt_now = [watch] {
    if (!watch->done && !watch->interrupted) watch->timer.expires_at(Clock::time_point::min());
  };
  uint64_t subscription = 0;
  if (cell->cancellation)
    subscription = cell->cancellation->subscribe(
        [strand = strand_, interrupt_now]() mutable { asio::post(strand, interrupt_now); });
  asio::co_spawn(
      strand_,
      [this, self, process, watch, call]() -> asio::awaitable<void> {
        error_code ec;
        co_await watch->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if (watch->done) co_return;
        watch->interrupted = true;
        // A frame still being written (a long cell into a kernel that stopped reading)
        // cannot be followed by another: then the kill is the only way.
        if (watch->written) {
          boost::json::object interrupt;
          interrupt["op"] = "interrupt";
          interrupt["id"] = call;
          co_await write_frame(*process, interrupt);
        }
        watch->timer.expires_after(kInterruptGrace);
        if (watch->written && !watch->done)
          co_await watch->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if (watch->done) co_return;
        watch->killed = true;
        sandbox_->kill_process(process->id);
        process->close_pipes();
      },
      asio::detached);
  struct Finish {
    std::shared_ptr<Watch> watch;
    std::shared_ptr<runtime::Cancellation> cancellation;
    uint64_t subscription;
    ~Finish() {
      watch->done = true;
      watch->timer.cancel();
      if (cancellation && subscription) cancellation->unsubscribe(subscription);
    }
  } finish{watch, cell->cancellation, subscription};

  std::optional<boost::json::object> done;
  bool paused = false;
  std::string channel_broken;
  if (cell->written) {
    // Frames that are not this call's are the code's own writes to the protocol's
    // descriptor: a few are skipped, a flood (by count or by bytes) ends the kernel.
    size_t stray_frames = 0, stray_bytes = 0;
    while (true) {
      auto frame = co_await read_frame(*process);
      if (!frame.message) {
        channel_broken = std::move(frame.broken);
        break;
      }
      auto& message = *frame.message;
      if (is_call(message, "done", call)) {
        done = std::move(message);
        break;
      }
      if (is_call(message, "tool_calls", call)) {
        std::vector<KernelToolCall> calls;
        std::vector<KernelToolAnswer> refused;
        sort_tool_calls(message, cell->tools, calls, refused);
        // After an expired pause, or once interrupted, nobody will answer: fail at once.
        if (cell->abandoned || watch->interrupted) {
          for (const auto& c : calls)
            refused.push_back({c.call,
                               cell->abandoned ? "TimeoutError: the client no longer waits for this code"
                                               : "The code was interrupted",
                               true});
          calls.clear();
        }
        if (!refused.empty()) co_await write_frame(*process, tool_results_frame(call, refused));
        if (calls.empty()) continue;
        cell->pending = calls;
        result.tool_calls = std::move(calls);
        paused = true;
        break;
      }
      std::optional<boost::json::object> event;
      if (cell->streamed && is_call(message, "event", call)) {
        if (!cell->sink) continue;  // its consumer is gone: read and dropped until the interrupt ends it
        if (auto* body = message.if_contains("event")) event = checked_event(*body);
      }
      if (!event) {
        stray_bytes += frame.bytes;
        if (++stray_frames > kMaxStrayFrames || stray_bytes > kMaxStrayBytes) {
          channel_broken = "more than " +
                           (stray_frames > kMaxStrayFrames ? std::to_string(kMaxStrayFrames) + " frames"
                                                           : std::to_string(kMaxStrayBytes >> 20) + " MiB") +
                           " that were not its call's";
          break;
        }
        continue;
      }
      if (!cell->keep_streamed_text(*event)) continue;  // past its stream's cap
      if (auto* count = event->if_contains("execution_count")) result.execution_count = count->as_int64();
      if (!co_await cell->sink(std::move(*event))) {
        cell->sink = nullptr;  // the consumer is gone: the rest of the cell's frames are read and dropped
        interrupt_now();
      }
    }
  }
  watch->done = true;
  watch->timer.cancel();

  if (paused) {
    const auto ran = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - stretch_start);
    cell->time_left = std::max(cell->time_left - ran, std::chrono::milliseconds(1));
    result.status = KernelResult::Status::kPaused;
  } else if (done) {
    const std::string status = string_field(*done, "status");
    // Capped here whatever the frame says (the driver caps them too, but the code can
    // write a "done" of its own).
    result.stdout_text = capped_output(string_view_field(*done, "stdout"), cell->output_limit);
    result.stderr_text = capped_output(string_view_field(*done, "stderr"), cell->output_limit);
    if (auto* count = done->if_contains("execution_count"); count && count->is_int64())
      result.execution_count = count->as_int64();
    if (auto* outputs = done->if_contains("outputs"); outputs && outputs->is_array())
      for (const auto& output : outputs->as_array())
        if (auto checked = checked_output(output)) result.outputs.push_back(std::move(*checked));
    if (watch->interrupted && status == "interrupted") {
      result.status = KernelResult::Status::kTimedOut;
    } else if (status == "ok") {
      result.status = KernelResult::Status::kOk;
    } else {
      result.status = KernelResult::Status::kError;
    }
  } else {
    // No answer: the kernel exited or closed its channel, broke it (ended here), or was
    // killed at the end of its grace. Its state is gone either way; the next call
    // starts afresh.
    process->broken = true;
    if (!channel_broken.empty())
      spdlog::warn("python kernel (process {}) ended for breaking its channel: {}", process->id,
                   channel_broken);
    int exit_code = co_await end_process(process);
    if (!channel_broken.empty()) {
      result.status = KernelResult::Status::kKernelDied;
      result.channel_broken = std::move(channel_broken);
    } else if (watch->killed) {
      result.status = KernelResult::Status::kTimedOut;
      result.restarted = true;
    } else {
      result.status = KernelResult::Status::kKernelDied;
      result.exit_code = exit_code;
    }
  }
  result.duration = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - cell->started);
  co_return result;
}

std::string capped_output(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  std::string kept(text.substr(0, limit));
  kept += runtime::kTruncationMarker;
  return kept;
}

std::string kernel_died_message(const KernelResult& result) {
  if (!result.channel_broken.empty())
    return "The Python kernel was ended for breaking its channel to the server (" + result.channel_broken +
           "); its variables are lost and the next call starts a fresh kernel.";
  return "The Python kernel exited" +
         (result.exit_code >= 0 ? " with code " + std::to_string(result.exit_code) : std::string()) +
         "; its variables are lost and the next call starts a fresh kernel.";
}

std::shared_ptr<const std::string> python_kernel_driver() {
  static std::mutex mutex;
  static std::shared_ptr<const std::string> cached;
  std::lock_guard lock(mutex);
  if (cached) return cached;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir;
  if (n > 0) {
    self[n] = '\0';
    dir = self;
    dir = dir.substr(0, dir.rfind('/') + 1);
  }
  // The build tree has it next to sandboxd; the Debian package in /usr/lib/sandboxd.
  for (const std::string& path :
       {dir + "python_kernel_driver.py", dir + "../lib/sandboxd/python_kernel_driver.py"}) {
    std::ifstream in(path, std::ios::binary);
    if (!in) continue;
    std::ostringstream text;
    text << in.rdbuf();
    cached = std::make_shared<const std::string>(text.str());
    return cached;
  }
  throw runtime::SandboxError(
      "the Python kernel's driver (python_kernel_driver.py) is not installed beside " +
      std::string(n > 0 ? self : "sandboxd"));
}

}  // namespace sandboxd::service
