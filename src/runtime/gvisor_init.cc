#include "runtime/gvisor_init.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gvisor_command_cgroups.h"
#include "runtime/mount.h"
#include "runtime/net.h"
#include "runtime/protocol.h"
#include "runtime/seccomp.h"
#include "runtime/syscall_error.h"
#include "runtime/terminal.h"
#include "runtime/user.h"

namespace sandboxd::runtime {
namespace {

namespace proto = protocol;

constexpr uid_t kAgentId = 1000;
// The stream a polled descriptor stands for, besides protocol::kOutputStdout/kOutputStderr:
// a relayed process's stdin, polled for room.
constexpr int64_t kStdinStream = 3;
// And a listener (listen_inside), polled for connections to accept.
constexpr int64_t kListenerStream = 4;
// And a connection being made inside for the server (dial), polled until it is made.
constexpr int64_t kDialingStream = 5;

void write_file(const std::string& path, const char* text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw SyscallError("open(" + path + ", O_WRONLY)", errno);
  const ssize_t n = write(fd, text, std::strlen(text));
  const int err = errno;
  close(fd);
  if (n < 0) throw SyscallError("write(" + path + ", \"" + text + "\")", err);
}

[[noreturn]] void launch_failed(int control_fd, const std::string& what) {
  proto::send_message(control_fd, proto::Type::kSetupFailed, 0, 0, what);
  _exit(1);
}

// One command of the agent: the shell's pid (also its session) and its output pipes'
// read ends. Its whole tree is found by its cgroup (CommandCgroups).
// protocol::kEndFolderUsers, from inside: whether `path` (a /proc link's target, or a
// mapped file's) is `folder` or under it. gVisor may show a path that went away with
// " (deleted)" after it, and by now the folder has gone from the sandbox's view.
bool inside_folder(std::string_view path, std::string_view folder) {
  if (!path.starts_with(folder)) return false;
  if (path.size() == folder.size()) return true;
  const char next = path[folder.size()];
  return next == '/' || next == ' ';
}

std::string link_target(const std::string& path) {
  char target[4096];
  const ssize_t n = readlink(path.c_str(), target, sizeof target);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

// Calls `each` with every numeric entry of the folder (pids, tids, fds) until it says stop.
template <typename Each>
void for_each_number(const std::string& folder, Each each) {
  DIR* dir = opendir(folder.c_str());
  if (!dir) return;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    if (!each(std::string(entry->d_name))) break;
  }
  closedir(dir);
}

// Whether the process under `proc` (/proc/PID) uses `folder`: a thread's working
// directory or root (a thread made without CLONE_FS has its own), an open file, or a
// mapping of one of its files.
bool uses_folder(const std::string& proc, const std::string& folder) {
  bool uses = false;
  for_each_number(proc + "/task", [&](const std::string& tid) {
    const std::string task = proc + "/task/" + tid;
    uses = inside_folder(link_target(task + "/cwd"), folder) ||
           inside_folder(link_target(task + "/root"), folder);
    return !uses;
  });
  if (uses) return true;
  for_each_number(proc + "/fd", [&](const std::string& fd) {
    uses = inside_folder(link_target(proc + "/fd/" + fd), folder);
    return !uses;
  });
  if (uses) return true;
  FILE* maps = std::fopen((proc + "/maps").c_str(), "re");
  if (!maps) return false;
  char line[4352];
  while (!uses && std::fgets(line, sizeof line, maps)) {
    // "ADDRESS PERMS OFFSET DEV INODE   PATH": the first '/' starts the path.
    const char* path = std::strchr(line, '/');
    if (!path) continue;
    std::string_view mapped(path);
    if (mapped.ends_with('\n')) mapped.remove_suffix(1);
    uses = inside_folder(mapped, folder);
  }
  std::fclose(maps);
  return uses;
}

// SIGKILLs every process of the sandbox but PID 1 and the caller that uses `folder`.
// A few passes: a process ended in one may have forked a child that inherited its
// working directory in the folder just before. Returns how many were signalled.
int kill_folder_users(const std::string& folder) {
  int killed = 0;
  for (int pass = 0; pass < 3; ++pass) {
    int this_pass = 0;
    for_each_number("/proc", [&](const std::string& number) {
      const pid_t pid = static_cast<pid_t>(std::atoi(number.c_str()));
      if (pid > 1 && pid != getpid() && uses_folder("/proc/" + number, folder) && kill(pid, SIGKILL) == 0)
        ++this_pass;
      return true;
    });
    killed += this_pass;
    if (this_pass == 0) break;
  }
  return killed;
}

struct Command {
  uint32_t id = 0;
  pid_t pid = -1;
  int out = -1;
  int err = -1;
  // A long-lived process the server talks to (relayed): its pipes stay here and their
  // bytes travel as messages (protocol::kStdin, kOutput). Its entry lives until its exit
  // has been reported and both output pipes are at their end (a process it started may
  // hold them after it exits, as natively), so that a kill still finds its session.
  bool relayed = false;
  bool exited = false;
  int in = -1;                  // the write end of its stdin
  std::string stdin_pending;    // received, not yet taken by its pipe
  bool stdin_ended = false;     // the server closed its end: close `in` once pending is written
  size_t output_in_flight = 0;  // kOutput bytes sent and not yet acknowledged
  // A process on a terminal (protocol::kSpawnTerminal): `out` reads the terminal's
  // master and `in` (a duplicate of it) writes to it, relayed as a process's stdout and
  // stdin are; `err` only reads end of file (a terminal has one output).
  bool terminal = false;
  // PID 1's own descriptor of its slave, kept open until its output has ended: gVisor
  // drops what the terminal still holds for the master when the slave's last
  // descriptor closes, which would lose what a process wrote just before it exited.
  int slave = -1;
  // A network channel (protocol::kConnect): no process; `out` reads the connection and
  // `in` (a duplicate of it) writes to it, relayed as a process's stdout and stdin are.
  // It is forgotten once both directions have ended.
  bool channel = false;
};

// The most connections PID 1 relays at once; past it a new one is reset. (The server
// bounds a sandbox's connections lower: this only bounds PID 1's own table.)
constexpr size_t kMaxChannels = 1024;

class Agent {
 public:
  Agent(int control_fd, uint64_t max_open_files, uint64_t max_processes, bool over_slots)
      : control_(control_fd),
        max_open_files_(max_open_files),
        max_processes_(max_processes),
        awaiting_folders_(over_slots) {
    // The bounding set PID 1 was given (the bundle's few capabilities), read once: a
    // command's child drops these, and only these, from its own. (A capability out of
    // the set cannot come back into it; each drop is a round trip through the sentry,
    // a few dozen of them a measurable part of a warm command.)
    for (int cap = 0, last = read_last_cap(); cap <= last; ++cap)
      if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1) bounding_caps_.push_back(cap);
    // As the native tier's PID 1 (runtime/process.h): a command asking for /bin/bash runs
    // the image's statically linked bash when it has one. Under gVisor every mmap and open
    // of the dynamic loader is a round trip through the sentry, so this is most of what a
    // command costs beyond the fork and exec themselves. Looked up once, in the sandbox's
    // own root.
    for (const char* candidate : {"/usr/bin/bash-static", "/bin/bash-static"})
      if (access(candidate, X_OK) == 0) {
        static_bash_ = candidate;
        break;
      }
  }

