#include "service/tool_tasks.h"

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "base/ids.h"
#include "base/utf8.h"
#include "service/container_service.h"

namespace sandboxd::service {
namespace {

constexpr std::string_view kIdPrefix = "mcpt_";
// 128 random bits: a third party cannot guess another's task (ownership is checked on
// every request all the same).
constexpr size_t kRandomHex = 32;

}  // namespace

struct ToolTasks::Task {
  std::string id, owner, container;
  std::shared_ptr<runtime::Cancellation> cancellation = std::make_shared<runtime::Cancellation>();
  std::chrono::system_clock::time_point created = std::chrono::system_clock::now();
  std::chrono::steady_clock::time_point created_steady = std::chrono::steady_clock::now();

  mutable std::mutex mutex;  // what follows: written by the work, read by requests
  Status status = Status::kWorking;
  bool work_running = true;  // a cancelled task's command may still be dying
  std::string output_tail;
  boost::json::object payload;
  std::chrono::system_clock::time_point updated = created;
  std::optional<std::chrono::steady_clock::time_point> ended;
};

ToolTasks::ToolTasks(Limits limits) : limits_(limits) {}

ToolTasks::~ToolTasks() {
  // The server is going away: what still runs is stopped (its sandbox would be anyway).
  std::lock_guard lock(mutex_);
  for (auto& [owner, tasks] : tasks_)
    for (auto& [id, task] : tasks) task->cancellation->cancel();
}

std::string ToolTasks::container_of(std::string_view id) {
  if (!id.starts_with(kIdPrefix) || id.size() < kIdPrefix.size() + kRandomHex + 2) return "";
  for (char c : id.substr(kIdPrefix.size(), kRandomHex))
    if (!std::isxdigit(static_cast<unsigned char>(c))) return "";
  if (id[kIdPrefix.size() + kRandomHex] != '.') return "";
  std::string_view container = id.substr(kIdPrefix.size() + kRandomHex + 1);
  return ContainerService::valid_id(container) ? std::string(container) : std::string();
}

std::string_view ToolTasks::status_name(Status status) {
  switch (status) {
    case Status::kWorking:
      return "working";
    case Status::kCompleted:
      return "completed";
    case Status::kFailed:
      return "failed";
    case Status::kCancelled:
      return "cancelled";
  }
  return "working";
}

ToolTasks::View ToolTasks::view(const Task& task) const {
  std::lock_guard lock(task.mutex);
  View view;
  view.id = task.id;
  view.status = task.status;
  view.created = task.created;
  view.updated = task.updated;
  if (task.status == Status::kWorking) {
    // The end of the output so far, from a character's start (the tail was cut at a byte).
    std::string_view tail = task.output_tail;
    while (!tail.empty() && (static_cast<unsigned char>(tail.front()) & 0xC0) == 0x80) tail.remove_prefix(1);
    view.status_message = to_valid_utf8(tail);
  } else {
    view.payload = task.payload;
  }
  // Kept until keep_ended after it ends; while it runs, at least that long from now.
  const auto until = task.ended.value_or(std::chrono::steady_clock::now()) + limits_.keep_ended;
  view.ttl = std::chrono::duration_cast<std::chrono::milliseconds>(until - task.created_steady);
  return view;
}

void ToolTasks::forget_expired(std::chrono::steady_clock::time_point now) {
  for (auto owner = tasks_.begin(); owner != tasks_.end();) {
    auto& tasks = owner->second;
    for (auto it = tasks.begin(); it != tasks.end();) {
      std::lock_guard lock(it->second->mutex);
      const bool expired =
          !it->second->work_running && it->second->ended && now - *it->second->ended >= limits_.keep_ended;
      it = expired ? tasks.erase(it) : std::next(it);
    }
    owner = tasks.empty() ? tasks_.erase(owner) : std::next(owner);
  }
}

Result<ToolTasks::View> ToolTasks::start(const boost::asio::any_io_executor& executor,
                                         const std::string& owner, const std::string& container, Work work) {
  auto task = std::make_shared<Task>();
  task->id = std::string(kIdPrefix) + random_hex(kRandomHex) + "." + container;
  task->owner = owner;
  task->container = container;
  {
    std::lock_guard lock(mutex_);
    forget_expired(std::chrono::steady_clock::now());
    auto& tasks = tasks_[owner];
    if (tasks.size() >= limits_.per_owner) {
      // Room is made by dropping the task that ended first; one still running is never
      // dropped (its command would run on unobserved).
      auto oldest = tasks.end();
      std::chrono::steady_clock::time_point oldest_end{};
      for (auto it = tasks.begin(); it != tasks.end(); ++it) {
        std::lock_guard task_lock(it->second->mutex);
        if (it->second->work_running || !it->second->ended) continue;
        if (oldest == tasks.end() || *it->second->ended < oldest_end) {
          oldest = it;
          oldest_end = *it->second->ended;
        }
      }
      if (oldest == tasks.end())
        return ApiError::rate_limited("Too many tasks: at most " + std::to_string(limits_.per_owner) +
                                          " tasks of an owner run at once; wait for one to end or cancel one",
                                      1);
      tasks.erase(oldest);
    }
    tasks.emplace(task->id, task);
  }
  auto progress = [task, tail_limit = limits_.status_tail_bytes](std::string_view output) {
    std::lock_guard lock(task->mutex);
    if (output.size() >= tail_limit) {
      task->output_tail.assign(output.substr(output.size() - tail_limit));
    } else {
      task->output_tail.append(output);
      if (task->output_tail.size() > tail_limit)
        task->output_tail.erase(0, task->output_tail.size() - tail_limit);
    }
    task->updated = std::chrono::system_clock::now();
  };
  auto run = [task, work = std::move(work),
              progress = std::move(progress)]() -> boost::asio::awaitable<void> {
    Outcome outcome;
    try {
      outcome = co_await work(task->cancellation, progress);
    } catch (const std::exception& e) {
      spdlog::error("task {} of {}: {}", task->id, task->owner, e.what());
      outcome.failed = true;
      outcome.payload = boost::json::object{{"code", -32603}, {"message", "Internal error"}};
    }
    std::lock_guard lock(task->mutex);
    task->work_running = false;
    task->output_tail.clear();
    if (task->status != Status::kWorking) co_return;  // cancelled: it stays so
    task->status = outcome.failed ? Status::kFailed : Status::kCompleted;
    // Kept past the request that made it: a copy of its own (the request's memory goes).
    task->payload = boost::json::object(outcome.payload, boost::json::storage_ptr());
    task->updated = std::chrono::system_clock::now();
    task->ended = std::chrono::steady_clock::now();
  };
  boost::asio::co_spawn(executor, std::move(run), boost::asio::detached);
  return view(*task);
}

std::optional<ToolTasks::View> ToolTasks::get(const std::string& owner, std::string_view id) {
  std::shared_ptr<Task> task;
  {
    std::lock_guard lock(mutex_);
    forget_expired(std::chrono::steady_clock::now());
    auto tasks = tasks_.find(owner);
    if (tasks == tasks_.end()) return std::nullopt;
    auto it = tasks->second.find(id);
    if (it == tasks->second.end()) return std::nullopt;
    task = it->second;
  }
  return view(*task);
}

std::optional<ToolTasks::View> ToolTasks::cancel(const std::string& owner, std::string_view id) {
  std::shared_ptr<Task> task;
  {
    std::lock_guard lock(mutex_);
    auto tasks = tasks_.find(owner);
    if (tasks == tasks_.end()) return std::nullopt;
    auto it = tasks->second.find(id);
    if (it == tasks->second.end()) return std::nullopt;
    task = it->second;
  }
  bool cancel_work = false;
  {
    std::lock_guard lock(task->mutex);
    if (task->status == Status::kWorking) {
      task->status = Status::kCancelled;
      task->updated = std::chrono::system_clock::now();
      task->ended = std::chrono::steady_clock::now();
      task->output_tail.clear();
      cancel_work = true;
    }
  }
  // Outside the task's lock: the callbacks kill the command (and may finish the work).
  if (cancel_work) task->cancellation->cancel();
  return view(*task);
}

}  // namespace sandboxd::service
