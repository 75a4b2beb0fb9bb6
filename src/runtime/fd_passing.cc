#include "runtime/fd_passing.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sandboxd::runtime {
namespace {

// A message of one byte with room for one descriptor.
struct ByteMessage {
  explicit ByteMessage(char& byte) : iov{&byte, 1} {
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
  }
  ByteMessage(const ByteMessage&) = delete;
  ByteMessage& operator=(const ByteMessage&) = delete;

  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov;
  msghdr message{};
};

}  // namespace

int send_byte_with_fd(int sock, char byte, int fd) {
  ByteMessage out(byte);
  msghdr& message = out.message;
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  for (;;) {
    ssize_t sent = sendmsg(sock, &message, MSG_NOSIGNAL);
    if (sent == 1) return 0;
    if (sent < 0 && errno == EINTR) continue;
    return sent < 0 ? -errno : -EIO;
  }
}

int receive_byte_with_fd(int sock, char& byte, int& fd) {
  fd = -1;
  ByteMessage in(byte);
  msghdr& message = in.message;
  ssize_t got;
  do {
    got = recvmsg(sock, &message, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return -errno;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header))
    if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS) {
      if (fd >= 0) close(fd);  // (one is expected; never leak a second)
      std::memcpy(&fd, CMSG_DATA(header), sizeof(int));
    }
  return got == 0 ? 0 : 1;
}

}  // namespace sandboxd::runtime
