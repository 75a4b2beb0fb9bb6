// The sandbox's network namespace: only the loopback interface, up, and no routes.
// Reaching the sandboxd API and allow-listed services is added on top of this (relay
// listeners inside the namespace); nothing here ever creates a route out.
#pragma once

#include <cstdint>
#include <string>

namespace sandboxd::runtime {

// Brings `lo` up in the current network namespace. Throws SyscallError.
void bring_up_loopback();

// Makes ADDRESS/PREFIX local on `lo` in the current network namespace (every address of
// the prefix, as 127.0.0.0/8 is: gVisor's stack takes a prefix on `lo` so), so that a
// listener can bind one of them and a connection to any of them stays here. An address
// already there is no error. Throws SyscallError.
void add_loopback_address(const std::string& address, int prefix);

// A listening TCP socket on `address:port` (IPv4) in the current network namespace,
// non-blocking and close-on-exec. Throws SyscallError.
int open_listener(const std::string& address, uint16_t port);

}  // namespace sandboxd::runtime
