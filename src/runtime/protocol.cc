#include "runtime/protocol.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

namespace sandboxd::runtime::protocol {

int send_message(int sock, Type type, uint32_t id, int64_t value, std::string_view payload, const int* fds,
                 size_t nfds, bool dont_wait) {
  Header header{type, id, value};
  iovec iov[2] = {{&header, sizeof header}, {const_cast<char*>(payload.data()), payload.size()}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = payload.empty() ? 1 : 2;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (nfds > 0) {
    if (nfds > kMaxFds) return -EINVAL;
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * nfds);
  }
  for (;;) {
    ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL | (dont_wait ? MSG_DONTWAIT : 0));
    if (n >= 0) return 0;
    if (errno == EINTR) continue;
    return -errno;
  }
}

int receive_message(int sock, Message& out, bool dont_wait) {
  out = Message{};
  // One receive buffer per thread: a message is copied out at its real size, instead
  // of zero-filling kMaxMessage bytes for every packet. Left uninitialized, so that
  // only the pages messages have reached are resident (in every sandbox's PID 1, the
  // rest of the 256 KiB would otherwise be idle memory).
  thread_local std::unique_ptr<char[]> buffer(new char[kMaxMessage]);
  iovec iov[2] = {{&out.header, sizeof out.header}, {buffer.get(), kMaxMessage}};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  for (;;) {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | (dont_wait ? MSG_DONTWAIT : 0));
    if (n >= 0 || errno != EINTR) break;
  }
  if (n < 0) return -errno;
  for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS) {
      size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof fd);
        out.fds.push_back(fd);
      }
    }
  }
  if (n == 0) return 0;
  if (static_cast<size_t>(n) < sizeof out.header || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    for (int fd : out.fds) close(fd);
    out.fds.clear();
    return -EBADMSG;
  }
  out.payload.assign(buffer.get(), static_cast<size_t>(n) - sizeof out.header);
  return 1;
}

namespace {
void append_list(std::string& out, const std::vector<std::string>& items) {
  out += std::to_string(items.size());
  out.push_back('\0');
  for (const auto& item : items) {
    out += item;
    out.push_back('\0');
  }
}

bool take(std::string_view& in, std::string& out) {
  auto pos = in.find('\0');
  if (pos == std::string_view::npos) return false;
  out.assign(in.substr(0, pos));
  in.remove_prefix(pos + 1);
  return true;
}

bool take_list(std::string_view& in, std::vector<std::string>& out) {
  std::string count_text;
  if (!take(in, count_text) || count_text.empty() || count_text.size() > 6) return false;
  size_t count = 0;
  for (char c : count_text) {
    if (c < '0' || c > '9') return false;
    count = count * 10 + static_cast<size_t>(c - '0');
  }
  out.resize(count);
  for (auto& item : out)
    if (!take(in, item)) return false;
  return true;
}
}  // namespace

std::string encode(const SpawnRequest& req) {
  std::string out = req.cwd;
  out.push_back('\0');
  append_list(out, req.argv);
  append_list(out, req.env);
  if (!req.terminal.empty()) {
    out += req.terminal;
    out.push_back('\0');
  }
  return out;
}

bool decode(std::string_view payload, SpawnRequest& out) {
  if (!take(payload, out.cwd) || !take_list(payload, out.argv) || !take_list(payload, out.env) ||
      out.argv.empty())
    return false;
  out.terminal.clear();
  if (!payload.empty() && (!take(payload, out.terminal) || out.terminal.empty())) return false;
  return payload.empty();
}

}  // namespace sandboxd::runtime::protocol
