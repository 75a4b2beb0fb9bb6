#include "app/host_share.h"

#include <spdlog/spdlog.h>

#include "runtime/host_capacity.h"

namespace sandboxd::app {

runtime::CgroupLimits sandboxes_total(const ops::Config& config) {
  const auto host = runtime::read_host_capacity();
  auto resolve = [](uint64_t configured, uint64_t share) {
    return configured == ops::Config::kNoLimit ? 0 : configured ? configured : share;
  };
  runtime::CgroupLimits total;
  total.pids = resolve(config.sandboxes_pids_max, runtime::default_sandboxes_pids(host));
  total.memory_bytes = resolve(config.sandboxes_memory_max, runtime::default_sandboxes_memory(host));
  total.cpu_millis = resolve(config.sandboxes_cpu_millis, runtime::default_sandboxes_cpu_millis(host));
  spdlog::info(
      "all sandboxes together: pids {}, memory {} MiB, cpu {}m (0: no limit; host: {} tasks, {} MiB, {}m)",
      total.pids, total.memory_bytes >> 20, total.cpu_millis, host.tasks, host.memory_bytes >> 20,
      host.cpu_millis);
  return total;
}

}  // namespace sandboxd::app
