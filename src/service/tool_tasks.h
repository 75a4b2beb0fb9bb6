// Tool calls that outlive the request that started them: MCP's Tasks extension hands a
// client a task id at once, and the client asks for the task's state (and, once it has
// ended, its result) in later requests, or cancels it. The work itself is the surface's
// (a command run exactly as a tools/call runs it); what is kept here is each task's
// state: its owner, its container, its status, the tail of its output while it runs,
// and its result once it ended, for a bounded time.
//
// A task id is not a credential: every look-up names the owner (from the request's
// token), and another owner's task is "not found" as an unknown one is. The id carries
// the container the task runs for (after a random part that makes ids unguessable), so
// that in cluster mode any replica can send a request for the task to the replica
// holding that container, where the task runs and its state is kept.
//
// Bounds: an owner has at most Limits::per_owner tasks kept (running or ended); to start
// another, the owner's oldest ended task is dropped, and when all of them still run the
// start is refused (429). An ended task is kept Limits::keep_ended, then forgotten. A
// task's command is bounded as any command (its timeout, the owner's capacity).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"
#include "runtime/cancellation.h"

namespace sandboxd::service {

class ToolTasks {
 public:
  struct Limits {
    size_t per_owner = 32;                                         // tasks kept at once (running or ended)
    std::chrono::milliseconds keep_ended = std::chrono::hours(1);  // an ended task's result
    size_t status_tail_bytes = 1024;                               // the output shown while it runs
  };
  enum class Status { kWorking, kCompleted, kFailed, kCancelled };

  // A task as a request sees it.
  struct View {
    std::string id;
    Status status = Status::kWorking;
    std::string status_message;   // while working: the end of its output so far
    boost::json::object payload;  // completed: the result; failed: the error
    std::chrono::system_clock::time_point created, updated;
    std::chrono::milliseconds ttl{};  // from `created` to when it may be forgotten
  };
  // What the work ends with: a result, or (failed) an error of the protocol.
  struct Outcome {
    bool failed = false;
    boost::json::object payload;
  };
  // Output as the work writes it (shown while the task runs).
  using Progress = std::function<void(std::string_view)>;
  using Work =
      std::function<boost::asio::awaitable<Outcome>(std::shared_ptr<runtime::Cancellation>, Progress)>;

  explicit ToolTasks(Limits limits);
  ToolTasks() : ToolTasks(Limits{}) {}
  ~ToolTasks();

  // Records a task of `owner` for `container` and starts `work` on `executor`, detached
  // from the caller: the task runs until the work ends or it is cancelled. 429 when the
  // owner's tasks all still run.
  Result<View> start(const boost::asio::any_io_executor& executor, const std::string& owner,
                     const std::string& container, Work work);
  // The owner's task, nullopt when there is none of that id (or it was forgotten).
  std::optional<View> get(const std::string& owner, std::string_view id);
  // Cancels the owner's task: a running one's work is cancelled (its command killed)
  // and it is `cancelled` from now on; an ended one stays as it ended.
  std::optional<View> cancel(const std::string& owner, std::string_view id);

  // The container a task id names ("" when `id` is not a task id).
  static std::string container_of(std::string_view id);
  static std::string_view status_name(Status status);

 private:
  struct Task;
  View view(const Task& task) const;
  void forget_expired(std::chrono::steady_clock::time_point now);

  const Limits limits_;
  std::mutex mutex_;
  // By owner, then id: an owner's tasks are found (and counted) without the others'.
  std::map<std::string, std::map<std::string, std::shared_ptr<Task>, std::less<>>> tasks_;
};

}  // namespace sandboxd::service
