// Loopback sockets for the tests' own servers (the scripted upstream, the echo service).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/tcp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sandboxd::testing {

// A connected (blocking) socket to 127.0.0.1:`port`, or -1.
inline int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

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

// A loopback port nothing listens on (free when this returns), for a server started
// later with that port in its configuration (PostgreSQL, s3rver, nginx, a replica). Tests
// run side by side, and between this probe and that server's bind the port must stay
// free: it is chosen at random below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), where no outgoing connection of another test can take
// it, as a port 0 bind's choice could be. A host whose range leaves no room below falls
// back to that.
inline uint16_t free_loopback_port() {
  constexpr int kLowest = 10000;
  int ephemeral_low = 32768;
  if (FILE* range = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(range, "%d", &ephemeral_low) != 1) ephemeral_low = 32768;
    std::fclose(range);
  }
  if (ephemeral_low - kLowest >= 1000) {
    static std::mutex mutex;
    static std::mt19937 random(std::random_device{}());
    std::uniform_int_distribution<int> pick(kLowest, ephemeral_low - 1);
    for (int tries = 0; tries < 200; ++tries) {
      int port;
      {
        std::lock_guard lock(mutex);
        port = pick(random);
      }
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(port));
      const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
      close(fd);
      if (free) return static_cast<uint16_t>(port);
    }
  }
  uint16_t port = 0;
  close(listen_loopback(0, port, "free port probe"));
  return port;
}

// Whether something accepts connections on 127.0.0.1:`port` now.
inline bool loopback_accepts(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool up = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return up;
}

// A server on 127.0.0.1 with a thread per connection. A subclass answers connections
// (serve_connection), starts accepting once it is ready and stops in its destructor.
class LoopbackServer {
 public:
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;
  uint16_t port() const { return port_; }

 protected:
  LoopbackServer(uint16_t port, const char* who) : listen_fd_(listen_loopback(port, port_, who)) {}
  virtual ~LoopbackServer() = default;

  void start_accepting() {
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  // Stops accepting, ends every open connection and waits for their threads.
  void stop_serving() {
    stopping_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    acceptor_.join();
    {
      std::lock_guard lock(connections_mutex_);
      for (int fd : open_) shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : workers_) t.join();
  }
  bool stopping() const { return stopping_; }
  // Serves one connection on its own thread until it ends; the socket is closed after.
  virtual void serve_connection(int fd) = 0;

 private:
  void accept_loop() {
    while (!stopping_) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (stopping_) return;
        continue;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard lock(connections_mutex_);
      open_.push_back(fd);
      workers_.emplace_back([this, fd] {
        serve_connection(fd);
        {
          std::lock_guard done(connections_mutex_);
          std::erase(open_, fd);
        }
        close(fd);
      });
    }
  }

  uint16_t port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex connections_mutex_;
  std::vector<int> open_;
  std::vector<std::thread> workers_;
};

}  // namespace sandboxd::testing
