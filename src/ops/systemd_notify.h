// The systemd readiness protocol (sd_notify) for `Type=notify` units: READY=1 once the
// service would pass /ready, STATUS= with the reason while it would not, STOPPING=1
// when it begins to shut down. Outside systemd (no $NOTIFY_SOCKET) each call does
// nothing, and no probe runs.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <functional>
#include <string>

namespace sandboxd::ops {

// What /ready runs: empty when a sandbox starts and runs a command, else the reason.
using ReadinessProbe = std::function<boost::asio::awaitable<std::string>()>;

// Probes until `probe` passes, then tells systemd READY=1. With `code_execution` false
// (runtime.provider: none, a files-only service by the operator's choice) READY=1 is
// sent at once: nothing will ever make that probe pass.
void notify_systemd_when_ready(boost::asio::any_io_executor executor, bool code_execution,
                               ReadinessProbe probe);

// STOPPING=1: systemd shows "deactivating" while sandboxes are stopped and flushed.
void notify_systemd_stopping();

}  // namespace sandboxd::ops
