#include "ops/systemd_notify.h"

#include <systemd/sd-daemon.h>

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdlib>

namespace sandboxd::ops {
namespace {

namespace asio = boost::asio;

// Between probes while not ready: a sandbox start costs milliseconds, and systemd's
// TimeoutStartSec bounds the whole wait.
constexpr auto kProbeInterval = std::chrono::seconds(2);

bool under_systemd() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  return socket && *socket;
}

asio::awaitable<void> wait_until_ready(asio::any_io_executor executor, ReadinessProbe probe) {
  asio::steady_timer pause(executor);
  std::string last_problem;
  for (;;) {
    std::string problem;
    try {
      problem = co_await probe();
    } catch (const std::exception& e) {
      problem = e.what();
    }
    if (problem.empty()) break;
    if (problem != last_problem) {
      spdlog::warn("not ready yet (systemd waits): {}", problem);
      sd_notifyf(0, "STATUS=not ready: %s", problem.c_str());
      last_problem = problem;
    }
    pause.expires_after(kProbeInterval);
    co_await pause.async_wait(asio::use_awaitable);
  }
  sd_notify(0, "READY=1\nSTATUS=ready: sandboxes start");
  spdlog::info("ready (told systemd)");
}

}  // namespace

void notify_systemd_when_ready(asio::any_io_executor executor, bool code_execution, ReadinessProbe probe) {
  if (!under_systemd()) return;
  if (!code_execution) {
    sd_notify(0, "READY=1\nSTATUS=ready: files only, code execution not configured");
    return;
  }
  asio::co_spawn(executor, wait_until_ready(executor, std::move(probe)), asio::detached);
}

void notify_systemd_stopping() {
  if (under_systemd()) sd_notify(0, "STOPPING=1\nSTATUS=stopping sandboxes");
}

}  // namespace sandboxd::ops