  [[noreturn]] void serve() {
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, nullptr);
    const int sfd =
        static_cast<int>(check(signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK), "signalfd(SIGCHLD)"));
    mount_command_cgroups();
    // A sandbox over slots keeps it for the binds of its folders (attach_folders).
    if (!awaiting_folders_) give_up_sys_admin();
    make_command_filter();
    trim_devices();
    proto::send_message(control_, proto::Type::kReady, 0, 0, {});
    std::vector<pollfd> fds;
    // What each polled pipe is: (command id, stream), or id 0 for a pipe being drained.
    std::vector<std::pair<uint32_t, int64_t>> owners;
    for (;;) {
      fds.assign({{control_, POLLIN, 0}, {sfd, POLLIN, 0}});
      owners.assign(2, {0, 0});
      for (auto& [id, command] : commands_) {
        // A relayed process's output waits in its pipes while the server has a window's
        // worth unacknowledged (the process then waits on its pipe, as natively).
        const bool room = !command.relayed || command.output_in_flight < proto::kRelayWindow;
        if (command.out >= 0 && room) {
          fds.push_back({command.out, POLLIN, 0});
          owners.emplace_back(id, proto::kOutputStdout);
        }
        if (command.err >= 0 && room) {
          fds.push_back({command.err, POLLIN, 0});
          owners.emplace_back(id, proto::kOutputStderr);
        }
        if (command.in >= 0 && !command.stdin_pending.empty()) {
          fds.push_back({command.in, POLLOUT, 0});
          owners.emplace_back(id, kStdinStream);
        }
      }
      for (int fd : draining_) {
        fds.push_back({fd, POLLIN, 0});
        owners.emplace_back(0, 0);
      }
      for (int fd : listeners_) {
        fds.push_back({fd, POLLIN, 0});
        owners.emplace_back(0, kListenerStream);
      }
      for (auto [fd, id] : dialing_) {
        fds.push_back({fd, POLLOUT, 0});
        owners.emplace_back(0, kDialingStream);
      }
      if (poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        _exit(2);
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        auto [id, stream] = owners[i];
        if (id == 0 && stream == kListenerStream) {
          accept_connections(fds[i].fd);
        } else if (id == 0 && stream == kDialingStream) {
          finish_dial(fds[i].fd);
        } else if (id == 0) {
          discard(fds[i].fd);
        } else if (auto it = commands_.find(id); it != commands_.end()) {
          Command& command = it->second;
          if (stream == kStdinStream) {
            if (command.in == fds[i].fd) write_stdin(command);
          } else {
            int& fd = stream == proto::kOutputStdout ? command.out : command.err;
            if (fd == fds[i].fd && !forward(command, stream, fd, /*max_reads=*/4)) {
              close(fd);
              fd = -1;
              // A relayed stream's end is a message of its own (a plain command's is its exit).
              if (command.relayed) proto::send_message(control_, proto::Type::kOutput, id, stream, {});
            }
          }
          forget_if_done(id);
        }
      }
      if (fds[1].revents & POLLIN) {
        signalfd_siginfo info[4];
        while (read(sfd, info, sizeof info) > 0) {
        }
        reap();
      }
      end_idle_terminals();
      // Several messages a turn: a relayed connection's bytes come in many of them.
      for (int taken = 0; taken < 64 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)); ++taken) {
        proto::Message msg;
        const int rc = proto::receive_message(control_, msg, /*dont_wait=*/true);
        if (rc == 0 || (rc < 0 && rc != -EAGAIN)) {
          // The server is gone: so is everything of the sandbox (ending PID 1 ends the
          // container, and runsc with it).
          kill(-1, SIGKILL);
          _exit(0);
        }
        if (rc < 0) break;
        handle(msg);
      }
    }
  }

 private:
  void handle(proto::Message& msg) {
    for (int fd : msg.fds) close(fd);
    switch (msg.header.type) {
      case proto::Type::kSpawn:
        // Never a command over empty slots (nor while PID 1 still holds CAP_SYS_ADMIN).
        if (awaiting_folders_) {
          proto::send_message(control_, proto::Type::kSpawnFailed, msg.header.id, EAGAIN,
                              "the sandbox has no folders yet");
          break;
        }
        if (proto::spawn_on_terminal(msg.header.value))
          spawn_on_terminal(msg.header.id, msg.payload, proto::spawn_terminal_size(msg.header.value));
        else
          spawn(msg.header.id, msg.payload, proto::spawn_keeps_stdin(msg.header.value));
        break;
      case proto::Type::kResizeTerminal:
        resize_terminal(msg.header.id, proto::terminal_size_of(msg.header.value));
        break;
      case proto::Type::kKill:
        if (auto it = commands_.find(msg.header.id); it != commands_.end() && it->second.channel)
          reset_channel(msg.header.id);
        else
          kill_tree(msg.header.id);
        break;
      case proto::Type::kListen:
        listen_inside(msg.payload);
        break;
      case proto::Type::kDial:
        dial(msg.header.id, msg.payload);
        break;
      case proto::Type::kRestored:
        forget_the_old_server();
        break;
      case proto::Type::kEveryAddressLocal:
        // After a restore the addresses are there already (gVisor's stack was restored).
        if (every_address_local_) break;
        every_address_local_ = true;
        // As the server made them in the sandbox's namespace on the host: a connection to
        // an address PID 1 listens on is relayed, to any other refused at once (instead of
        // "no route"), and none leaves. Two halves: gVisor's stack takes a prefix on `lo`
        // as local, and a /0 is not an address.
        try {
          add_loopback_address("0.0.0.0", 1);
          add_loopback_address("128.0.0.0", 1);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "sandboxd-init: making every address local inside: %s\n", e.what());
        }
        break;
      case proto::Type::kEndFolderUsers:
        end_folder_users(msg.payload);
        break;
      case proto::Type::kAttachFolders:
        attach_folders();
        break;
      case proto::Type::kStdin:
        take_stdin(msg.header.id, msg.payload, msg.header.value == proto::kStdinEnd);
        break;
      case proto::Type::kOutputTaken:
        if (auto it = commands_.find(msg.header.id); it != commands_.end() && msg.header.value > 0) {
          const auto taken = static_cast<size_t>(msg.header.value);
          Command& command = it->second;
          command.output_in_flight = taken >= command.output_in_flight ? 0 : command.output_in_flight - taken;
        }
        break;
      default:
        break;
    }
  }

  // protocol::kAttachFolders: the container's folders are on the slots now, seen beneath
  // kSlotFolders (runsc's gofer walks the host's paths afresh below the folders it was
  // given). Each is bound onto its place, as the native tier's are (mount.cc); a bind
  // from ro/ keeps that mount's read-only (gVisor copies the flags, and its gofer refuses
  // writes there too). A bind that fails ends the sandbox: no command may run without
  // its folders, and the server starts another for the next one.
  void attach_folders() {
    if (!awaiting_folders_) return;  // (a second message changes nothing)
    const std::string slots = kSlotFolders;
    constexpr const char* workspace = "/home/agent/workspace";  // (sandbox.h's kWorkspacePath)
    const struct {
      std::string from;
      const char* to;
    } binds[] = {{slots + "/rw/workspace", workspace},
                 {slots + "/rw/outputs", "/mnt/user-data/outputs"},
                 {slots + "/ro/uploads", "/mnt/user-data/uploads"},
                 {slots + "/ro/skills", "/mnt/skills"}};
    try {
      // The workspace's place is in the home's tmpfs, the agent's (0755): PID 1 holds no
      // CAP_DAC_OVERRIDE, so it makes the folder as the agent (its effective uid for the
      // moment; its real and saved ones stay root, so root's capabilities come back).
      if (setresuid(-1, kAgentId, -1) != 0) throw SyscallError("setresuid(-1, 1000, -1)", errno);
      const int made = mkdir(workspace, 0755), mkdir_errno = errno;
      if (setresuid(-1, 0, -1) != 0) throw SyscallError("setresuid(-1, 0, -1)", errno);
      if (made != 0 && mkdir_errno != EEXIST)
        throw SyscallError(std::string("mkdir(") + workspace + ")", mkdir_errno);
      for (const auto& bind : binds)
        if (::mount(bind.from.c_str(), bind.to, nullptr, MS_BIND, nullptr) != 0)
          throw SyscallError("mount(" + bind.from + ", " + bind.to + ", MS_BIND)", errno);
      awaiting_folders_ = false;
      give_up_sys_admin();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sandboxd-init: binding the container's folders: %s\n", e.what());
      kill(-1, SIGKILL);
      _exit(1);
    }
  }

  // protocol::kEndFolderUsers: a folder was taken away from the sandbox (a skill that
  // came off), and its processes that still use it would go on reading it through what
  // they hold there. A child walks /proc and ends them: every entry it reads is a trip
  // to the sentry, and PID 1 goes on relaying meanwhile. The child is reaped as an
  // orphan is.
  void end_folder_users(const std::string& folder) {
    if (folder.size() < 2 || folder[0] != '/' || folder.back() == '/') return;
    const pid_t child = fork();
    if (child < 0) {
      std::fprintf(stderr, "sandboxd-init: ending the users of %s: %s\n", folder.c_str(),
                   describe_errno("fork", errno).c_str());
      return;
    }
    if (child > 0) return;
    const int killed = kill_folder_users(folder);
    if (killed > 0)
      std::fprintf(stderr, "sandboxd-init: %s was taken away: ended %d process(es) still using it\n",
                   folder.c_str(), killed);
    _exit(0);
  }

  // Restored from a checkpoint (protocol::kRestored): the server that knew this agent's
  // channels, listeners and unacknowledged bytes is gone. Connections in flight cannot
  // be carried on (the server's ends went with it): each is reset, as a connection is
  // whose peer restarted. The listeners close (the new server asks for them again); a
  // relayed process keeps its pipes and whatever waits in them, and its window starts
  // empty (what was in flight to the old server is lost, as output to a closed reader).
  void forget_the_old_server() {
    for (int fd : listeners_) close(fd);
    listeners_.clear();
    for (auto& [fd, id] : dialing_) close(fd);
    dialing_.clear();
    std::vector<uint32_t> channels;
    for (auto& [id, command] : commands_)
      if (command.channel) channels.push_back(id);
    for (uint32_t id : channels) reset_channel(id);
    std::string held;
    for (auto& [id, command] : commands_) {
      command.output_in_flight = 0;
      held += std::to_string(id) + " " + std::to_string(command.pid) + " " +
              (command.terminal  ? "2"
               : command.relayed ? "1"
                                 : "0") +
              "\n";
    }
    proto::send_message(control_, proto::Type::kReady, 0, 0, held);
  }

  // Bytes for a relayed process's stdin: written on as its pipe takes them (the server
  // sends at most proto::kRelayWindow unacknowledged, so what waits here is bounded).
  void take_stdin(uint32_t id, const std::string& bytes, bool end) {
    auto it = commands_.find(id);
    if (it == commands_.end() || !it->second.relayed) return;
    Command& command = it->second;
    if (command.in < 0) {  // its stdin is closed already: taken, and dropped
      if (!bytes.empty())
        proto::send_message(control_, proto::Type::kStdinTaken, id, static_cast<int64_t>(bytes.size()), {});
      return;
    }
    command.stdin_pending.append(bytes);
    command.stdin_ended = command.stdin_ended || end;
    write_stdin(command);
  }

  void write_stdin(Command& command) {
    size_t taken = 0;
    while (!command.stdin_pending.empty()) {
      const ssize_t n = write(command.in, command.stdin_pending.data(), command.stdin_pending.size());
      if (n > 0) {
        command.stdin_pending.erase(0, static_cast<size_t>(n));
        taken += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;  // its pipe is full: polled for room
      // EPIPE: nothing reads its stdin any more; what waits is dropped, as natively.
      taken += command.stdin_pending.size();
      command.stdin_pending.clear();
      command.stdin_ended = true;
    }
    if (command.stdin_ended && command.stdin_pending.empty()) {
      // A channel's end of writing is the connection's (its reading side may go on).
      if (command.channel) shutdown(command.in, SHUT_WR);
      close(command.in);
      command.in = -1;
    }
    if (taken > 0)
      proto::send_message(control_, proto::Type::kStdinTaken, command.id, static_cast<int64_t>(taken), {});
  }

  // gVisor's terminal master never reads the hang-up Linux's reads (EIO once no process
  // holds the slave), so a terminal's output is ended here instead: once its process has
  // exited, nothing of its tree is left (its cgroup is gone: every process that could
  // hold the slave was in it; without cgroupfs, at the process's exit), and the server
  // has what the terminal held. Its master then closes (forget_if_done), as a terminal
  // window's would. Called at the end of each turn of the loop: a reaped process, an
  // acknowledgement that makes room and a drained master all come through it.
  void end_idle_terminals() {
    std::vector<uint32_t> ended;
    for (auto& [id, command] : commands_) {
      if (!command.terminal || !command.exited || command.out < 0 || command_cgroups_.holds(id)) continue;
      bool drained = false;
      // Not drained: bytes wait past the window (sent as it opens), or past 4 reads.
      if (forward(command, proto::kOutputStdout, command.out, /*max_reads=*/4, &drained) && !drained)
        continue;
      close(command.out);
      command.out = -1;
      close(command.slave);
      command.slave = -1;
      proto::send_message(control_, proto::Type::kOutput, id, proto::kOutputStdout, {});
      ended.push_back(id);
    }
    for (uint32_t id : ended) forget_if_done(id);
  }

  // Once a relayed process has exited and its output is at its end, it is forgotten (a
  // plain command is forgotten at its exit, reap).
  void forget_if_done(uint32_t id) {
    auto it = commands_.find(id);
    if (it == commands_.end()) return;
    Command& command = it->second;
    if (!command.relayed || !command.exited || command.out >= 0 || command.err >= 0) return;
    if (command.channel && command.in >= 0) return;
    if (command.in >= 0) close(command.in);
    if (command.slave >= 0) close(command.slave);
    if (command.channel) --channels_;
    commands_.erase(it);
  }

  // Sends what the pipe holds now, at most `max_reads` chunks (a writer that never stops
  // must not keep the agent from its other pipes; a relayed process's stops at its
  // window). Returns false at end of file; `drained` (when given) is set when the pipe
  // had nothing more to read.
  bool forward(Command& command, int64_t stream, int fd, int max_reads, bool* drained = nullptr) {
    static std::array<char, 64 * 1024> buffer;
    for (int reads = 0; reads < max_reads; ++reads) {
      // A relayed process's bytes in flight never pass the window (the server keeps no more).
      size_t room = buffer.size();
      if (command.relayed) {
        if (command.output_in_flight >= proto::kRelayWindow) return true;
        room = std::min(room, proto::kRelayWindow - command.output_in_flight);
      }
      const ssize_t n = read(fd, buffer.data(), room);
      if (n > 0) {
        proto::send_message(control_, proto::Type::kOutput, command.id, stream,
                            std::string_view(buffer.data(), static_cast<size_t>(n)));
        if (command.relayed) command.output_in_flight += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;

      if (n < 0 && errno == EAGAIN && drained) *drained = true;
      return n < 0 && errno == EAGAIN;
    }
    return true;
  }

  // A finished command's pipe still held by a background process: read and dropped (as
  // the native tier does), so that the writer never blocks on it, until it closes.
  void discard(int fd) {
    static std::array<char, 64 * 1024> buffer;
    const ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) return;
    close(fd);
    std::erase(draining_, fd);
  }

  // Listens on ADDRESS:PORT inside gVisor, as the server listens in the sandbox's network
  // namespace. What the sandbox reaches is decided there, on the host: a connection here
  // only becomes one to the same address in that namespace, so nothing PID 1 is told (or
  // made to do) reaches further.
  void listen_inside(const std::string& where) {
    const size_t colon = where.rfind(':');
    if (colon == std::string::npos) return;
    const std::string address = where.substr(0, colon);
    const unsigned long port = std::strtoul(where.c_str() + colon + 1, nullptr, 10);
    try {
      if (port > 0 && port <= 65535)
        listeners_.push_back(open_listener(address, static_cast<uint16_t>(port)));
    } catch (const std::exception& e) {
      // (The server's own listener is there: only this sandbox's reaching it is lost.)
      std::fprintf(stderr, "sandboxd-init: listening on %s inside: %s\n", where.c_str(), e.what());
    }
  }

  // Each connection made to a listener becomes a channel: announced with the address it
  // was made to, its bytes relayed from then on (the server's may take a moment to connect;
  // what the sandbox sends meanwhile waits in flight, within the window).
  void accept_connections(int listener) {
    for (int accepted = 0; accepted < 16; ++accepted) {
      const int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      sockaddr_in local{};
      socklen_t size = sizeof local;
      char address[INET_ADDRSTRLEN] = {};
      const int writer = channels_ < kMaxChannels ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
      if (writer < 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) != 0 ||
          !inet_ntop(AF_INET, &local.sin_addr, address, sizeof address)) {
        if (writer >= 0) close(writer);
        reset(fd);
        continue;
      }
      uint32_t id = 0;
      do {
        id = proto::kChannelIdBit | (next_channel_++ & ~proto::kChannelIdBit);
      } while (commands_.count(id));
      add_channel(id, fd, writer);
      proto::send_message(control_, proto::Type::kConnect, id, 0,
                          std::string(address) + ":" + std::to_string(ntohs(local.sin_port)));
    }
  }

  // A connection into the sandbox, made here for the server (kDial): its answer
  // (kDialed) once it is made or refused; a channel from then on.
  void dial(uint32_t id, const std::string& where) {
    sockaddr_in destination{};
    destination.sin_family = AF_INET;
    const size_t colon = where.rfind(':');
    const unsigned long port =
        colon == std::string::npos ? 0 : std::strtoul(where.c_str() + colon + 1, nullptr, 10);
    if ((id & proto::kChannelIdBit) || commands_.count(id) || port == 0 || port > 65535 ||
        inet_pton(AF_INET, where.substr(0, colon).c_str(), &destination.sin_addr) != 1) {
      proto::send_message(control_, proto::Type::kDialed, id, EINVAL, {});
      return;
    }
    destination.sin_port = htons(static_cast<uint16_t>(port));
    const int fd =
        channels_ < kMaxChannels ? socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0) : -1;
    if (fd < 0) {
      proto::send_message(control_, proto::Type::kDialed, id,
                          fd < 0 && channels_ < kMaxChannels ? errno : EMFILE, {});
      return;
    }
    if (connect(fd, reinterpret_cast<sockaddr*>(&destination), sizeof destination) == 0) {
      dialed(id, fd, 0);
    } else if (errno == EINPROGRESS) {
      dialing_[fd] = id;  // polled until it is writable (made or refused)
    } else {
      dialed(id, fd, errno);
    }
  }

  void finish_dial(int fd) {
    auto it = dialing_.find(fd);
    if (it == dialing_.end()) return;
    const uint32_t id = it->second;
    dialing_.erase(it);
    int error = 0;
    socklen_t size = sizeof error;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
    dialed(id, fd, error);
  }

  void dialed(uint32_t id, int fd, int error) {
    const int writer = error == 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (error == 0 && writer < 0) error = errno;
    if (error != 0) {
      close(fd);
      proto::send_message(control_, proto::Type::kDialed, id, error, {});
      return;
    }
    add_channel(id, fd, writer);
    proto::send_message(control_, proto::Type::kDialed, id, 0, {});
  }

  void add_channel(uint32_t id, int fd, int writer) {
    Command command{id, -1, fd, -1};
    command.relayed = true;
    command.exited = true;  // no process: it ends when both directions have
    command.channel = true;
    command.in = writer;
    commands_[id] = std::move(command);
    ++channels_;
  }

  // The server could not reach what the connection was made to (or gave up on it): the
  // sandbox sees a reset, as a refused connection natively.
  void reset_channel(uint32_t id) {
    auto it = commands_.find(id);
    if (it == commands_.end() || !it->second.channel) return;
    Command& command = it->second;
    // Either descriptor may be the last one left (the sandbox may have ended its writing):
    // the reset is set on the socket through both before either is closed.
    if (command.in >= 0) reset(command.in);
    if (command.out >= 0) reset(command.out);
    commands_.erase(it);
    --channels_;
  }

  static void reset(int fd) {
    linger abort{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
    close(fd);
  }

  void spawn(uint32_t id, const std::string& payload, bool keep_stdin) {
    proto::SpawnRequest request;
    if (!proto::decode(payload, request) || request.argv.empty()) {
      proto::send_message(control_, proto::Type::kSpawnFailed, id, EINVAL, "malformed spawn request");
      return;
    }
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
      proto::send_message(control_, proto::Type::kSpawnFailed, id, errno, describe_errno("pipe2", errno));
      return;
    }
    if (pipe2(err, O_CLOEXEC) != 0) {
      const int e = errno;
      close(out[0]);
      close(out[1]);
      proto::send_message(control_, proto::Type::kSpawnFailed, id, e, describe_errno("pipe2", e));
      return;
    }
    // A process the server talks to reads its stdin from a pipe whose write end stays
    // here (a plain command's stdin is /dev/null).
    int in[2] = {-1, -1};
    if (keep_stdin && pipe2(in, O_CLOEXEC) != 0) {
      const int e = errno;
      for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
      proto::send_message(control_, proto::Type::kSpawnFailed, id, e, describe_errno("pipe2", e));
      return;
    }
    std::string cgroup_error;
    const std::string cgroup_procs = command_cgroups_.create(id, &cgroup_error);
    if (command_cgroups_.available() && cgroup_procs.empty()) {
      // A command whose tree a timeout could not find is not started.
      for (int fd : {out[0], out[1], err[0], err[1], in[0], in[1]})
        if (fd >= 0) close(fd);
      proto::send_message(control_, proto::Type::kSpawnFailed, id, EAGAIN, cgroup_error);
      return;
    }
    const pid_t pid = fork();
    if (pid == 0) run_child(request, in[0], out[1], err[1], -1, cgroup_procs);
    const int fork_errno = errno;
    close(out[1]);
    close(err[1]);
    if (in[0] >= 0) close(in[0]);
    if (pid < 0) {
      close(out[0]);
      close(err[0]);
      if (in[1] >= 0) close(in[1]);
      command_cgroups_.ended(id);
      proto::send_message(control_, proto::Type::kSpawnFailed, id, fork_errno,
                          describe_errno("fork", fork_errno));
      return;
    }
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    Command command{id, pid, out[0], err[0]};
    if (keep_stdin) {
      fcntl(in[1], F_SETFL, O_NONBLOCK);
      command.relayed = true;
      command.in = in[1];
      // Its pid at once (the server waits for it); no descriptors: they cannot leave gVisor.
      proto::send_message(control_, proto::Type::kSpawned, id, pid, {});
    }
    commands_[id] = std::move(command);
    by_pid_[pid] = id;
  }

  // A process on a terminal (protocol::kSpawnTerminal). The terminal is gVisor's own: its
  // /dev/ptmx and /dev/pts are the devpts instance the sentry mounts for this sandbox
  // (the OCI spec in gvisor_launcher.cc mounts none of the host's), so the terminal,
  // its number and its line discipline exist only inside gVisor, and the host never
  // gives the sandbox a terminal of its own. Its master stays here (a descriptor cannot
  // leave gVisor) and is relayed as a long-lived process's pipes are; the server sets
  // its window size through protocol::kResizeTerminal. A TIOCSTI (were the seccomp filter
  // not to refuse it) could only type into this sandbox's own terminal.
  void spawn_on_terminal(uint32_t id, const std::string& payload, const proto::TerminalSize& size) {
    proto::SpawnRequest request;
    if (!proto::decode(payload, request) || request.argv.empty() || !request.terminal.empty()) {
      proto::send_message(control_, proto::Type::kSpawnFailed, id, EINVAL, "malformed spawn request");
      return;
    }
    // Unlocked, sized, its slave given to the agent (mode 0620), as on the native tier.
    OpenedTerminal opened;
    int slave = -1;
    std::string error;
    if (const int rc = open_terminal_as_agent(size, opened, slave, error); rc < 0) {
      proto::send_message(control_, proto::Type::kSpawnFailed, id, -rc, error);
      return;
    }
    const int master = opened.master;
    int err[2] = {-1, -1};
    int writer = -1;
    auto refuse = [&](const std::string& call) {
      const int e = errno;
      for (int fd : {master, slave, err[0], err[1], writer})
        if (fd >= 0) close(fd);
      proto::send_message(control_, proto::Type::kSpawnFailed, id, e, describe_errno(call, e));
    };
    if (pipe2(err, O_CLOEXEC) != 0) return refuse("pipe2");
    // The relay writes what is typed through a descriptor of its own (its end closes
    // on its own, as a pipe's write end would) and reads the output through the master.
    writer = fcntl(master, F_DUPFD_CLOEXEC, 0);
    if (writer < 0) return refuse("fcntl(terminal master, F_DUPFD_CLOEXEC)");
    std::string cgroup_error;
    const std::string cgroup_procs = command_cgroups_.create(id, &cgroup_error);
    if (command_cgroups_.available() && cgroup_procs.empty()) {
      for (int fd : {master, slave, err[0], err[1], writer}) close(fd);
      proto::send_message(control_, proto::Type::kSpawnFailed, id, EAGAIN, cgroup_error);
      return;
    }
    const pid_t pid = fork();
    if (pid == 0) {
      close(master);
      close(writer);
      run_child(request, -1, -1, err[1], slave, cgroup_procs);
    }
    const int fork_errno = errno;
    close(err[1]);
    err[1] = -1;
    if (pid < 0) {
      command_cgroups_.ended(id);
      errno = fork_errno;
      return refuse("fork");
    }
    // (One open file: O_NONBLOCK holds for the writer too.)
    fcntl(master, F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    Command command{id, pid, master, err[0]};
    command.relayed = true;
    command.terminal = true;
    command.in = writer;
    command.slave = slave;
    proto::send_message(control_, proto::Type::kSpawned, id, pid, {});
    commands_[id] = std::move(command);
    by_pid_[pid] = id;
  }

  // Opens a terminal for the agent: its master (`opened`) and its slave (`slave`), both
  // close-on-exec. gVisor's devpts gives a new terminal's slave to the ids that open
  // /dev/ptmx (mode 0600), and PID 1 holds no CAP_CHOWN or CAP_DAC_OVERRIDE to give it
  // away or open it afterwards; so PID 1 takes the agent's effective ids for these few
  // calls and its own back. Its real and saved ids stay root meanwhile, so no process of
  // the agent may signal or trace it, and it has no other thread that could act with
  // them. The slave is opened here and inherited by the child, so that it is open from
  // before the child runs until the process's session lets go of it (O_NOCTTY: never
  // PID 1's controlling terminal). 0 or -errno with `error` naming the failed call.
  int open_terminal_as_agent(const proto::TerminalSize& size, OpenedTerminal& opened, int& slave,
                             std::string& error) {
    if (setegid(kAgentId) != 0) {
      const int e = errno;
      error = describe_errno("setegid(1000)", e);
      return -e;
    }
    if (seteuid(kAgentId) != 0) {
      const int e = errno;
      error = describe_errno("seteuid(1000)", e);
      become_root_again();
      return -e;
    }
    int rc = open_terminal(size, kAgentId, kAgentId, opened, error);
    // Output processing as Linux's default terminal has it (tty_std_termios: OPOST|ONLCR,
    // "\n" written as "\r\n"), which gVisor's new terminal lacks: a terminal program
    // expects the same screen on both tiers.
    termios modes{};
    if (rc == 0 && tcgetattr(opened.master, &modes) == 0 &&
        (modes.c_oflag & (OPOST | ONLCR)) != (OPOST | ONLCR)) {
      modes.c_oflag |= OPOST | ONLCR;
      tcsetattr(opened.master, TCSANOW, &modes);
    }
    if (rc == 0) {
      slave = open(opened.slave_path.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC);
      if (slave < 0) {
        rc = -errno;
        error = describe_errno("open(" + opened.slave_path + ", O_RDWR|O_NOCTTY)", -rc);
        close(opened.master);
        opened.master = -1;
      }
    }
    become_root_again();
    return rc;
  }

  // Back to root's effective ids (and so its capabilities) after open_terminal_as_agent;
  // a PID 1 that cannot is of no use to the sandbox, which ends with it.
  static void become_root_again() {
    if (seteuid(0) != 0 || setegid(0) != 0) {
      std::fprintf(stderr, "sandboxd-init: %s\n", describe_errno("seteuid(0)/setegid(0)", errno).c_str());
      _exit(2);
    }
    // A change of ids makes a process dumpable again: PID 1 never is (run_gvisor_agent).
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
      std::fprintf(stderr, "sandboxd-init: %s\n", describe_errno("prctl(PR_SET_DUMPABLE, 0)", errno).c_str());
      _exit(2);
    }
  }

  // A new window size for a process's terminal (protocol::kResizeTerminal): the kernel
  // (the sentry) signals SIGWINCH to the terminal's foreground process group. Anything
  // else (no such process, one on pipes, a terminal whose master is closed) is ignored:
  // the server checks what it asks for, and a process may end meanwhile.
  void resize_terminal(uint32_t id, const proto::TerminalSize& size) {
    auto it = commands_.find(id);
    if (it == commands_.end() || !it->second.terminal) return;
    const int master = it->second.out >= 0 ? it->second.out : it->second.in;
    if (master < 0) return;
    if (const int rc = set_terminal_size(master, size); rc < 0) {
      std::fprintf(
          stderr, "sandboxd-init: %s\n",
          describe_errno("ioctl(terminal master of command " + std::to_string(id) + ", TIOCSWINSZ)", -rc)
              .c_str());
      return;
    }
    // Linux's resize signals the terminal's foreground process group (tty_do_resize);
    // gVisor's sets the size only, so PID 1 sends the SIGWINCH itself (CAP_KILL). To that
    // group where the terminal names it; gVisor names it only to a process of the
    // terminal's own session, so there to every process of the session (the terminal's
    // process is its leader): a background job that has no handler ignores SIGWINCH, its
    // default, and one that has one reads the same new size. Never a process of another
    // command's session.
    pid_t foreground = 0;
    if (ioctl(master, TIOCGPGRP, &foreground) == 0 && foreground > 1)
      kill(-foreground, SIGWINCH);
    else
      signal_session_members(it->second.pid, SIGWINCH);
  }

  // The command's child: in its command's cgroup (`cgroup_procs`, empty: none) and its
  // own session, so that kill_tree finds its whole tree; the agent's uid with no
  // capability left in any set, then bash.
  [[noreturn]] void run_child(const proto::SpawnRequest& request, int in, int out, int err, int terminal,
                              const std::string& cgroup_procs) {
    auto fail = [err](const std::string& what) {
      const std::string line = "sandboxd: " + what + "\n";
      if (write(err, line.data(), line.size()) < 0) _exit(126);
      _exit(126);
    };
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    // Still root: moving into the cgroup takes root's write access to it, which the
    // agent's uid has not (so no process of the command can move out).
    if (!cgroup_procs.empty())
      if (const int e = CommandCgroups::join(cgroup_procs); e != 0)
        fail(describe_errno("joining the command's cgroup (" + cgroup_procs + ")", e));
    setsid();
    if (terminal >= 0) {
      // The session this child leads has no controlling terminal yet: the slave PID 1
      // opened becomes it (TIOCSCTTY, no steal), and its stdin, stdout and stderr, so that
      // bash's job control, isatty and SIGWINCH work as on a login (command_child.cc does
      // the same on the native tier). `err` stays the pipe for this setup's failures and
      // closes at execve: the server reads its end, a terminal has one output.
      if (ioctl(terminal, TIOCSCTTY, 0) != 0)
        fail(describe_errno("ioctl(terminal slave, TIOCSCTTY, 0)", errno));
      for (int target = 0; target <= 2; ++target)
        if (dup2(terminal, target) < 0)
          fail(describe_errno("dup2(terminal slave, " + std::to_string(target) + ")", errno));
    } else {
      const int stdin_fd = in >= 0 ? in : open("/dev/null", O_RDONLY);
      if (stdin_fd < 0 || dup2(stdin_fd, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        fail(describe_errno("redirecting stdio", errno));
    }
    if (max_open_files_ > 0) {
      rlimit limit{max_open_files_, max_open_files_};
      if (setrlimit(RLIMIT_NOFILE, &limit) != 0) fail(describe_errno("setrlimit(RLIMIT_NOFILE)", errno));
    }
    // The sandbox's pids limit, counted by gVisor for the agent's uid: it stops a fork bomb
    // inside, before the host's pids limit (which also counts the sentry's threads) is hit.
    if (max_processes_ > 0) {
      rlimit limit{max_processes_, max_processes_};
      if (setrlimit(RLIMIT_NPROC, &limit) != 0) fail(describe_errno("setrlimit(RLIMIT_NPROC)", errno));
    }
    // Out of the bounding set first (that needs CAP_SETPCAP, still held), so that no
    // exec can give a capability back; the uid change then clears the other sets.
    for (const int cap : bounding_caps_)
      if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
        fail(describe_errno("prctl(PR_CAPBSET_DROP, " + std::to_string(cap) + ")", errno));
    if (setgroups(0, nullptr) != 0) fail(describe_errno("setgroups(0)", errno));
    if (setresgid(kAgentId, kAgentId, kAgentId) != 0) fail(describe_errno("setresgid(1000)", errno));
    if (setresuid(kAgentId, kAgentId, kAgentId) != 0) fail(describe_errno("setresuid(1000)", errno));
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
      fail(describe_errno("prctl(PR_SET_NO_NEW_PRIVS)", errno));
    if (chdir(request.cwd.c_str()) != 0) fail(describe_errno("chdir(" + request.cwd + ")", errno));
    std::vector<char*> argv, env;
    for (const auto& arg : request.argv) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    for (const auto& var : request.env) env.push_back(const_cast<char*>(var.c_str()));
    env.push_back(nullptr);
    // The native tier's filter, last before execve as there (command_child.cc).
    const char* failed_step = nullptr;
    if (const int rc = apply_seccomp(command_filter_, &failed_step); rc != 0)
      fail(describe_errno(failed_step ? failed_step : "seccomp", -rc));
    // argv stays as asked ($0 is /bin/bash either way).
    const char* program = static_bash_ != nullptr && request.argv[0] == "/bin/bash" ? static_bash_ : argv[0];
    execve(program, argv.data(), env.data());
    fail(describe_errno(std::string("execve(") + program + ")", errno));
    _exit(126);
  }

  void reap() {
    for (;;) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) {
        // A background process that outlived its command may have been the last of it.
        command_cgroups_.remove_empty();
        return;
      }
      auto known = by_pid_.find(pid);
      if (known == by_pid_.end()) continue;  // an orphan re-parented to PID 1
      const uint32_t id = known->second;
      by_pid_.erase(known);
      // Its cgroup goes once its background processes (if any) have ended too.
      command_cgroups_.ended(id);
      auto it = commands_.find(id);
      if (it == commands_.end()) continue;
      if (it->second.relayed) {
        // Its output goes on streaming until its pipes' end, independently of this.
        it->second.exited = true;
        proto::send_message(control_, proto::Type::kExited, id, status, {});
        forget_if_done(id);
        continue;
      }
      Command command = it->second;
      commands_.erase(it);
      // What the shell wrote before it exited is in its pipes: sent before the exit.
      // What a background process writes afterwards is not owed to this command.
      for (auto [fd, stream] :
           {std::pair{command.out, proto::kOutputStdout}, {command.err, proto::kOutputStderr}}) {
        if (fd < 0) continue;
        if (forward(command, stream, fd, /*max_reads=*/64))
          draining_.push_back(fd);
        else
          close(fd);
      }
      proto::send_message(control_, proto::Type::kExited, id, status, {});
    }
  }

  // Kills every process of the command's cgroup, the shell's and every descendant's,
  // one that made a session of its own or was re-parented to PID 1 included, until none
  // is left. The session is killed too: where gVisor mounted no cgroupfs (an older
  // runsc) it is what finds the tree, and a process that called setsid() escapes it.
  void kill_tree(uint32_t id) {
    auto it = commands_.find(id);
    if (it == commands_.end()) return;
    command_cgroups_.kill_all(id);
    const pid_t session = it->second.pid;
    for (int round = 0; round < 100; ++round) {
      kill(-session, SIGKILL);
      if (signal_session_members(session, SIGKILL) == 0) break;
    }
    proto::send_message(control_, proto::Type::kKilled, id, 0, {});
  }

  // Sends `signal` to every live process of `session`; returns how many there were.
  static int signal_session_members(pid_t session, int signal) {
    DIR* dir = opendir("/proc");
    if (!dir) return 0;
    int found = 0;
    while (dirent* entry = readdir(dir)) {
      char* end = nullptr;
      const long pid = std::strtol(entry->d_name, &end, 10);
      if (pid <= 1 || *end != '\0') continue;
      char path[64];
      std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
      const int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      char stat[512];
      const ssize_t n = read(fd, stat, sizeof stat - 1);
      close(fd);
      if (n <= 0) continue;
      stat[n] = '\0';
      // After the command name's closing parenthesis: state ppid pgrp session.
      const char* rest = std::strrchr(stat, ')');
      char state = 0;
      long ppid = 0, pgrp = 0, sid = 0;
      if (!rest || std::sscanf(rest + 1, " %c %ld %ld %ld", &state, &ppid, &pgrp, &sid) != 4) continue;
      if (sid != session || state == 'Z' || state == 'X') continue;
      ++found;
      kill(static_cast<pid_t>(pid), signal);
    }
    closedir(dir);
    return found;
  }

  // gVisor's cgroupfs at kCommandCgroups, each command in a cgroup of its own there; a
  // failed mount leaves the agent killing by session (said on its stderr, runsc's log).
  void mount_command_cgroups() {
    try {
      command_cgroups_.mount(kCommandCgroups);
    } catch (const std::exception& e) {
      std::fprintf(stderr,
                   "sandboxd-init: no cgroups inside gVisor (%s): a timeout or kill ends a command's "
                   "session only\n",
                   e.what());
    }
  }

  // The native tier's seccomp filter (seccomp.h), built here once and installed in every
  // command, so that what a sandbox may ask of its kernel is the same on both tiers:
  // the sentry answers the calls it lets through, but a new user namespace, a keyring
  // or a terminal injection is refused inside gVisor too, and a sentry bug behind one
  // of those calls is one wall further away. A filter that cannot be built fails the
  // sandbox's start (a kSetupFailed), never a sandbox without it.
  void make_command_filter() { command_filter_ = build_seccomp_program(); }

  // The native tier's /dev (mount.cc): gVisor's also has fuse and net/tun, the sentry's
  // own devices, which commands could not use without the capabilities they lack; they
  // are removed so that a sandbox sees the same /dev on both tiers. (PID 1 owns gVisor's
  // /dev; what is not there is left alone.)
  static void trim_devices() {
    for (const char* device : {"/dev/fuse", "/dev/net/tun"})
      if (unlink(device) != 0 && errno != ENOENT)
        std::fprintf(stderr, "sandboxd-init: %s\n",
                     describe_errno(std::string("unlink(") + device + ")", errno).c_str());
    if (rmdir("/dev/net") != 0 && errno != ENOENT)
      std::fprintf(stderr, "sandboxd-init: %s\n", describe_errno("rmdir(/dev/net)", errno).c_str());
  }

  int control_;
  SeccompProgram command_filter_;
  CommandCgroups command_cgroups_;
  uint64_t max_open_files_;
  uint64_t max_processes_;
  bool awaiting_folders_;              // over slots, until attach_folders
  std::vector<int> bounding_caps_;     // PID 1's bounding set at its start
  const char* static_bash_ = nullptr;  // the image's bash-static, if any
  std::map<uint32_t, Command> commands_;
  std::map<pid_t, uint32_t> by_pid_;
  std::vector<int> draining_;
  std::vector<int> listeners_;       // inside gVisor (listen_inside)
  std::map<int, uint32_t> dialing_;  // connections being made inside (dial), by descriptor
  uint32_t next_channel_ = 1;
  size_t channels_ = 0;
  bool every_address_local_ = false;  // kEveryAddressLocal done
};

