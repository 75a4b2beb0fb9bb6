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

class TcpEcho : public LoopbackServer {
 public:
  TcpEcho() : LoopbackServer(0, "echo server") { start_accepting(); }
  ~TcpEcho() override { stop_serving(); }

 private:
  void serve_connection(int fd) override {
    std::vector<char> buffer(256 * 1024);
    for (;;) {
      ssize_t n = read(fd, buffer.data(), buffer.size());
      if (n <= 0) return;
      for (ssize_t off = 0; off < n;) {
        ssize_t w = write(fd, buffer.data() + off, static_cast<size_t>(n - off));
        if (w <= 0) return;
        off += w;
      }
    }
  }
};

}  // namespace sandboxd::testing
