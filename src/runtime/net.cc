#include "runtime/net.h"

#include <arpa/inet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "base/unique_fd.h"
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

void add_loopback_address(const std::string& address, int prefix) {
  const std::string what = "RTM_NEWADDR " + address + "/" + std::to_string(prefix) + " dev lo";
  in_addr parsed{};
  if (inet_pton(AF_INET, address.c_str(), &parsed) != 1 || prefix < 1 || prefix > 32)
    throw SyscallError(what, EINVAL);
  const unsigned int lo = if_nametoindex("lo");
  if (lo == 0) throw SyscallError("if_nametoindex(lo)", errno);
  UniqueFd sock(static_cast<int>(
      check(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE), "socket(NETLINK_ROUTE)")));
  struct {
    nlmsghdr header;
    ifaddrmsg address;
    char attributes[64];
  } request{};
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(ifaddrmsg));
  request.header.nlmsg_type = RTM_NEWADDR;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK;
  request.header.nlmsg_seq = 1;
  request.address.ifa_family = AF_INET;
  request.address.ifa_prefixlen = static_cast<unsigned char>(prefix);
  request.address.ifa_scope = RT_SCOPE_HOST;
  request.address.ifa_index = lo;
  for (unsigned short type : {IFA_LOCAL, IFA_ADDRESS}) {
    auto* attribute =
        reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&request) + NLMSG_ALIGN(request.header.nlmsg_len));
    attribute->rta_type = type;
    attribute->rta_len = static_cast<unsigned short>(RTA_LENGTH(sizeof parsed));
    std::memcpy(RTA_DATA(attribute), &parsed, sizeof parsed);
    request.header.nlmsg_len = NLMSG_ALIGN(request.header.nlmsg_len) + RTA_ALIGN(attribute->rta_len);
  }
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  check(sendto(sock.get(), &request, request.header.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel),
        "sendto(" + what + ")");
  char reply[512];
  const ssize_t got = check(recv(sock.get(), reply, sizeof reply, 0), "recv(" + what + " ack)");
  const auto* header = reinterpret_cast<const nlmsghdr*>(reply);
  if (got < static_cast<ssize_t>(NLMSG_LENGTH(sizeof(nlmsgerr))) || header->nlmsg_type != NLMSG_ERROR)
    throw SyscallError(what + " (no acknowledgement)", EPROTO);
  const auto* error = reinterpret_cast<const nlmsgerr*>(NLMSG_DATA(header));
  if (error->error != 0 && error->error != -EEXIST) throw SyscallError(what, -error->error);
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