// PID 1 of runsc's PID namespace: starts runsc with the control socket as its stdin
// (the container's PID 1 inherits it as a host descriptor), keeps no copy of the socket
// (so that either end sees the other close), reaps whatever is re-parented to it, and
// exits with runsc's status once nothing is left.
[[noreturn]] void run_reaper(int control_fd, char** runsc_argv) {
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    launch_failed(control_fd, describe_errno("mount(proc, /proc) in runsc's PID namespace", errno));
  const pid_t runsc = fork();
  if (runsc < 0) _exit(126);
  if (runsc == 0) {
    if (dup2(control_fd, 0) < 0) _exit(126);
    close(control_fd);
    execv(runsc_argv[0], runsc_argv);
    std::fprintf(stderr, "sandboxd-init: %s\n",
                 describe_errno(std::string("execv(") + runsc_argv[0] + ")", errno).c_str());
    _exit(127);
  }
  close(control_fd);
  int runsc_status = 0;
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: nothing left
    }
    if (pid == runsc) runsc_status = status;
  }
  _exit(WIFEXITED(runsc_status) ? WEXITSTATUS(runsc_status) : 128 + WTERMSIG(runsc_status));
}

}  // namespace

int run_gvisor_launch(int argc, char** argv) {
  constexpr int kControlFd = 3;
  if (fcntl(kControlFd, F_GETFD) < 0) {
    std::fprintf(stderr, "sandboxd-init: started by sandboxd with its control socket on fd 3\n");
    return 2;
  }
  close_range(kControlFd + 1, ~0U, 0);
  // If the server dies while the sandbox is being launched, so does the launcher.
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  int separator = 2;
  while (separator < argc && std::strcmp(argv[separator], "--") != 0) ++separator;
  if (separator + 1 >= argc)
    launch_failed(kControlFd, "sandboxd-init --gvisor-launch: no runsc command line");
  // The sandbox's listeners (ADDRESS:PORT after --listen=), opened below in its namespace.
  constexpr std::string_view kListen = "--listen=";
  std::vector<std::pair<std::string, uint16_t>> listen_on;
  std::string service_dir;
  std::vector<std::string> keep;
  try {
    for (int i = 2; i < separator; ++i) {
      const std::string_view arg = argv[i];
      if (arg.starts_with(kServiceDirArg)) {
        service_dir = arg.substr(std::string_view(kServiceDirArg).size());
        continue;
      }
      if (arg.starts_with(kKeepArg)) {
        keep.emplace_back(arg.substr(std::string_view(kKeepArg).size()));
        continue;
      }
      if (arg.starts_with(kListen)) {
        const std::string_view where = arg.substr(kListen.size());
        const size_t colon = where.rfind(':');
        const unsigned long port =
            colon == std::string_view::npos
                ? 0
                : std::strtoul(std::string(where.substr(colon + 1)).c_str(), nullptr, 10);
        if (port == 0 || port > 65535)
          launch_failed(kControlFd, "sandboxd-init --gvisor-launch: bad listener " + std::string(where));
        listen_on.emplace_back(std::string(where.substr(0, colon)), static_cast<uint16_t>(port));
        continue;
      }
      // runsc and every process it starts (the sentry, the gofer) count against the
      // sandbox's cgroups: its memory, pids and CPU limits hold for the whole of gVisor.
      write_file(std::string(argv[i]) + "/cgroup.procs", "0");
    }
  } catch (const std::exception& e) {
    launch_failed(kControlFd, e.what());
  }
  // Under memory pressure the kernel kills sandboxes first, never the server (as the
  // native tier's PID 1 does); runsc's sentry and gofer inherit it.
  if (int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); fd >= 0) {
    if (write(fd, "1000", 4) != 4) std::fprintf(stderr, "sandboxd-init: cannot raise oom_score_adj\n");
    close(fd);
  }
  // A PID namespace of runsc's own, whose init (run_reaper) the server sees as PID 1:
  // when it is killed, the kernel kills runsc, the sentry and the gofer with it and
  // reaps them inside, so nothing of runsc is ever left to the server to reap. Its own
  // mount namespace, for a /proc of that PID namespace (runsc writes its children's
  // uid_map by the pids it sees). And the sandbox's network namespace, as the native
  // tier's: only `lo`, no route out, and the listeners below on it. The sandbox itself
  // runs on gVisor's own network stack (--network=none); its PID 1 relays each
  // connection made there to the server, which makes it to the same address in this
  // namespace, so what the sandbox reaches is exactly what this namespace holds: the
  // listeners the server relays, and what the server opens here later by the reaper's
  // pid (the DNS relay, NetworkPolicy peers, egress).
  if (unshare(CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS) != 0)
    launch_failed(kControlFd, describe_errno("unshare(CLONE_NEWPID|CLONE_NEWNET|CLONE_NEWNS)", errno));
  try {
    // The server's connections for the sandbox are made to this namespace's loopback.
    bring_up_loopback();
  } catch (const std::exception& e) {
    launch_failed(kControlFd, e.what());
  }
  // The host's unmounts reach the copy where the host's mounts are shared (the slots,
  // whose binds come and go). The server's directory is private, so the copies of its
  // other mounts (containers' volumes, spare volumes), and those of another server on
  // this host, would stay here as long as the sandbox, each pinning its file system
  // after its server unmounted it: the next mount of that volume would be a second file
  // system over the same image. They go, all but what runsc uses.
  if (mount(nullptr, "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0)
    launch_failed(kControlFd, describe_errno("mount(/, MS_SLAVE|MS_REC)", errno));
  if (!detach_volume_mounts(service_dir, keep))
    launch_failed(kControlFd, describe_errno("reading /proc/self/mountinfo", errno));
  const pid_t reaper = fork();
  if (reaper < 0) launch_failed(kControlFd, describe_errno("fork(runsc's reaper)", errno));
  if (reaper == 0) {
    prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);  // its parent, the launcher, exits next
    run_reaper(kControlFd, argv + separator + 1);
  }
  // The listeners are opened here, after the fork, so that the reaper (which lives as
  // long as the sandbox) holds no copy: the server's closing of one closes it.
  std::vector<int> fds;
  try {
    for (const auto& [address, port] : listen_on) fds.push_back(open_listener(address, port));
  } catch (const std::exception& e) {
    kill(reaper, SIGKILL);
    launch_failed(kControlFd, e.what());
  }
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, reaper, 0));
  if (pidfd < 0) {
    kill(reaper, SIGKILL);
    launch_failed(kControlFd, describe_errno("pidfd_open(runsc's reaper)", errno));
  }
  // The pidfd, then the listeners: the server takes them as the native PID 1's (whose
  // ready message carries them; the agent's, from inside gVisor, carries none).
  fds.insert(fds.begin(), pidfd);
  proto::send_message(kControlFd, proto::Type::kInitPid, 0, reaper, {}, fds.data(), fds.size());
  _exit(0);
}

