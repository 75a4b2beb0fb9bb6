// Loopback sockets for the tests' own servers (the scripted upstream, the echo service).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace sandboxd::testing {

// A listening socket on 127.0.0.1:`port` (0: any free port); `bound` gets the port.
inline int listen_loopback(uint16_t port, uint16_t& bound, const char* who) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 128) != 0) {
    close(fd);
    throw std::runtime_error(std::string(who) + ": cannot listen on loopback");
  }
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  bound = ntohs(addr.sin_port);
  return fd;
}

// A loopback port nothing listens on (free when this returns).
inline uint16_t free_loopback_port() {
  uint16_t port = 0;
  close(listen_loopback(0, port, "free port probe"));
  return port;
}

}  // namespace sandboxd::testing
