// A TCP relay between two connected sockets: bytes move through a pipe with splice(),
// so they never cross into user space, and each direction reads only as fast as the
// other side takes (backpressure both ways). Half-closes are passed on: when one side
// finishes sending, the other side's write half is shut down, and the relay ends when
// both directions have ended (or at once on an error, closing both).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace sandboxd::server {

namespace asio = boost::asio;

// Bytes a relay has moved, each way (for the egress audit: what went out, what came in).
struct RelayBytes {
  uint64_t a_to_b = 0, b_to_a = 0;
};

// Relays until both directions are done. Never throws; both sockets are closed after.
// `bytes`, when given, counts what was delivered each way.
asio::awaitable<void> relay(asio::ip::tcp::socket a, asio::ip::tcp::socket b, RelayBytes* bytes = nullptr);

}  // namespace sandboxd::server
