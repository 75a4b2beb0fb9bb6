#include "runtime/net.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "runtime/syscall_error.h"

namespace sandboxd::runtime {

void bring_up_loopback() {
  int sock = static_cast<int>(check(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0),
                                    "socket(AF_INET, SOCK_DGRAM)"));
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

}  // namespace sandboxd::runtime
