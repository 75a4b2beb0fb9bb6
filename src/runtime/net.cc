#include "runtime/net.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "runtime/syscall_error.h"

namespace sandboxd::runtime {

void bring_up_loopback() {
  int sock =
      static_cast<int>(check(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), "socket(AF_INET, SOCK_DGRAM)"));
  ifreq req{};
  std::strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(sock, SIOCGIFFLAGS, &req) != 0) {
    int err = errno;
    close(sock);
    throw SyscallError("ioctl(lo, SIOCGIFFLAGS)", err);
  }
  req.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(sock, SIOCSIFFLAGS, &req) != 0) {
    int err = errno;
    close(sock);
    throw SyscallError("ioctl(lo, SIOCSIFFLAGS, IFF_UP)", err);
  }
  close(sock);
}

int open_listener(const std::string& address, uint16_t port) {
  const std::string where = address + ":" + std::to_string(port);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1)
    throw SyscallError("inet_pton(" + address + ")", EINVAL);
  int sock = static_cast<int>(check(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0),
                                    "socket(AF_INET, SOCK_STREAM) for " + where));
  int one = 1;
  auto fail = [&](const std::string& call) {
    int err = errno;
    close(sock);
    throw SyscallError(call, err);
  };
  if (setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
    fail("setsockopt(SO_REUSEADDR) for " + where);
  if (bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fail("bind(" + where + ")");
  if (listen(sock, 128) != 0) fail("listen(" + where + ", 128)");
  return sock;
}

}  // namespace sandboxd::runtime
