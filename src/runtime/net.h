// The sandbox's network namespace: only the loopback interface, up, and no routes.
// Reaching the sandboxd API and allow-listed services is added on top of this (relay
// listeners inside the namespace); nothing here ever creates a route out.
#pragma once

namespace sandboxd::runtime {

// Brings `lo` up in the current network namespace. Throws SyscallError.
void bring_up_loopback();

}  // namespace sandboxd::runtime
