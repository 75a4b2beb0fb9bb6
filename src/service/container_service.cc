// The composition of the container service, and what belongs to no one part: ids and
// times, and the operator's view of running sandboxes. Opening, starting and stopping:
// container_lifecycle.cc; executions: container_execution.cc.
#include "service/container_service.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <ctime>

#include "base/ids.h"

namespace sandboxd::service {

ContainerService::ContainerService(asio::io_context& io, ops::LiveConfig& config, runtime::Runtime* runtime,
                                   store::Metadata& metadata)
    : parts_(io, config, runtime, metadata),
      memory_(parts_),
      lifecycle_(parts_, memory_),
      execution_(parts_, lifecycle_),
      snapshots_(parts_, lifecycle_, memory_) {
  parts_.pool.start();
}

bool ContainerService::valid_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' || c == '-'))
      return false;
  return true;
}

std::string ContainerService::new_id() const { return "cntr_" + random_hex(24); }

std::string ContainerService::format_time(int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

size_t ContainerService::running_sandboxes() const { return parts_.registry.running_count(); }

namespace {
asio::awaitable<std::shared_ptr<runtime::Sandbox>> sandbox_of(Container* container) {
  co_return container->on_strand.sandbox;
}
}  // namespace

asio::awaitable<std::vector<SandboxStatus>> ContainerService::sandboxes() {
  const std::vector<std::shared_ptr<Container>> running = parts_.registry.running();
  std::vector<SandboxStatus> out;
  for (const auto& container : running) {
    // The sandbox pointer belongs to the container's strand. (A plain coroutine with a
    // raw pointer: `running` holds the container, and GCC 12 mishandles the shared_ptr
    // captures of a lambda coroutine here.)
    auto sandbox =
        co_await asio::co_spawn(container->strand, sandbox_of(container.get()), asio::use_awaitable);
    if (!sandbox || !sandbox->running()) continue;
    SandboxStatus status;
    status.owner = container->owner;
    status.container = container->id;
    status.pid = sandbox->pid();
    status.age_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - sandbox->started_at()).count();
    status.memory_bytes = sandbox->memory_usage();
    status.executing = container->executing.load();
    status.last_used_at = container->last_used_at.load();
    out.push_back(std::move(status));
  }
  co_return out;
}

size_t ContainerService::prestarted_ready() const { return parts_.pool.ready(); }

void ContainerService::set_cluster(LeaseKeeper* leases) {
  parts_.leases = leases;
  leases->set_on_lost([this](const std::string& storage) { lifecycle_.lease_lost(storage); });
  if (parts_.durability)
    parts_.durability->set_on_fenced([leases](const store::FencedError& fenced) { leases->fenced(fenced); });
}

}  // namespace sandboxd::service
