// Work the server does inside a running sandbox's network namespace (the allow-listed
// Kubernetes peers change while the sandbox runs, so their listeners cannot all be
// opened by PID 1 at start). The calling thread enters the namespace, makes its
// sockets there (a socket stays in the namespace it was made in) and returns to its
// own: run it on a blocking-pool thread, never on an I/O thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>

#include "base/unique_fd.h"

namespace sandboxd::runtime {

// The network namespace of the sandbox whose PID 1 is `pid1` (a host pid). Throws
// SyscallError.
UniqueFd open_network_namespace(pid_t pid1);

// Runs `work` with the calling thread inside `netns`, then returns it to its own
// namespace (terminates the process if it cannot: a thread left in a sandbox's
// namespace would make the server's later sockets there). Throws what `work` throws,
// or SyscallError when the namespace cannot be entered.
void in_network_namespace(int netns, const std::function<void()>& work);

// In the current namespace: every IPv4 address is local (a `local 0.0.0.0/0 dev lo`
// route in the local table), so a connection to any address reaches a listener bound
// to it or to the wildcard here, and any other is refused by this kernel at once.
// Nothing leaves: the namespace still has only `lo`. Throws SyscallError.
void route_every_address_locally();

// A non-blocking UDP socket bound to `address:port` in the current namespace.
int open_udp_socket(const std::string& address, uint16_t port);

}  // namespace sandboxd::runtime
