// Per-owner admission, in front of the global line (Admission): each owner runs at most
// a share of maxConcurrentExecutions at once and waits in a line of its own past it, so
// one owner's long commands never fill the global line that every other owner waits in.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "ops/admission.h"

namespace sandboxd::ops {

class OwnerAdmission {
 public:
  // A slot of `owner`'s (at most `limit` at once), now or after waiting in the owner's
  // line up to `queue_timeout`; an empty ticket when the wait timed out.
  boost::asio::awaitable<Admission::Ticket> acquire(const std::string& owner, int limit,
                                                    std::chrono::milliseconds queue_timeout,
                                                    std::chrono::duration<double>* waited = nullptr);
  // Owners with a command running or waiting (for tests and metrics).
  size_t owners() const;

 private:
  std::shared_ptr<Admission> line_of(const std::string& owner, int limit, std::chrono::milliseconds queue_timeout);

  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Admission>> lines_;
};

// The per-owner share: `configured` when set (> 0), else half the global limit (at
// least 1).
int owner_execution_share(int configured, int global_limit);

}  // namespace sandboxd::ops
