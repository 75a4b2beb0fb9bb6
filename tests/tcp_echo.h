// A TCP echo server on 127.0.0.1 (an ephemeral port): the allow-listed service of the
// network tests and benchmark. One thread per connection; echoes until the peer shuts
// down its side, then closes.
#pragma once

#include "loopback.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace sandboxd::testing {

class TcpEcho {
 public:
  TcpEcho() {
    listen_fd_ = listen_loopback(0, port_, "echo server");
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~TcpEcho() {
    stopping_ = true;
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    acceptor_.join();
    {
      std::lock_guard lock(mutex_);
      for (int fd : open_) shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : workers_) t.join();
  }
  uint16_t port() const { return port_; }
  int connections_accepted() const { return accepted_.load(); }

 private:
  void accept_loop() {
    while (!stopping_) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (stopping_) return;
        continue;
      }
      ++accepted_;
      std::lock_guard lock(mutex_);
      open_.push_back(fd);
      workers_.emplace_back([this, fd] { echo(fd); });
    }
  }
  void echo(int fd) {
    std::vector<char> buffer(256 * 1024);
    for (;;) {
      ssize_t n = read(fd, buffer.data(), buffer.size());
      if (n <= 0) break;
      for (ssize_t off = 0; off < n;) {
        ssize_t w = write(fd, buffer.data() + off, static_cast<size_t>(n - off));
        if (w <= 0) goto done;
        off += w;
      }
    }
  done:
    std::lock_guard lock(mutex_);
    std::erase(open_, fd);
    close(fd);
  }

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  std::mutex mutex_;
  std::vector<int> open_;
  std::vector<std::thread> workers_;
};

}  // namespace sandboxd::testing