int run_gvisor_enter(int argc, char** argv) {
  if (argc < 5 || std::strcmp(argv[3], "--") != 0) {
    std::fprintf(stderr, "usage: sandboxd-init --gvisor-enter PID -- RUNSC ARG...\n");
    return 2;
  }
  char* end = nullptr;
  const long pid = std::strtol(argv[2], &end, 10);
  if (pid <= 1 || *end != '\0') {
    std::fprintf(stderr, "sandboxd-init --gvisor-enter: bad pid %s\n", argv[2]);
    return 2;
  }
  // If the server dies meanwhile, the runsc command goes with it.
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (pidfd < 0) {
    std::fprintf(stderr, "sandboxd-init: %s\n",
                 describe_errno("pidfd_open(" + std::string(argv[2]) + ")", errno).c_str());
    return 126;
  }
  // Its PID namespace (entered by the child forked below), its mount namespace (whose
  // /proc shows that PID namespace) and its network namespace, all at once.
  if (setns(pidfd, CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET) != 0) {
    std::fprintf(
        stderr, "sandboxd-init: %s\n",
        describe_errno("setns(pidfd " + std::string(argv[2]) + ", CLONE_NEWPID|CLONE_NEWNS|CLONE_NEWNET)",
                       errno)
            .c_str());
    return 126;
  }
  close(pidfd);
  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "sandboxd-init: %s\n", describe_errno("fork", errno).c_str());
    return 126;
  }
  if (child == 0) {
    execv(argv[4], argv + 4);
    std::fprintf(stderr, "sandboxd-init: %s\n",
                 describe_errno(std::string("execv(") + argv[4] + ")", errno).c_str());
    _exit(127);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) return 126;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run_gvisor_agent(int argc, char** argv) {
  const uint64_t max_open_files = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
  const uint64_t max_processes = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 0;
  const bool over_slots = argc > 4 && std::strcmp(argv[4], kOverSlotsArg) == 0;
  signal(SIGPIPE, SIG_IGN);
  umask(022);
  // As the native tier's PID 1: not dumpable, so the agent's processes (uid 1000) can
  // neither trace it nor read or write its memory. (gVisor still shows anyone its
  // environ and maps, which hold nothing of the server: the bundle's PATH, runsc's HOME.)
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    proto::send_message(0, proto::Type::kSetupFailed, 0, 0,
                        describe_errno("prctl(PR_SET_DUMPABLE, 0)", errno));
    return 1;
  }
  try {
    Agent agent(0, max_open_files, max_processes, over_slots);
    agent.serve();
  } catch (const std::exception& e) {
    proto::send_message(0, proto::Type::kSetupFailed, 0, 0, e.what());
    return 1;
  }
}

}  // namespace sandboxd::runtime
