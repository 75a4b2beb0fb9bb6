#include "runtime/netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/syscall_error.h"

namespace sandboxd::runtime {

UniqueFd open_network_namespace(pid_t pid1) {
  const std::string path = "/proc/" + std::to_string(pid1) + "/ns/net";
  return UniqueFd(static_cast<int>(check(open(path.c_str(), O_RDONLY | O_CLOEXEC), "open(" + path + ")")));
}

void in_network_namespace(int netns, const std::function<void()>& work) {
  UniqueFd own(static_cast<int>(
      check(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC), "open(/proc/thread-self/ns/net)")));
  check(setns(netns, CLONE_NEWNET), "setns(sandbox network namespace)");
  struct Return {
    int own;
    ~Return() {
      if (setns(own, CLONE_NEWNET) != 0) {
        std::fprintf(stderr, "sandboxd: cannot return a thread to its network namespace: %s\n",
                     std::strerror(errno));
        std::abort();
      }
    }
  } back{own.get()};
  work();
}

void route_every_address_locally() {
  int sock = static_cast<int>(
      check(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE), "socket(NETLINK_ROUTE)"));
  UniqueFd guard(sock);
  struct {
    nlmsghdr header;
    rtmsg route;
    char attributes[64];
  } request{};
  request.header.nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  request.header.nlmsg_type = RTM_NEWROUTE;
  request.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK;
  request.header.nlmsg_seq = 1;
  request.route.rtm_family = AF_INET;
  request.route.rtm_dst_len = 0;
  request.route.rtm_table = RT_TABLE_LOCAL;
  request.route.rtm_protocol = RTPROT_BOOT;
  request.route.rtm_scope = RT_SCOPE_HOST;
  request.route.rtm_type = RTN_LOCAL;
  auto add_attribute = [&](unsigned short type, const void* data, size_t size) {
    auto* attribute =
        reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&request) + NLMSG_ALIGN(request.header.nlmsg_len));
    attribute->rta_type = type;
    attribute->rta_len = static_cast<unsigned short>(RTA_LENGTH(size));
    std::memcpy(RTA_DATA(attribute), data, size);
    request.header.nlmsg_len = NLMSG_ALIGN(request.header.nlmsg_len) + RTA_ALIGN(attribute->rta_len);
  };
  const uint32_t table = RT_TABLE_LOCAL;
  add_attribute(RTA_TABLE, &table, sizeof table);
  const unsigned int lo = if_nametoindex("lo");
  if (lo == 0) throw SyscallError("if_nametoindex(lo)", errno);
  const int oif = static_cast<int>(lo);
  add_attribute(RTA_OIF, &oif, sizeof oif);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  check(sendto(sock, &request, request.header.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel),
        "sendto(RTM_NEWROUTE local 0.0.0.0/0)");
  char reply[512];
  const ssize_t got = check(recv(sock, reply, sizeof reply, 0), "recv(RTM_NEWROUTE ack)");
  const auto* header = reinterpret_cast<const nlmsghdr*>(reply);
  if (got < static_cast<ssize_t>(NLMSG_LENGTH(sizeof(nlmsgerr))) || header->nlmsg_type != NLMSG_ERROR)
    throw SyscallError("RTM_NEWROUTE local 0.0.0.0/0 (no acknowledgement)", EPROTO);
  const auto* error = reinterpret_cast<const nlmsgerr*>(NLMSG_DATA(header));
  if (error->error != 0 && error->error != -EEXIST)
    throw SyscallError("RTM_NEWROUTE local 0.0.0.0/0 dev lo", -error->error);
}

int open_udp_socket(const std::string& address, uint16_t port) {
  const std::string where = address + ":" + std::to_string(port);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1)
    throw SyscallError("inet_pton(" + address + ")", EINVAL);
  int sock = static_cast<int>(check(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0),
                                    "socket(AF_INET, SOCK_DGRAM) for " + where));
  UniqueFd guard(sock);
  check(bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), "bind(udp " + where + ")");
  return guard.release();
}

}  // namespace sandboxd::runtime
