// The control protocol between the server and a sandbox's sandboxd-init, over a
// SOCK_SEQPACKET socketpair: one message per packet, a fixed header, a payload, and
// file descriptors passed with SCM_RIGHTS (the pipe ends of a command, a pidfd).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sandboxd::runtime::protocol {

enum class Type : uint32_t {
  kSpec = 1,         // server -> init: the sandbox spec (payload: encoded Spec)
  kInitPid = 2,      // launcher -> server: value = host pid of PID 1, fds: [pidfd, listeners (gvisor)...]
  kReady = 3,        // init -> server: the sandbox is set up, fds: its listeners (Spec order)
  kSetupFailed = 4,  // init -> server: payload = what failed
  kSpawn = 5,        // server -> init: id, value = spawn_value(...), payload = encoded SpawnRequest
  // init -> server: id, value = pid, fds: [stdout, stderr read ends(, stdin write end)];
  // for a terminal (kSpawnTerminal): [terminal master, stderr read end, terminal master];
  // none on the gvisor tier (relayed, see kStdin)
  kSpawned = 6,
  kSpawnFailed = 7,  // init -> server: id, value = errno, payload = what failed
  kExited = 8,       // init -> server: id, value = wait status(, fds: [stdout, stderr read ends])
  kKill = 9,         // server -> init: kill the whole process tree of execution id
  kKilled = 10,      // init -> server: id, value = 0 or errno
  // init -> server, before kSpawned/kExited: to make room for command id under the
  // sandbox's process limit, value = processes that earlier commands left running were
  // ended; payload = what to tell the client
  kLeftoversEnded = 11,
  // init -> server, on the gvisor tier only: id, value = kOutputStdout or kOutputStderr,
  // payload = bytes the command wrote, in order, all before its kExited. A pipe made
  // inside gVisor cannot be passed to the host, so its bytes are carried instead.
  kOutput = 12,
  // A long-lived process on the gvisor tier (kSpawnKeepStdin answered by a kSpawned with
  // no descriptors): its pipes stay with PID 1, and their bytes travel as messages. Its
  // kOutput carries what it wrote as it writes, an empty payload ending that stream, and
  // is independent of its kExited (as a pipe outlives its writer's exit natively). Each
  // direction has at most kRelayWindow bytes in flight: the receiver acknowledges what
  // it has written on, so a reader that stops reading makes the writer wait on its pipe
  // as it would natively, and no side buffers without bound.
  kStdin = 13,        // server -> init: id, value = 0 with bytes for its stdin, or kStdinEnd
  kStdinTaken = 14,   // init -> server: id, value = bytes of kStdin written into its stdin
  kOutputTaken = 15,  // server -> init: id, value = bytes of kOutput written on to its reader
  // The gvisor tier's network (gVisor's own network stack, whose loopback is the
  // sandbox's alone): PID 1 listens inside where the server listens in the sandbox's
  // network namespace, and carries each connection made to it as a relayed channel. The
  // bytes of a channel travel as a relayed process's do (kOutput: from the sandbox,
  // kStdin: to it, each direction's end an empty kOutput or a kStdinEnd, kRelayWindow in
  // flight each way); a kKill resets it.
  kListen = 16,             // server -> init: payload = "ADDRESS:PORT" to listen on
  kConnect = 17,            // init -> server: id = a channel id, payload = "ADDRESS:PORT" the connection was
                            // made to; the server connects to the same in the sandbox's namespace
  kEveryAddressLocal = 18,  // server -> init: every IPv4 address local inside, as the server
                            // made them in the sandbox's namespace (route_every_address_locally)
  // A connection into the sandbox (to a server a process there listens on): the server
  // asks PID 1 to make it inside, and relays it as a channel once made.
  kDial = 19,    // server -> init: id = a command-space id for the channel, payload = "ADDRESS:PORT"
  kDialed = 20,  // init -> server: id, value = 0 (connected: a channel from now on) or errno
  // The gvisor tier's memory: a sandbox restored from a checkpoint (runsc restore) goes on
  // where it was, its PID 1 speaking over the restoring launcher's new control socket.
  // What crossed the old socket is lost: the server asks PID 1 to forget it (reset every
  // network channel, close its listeners: the server asks for them anew) and to say which
  // processes it still has. PID 1 answers with a kReady whose payload is one line per
  // command it holds: "ID PID RELAYED" (RELAYED 1 for a long-lived process whose pipes it
  // relays, 2 for one on a terminal whose master it relays, 0 for a plain command still
  // running).
  kRestored = 21,  // server -> init
  // A process on a terminal gets a new window size: id, value = terminal_size_value(...).
  // The gvisor tier's PID 1 holds the terminal's master (it cannot leave gVisor) and sets
  // it there (TIOCSWINSZ: the kernel signals SIGWINCH to the terminal's foreground group);
  // on the native tier the server holds the master and sets it itself.
  kResizeTerminal = 22,  // server -> init
  // The gvisor tier: a folder was taken away from the sandbox (a skill that came off: its
  // bind detached on the host), and PID 1 ends every process that still uses it inside
  // (its working directory or root, an open or a mapped file in it). The sandbox's
  // processes are gVisor's, which the host cannot see (runtime/tree_users.h is the native
  // tier's walk): PID 1 walks its own /proc. Payload: the folder's path inside. Answered
  // by nothing.
  kEndFolderUsers = 23,  // server -> init
  // The gvisor tier, a sandbox started over slot folders (SandboxOptions::pre_started):
  // the container's folders are now bound onto the slots on the host, and PID 1 binds
  // them onto their places inside (gVisor's own mounts: a host bind made after runsc
  // started is seen beneath a folder runsc was given, never on top of it). Answered by
  // nothing: PID 1 handles messages in order, so a command the server sends after this
  // one runs over the folders; a bind that fails ends the sandbox (PID 1 exits), so no
  // command ever runs without them.
  kAttachFolders = 24,  // server -> init
};

// Channel ids are PID 1's, commands' the server's: a channel's has this bit set.
inline constexpr uint32_t kChannelIdBit = 0x8000'0000u;

inline constexpr int64_t kOutputStdout = 1;
inline constexpr int64_t kOutputStderr = 2;

// kSpawn's value for a process the server keeps talking to: kSpawned also carries the
// write end of its stdin (a plain command's stdin is closed at once: end of file).
inline constexpr int64_t kSpawnKeepStdin = 1;

// kSpawn's value bit for a process on a terminal (always with kSpawnKeepStdin): PID 1
// opens a pseudo-terminal in the sandbox's own devpts, gives the process its slave as
// stdin, stdout, stderr and controlling terminal, and hands the master to the server
// in place of the stdout and stdin pipes (the stderr pipe then only reads end of file).
// On the gvisor tier the master stays with PID 1 (gVisor's devpts: nothing of it can
// leave gVisor) and is relayed as a long-lived process's pipes are: its output as
// kOutput on stdout, what is typed as kStdin, stderr's end at once.
// The window size rides in the same value (bits 16-31 rows, 32-47 columns), so the
// process sees it from its first instruction.
inline constexpr int64_t kSpawnTerminal = 2;

struct TerminalSize {
  uint16_t rows = 0;
  uint16_t cols = 0;
};

// A window size in a message's value: bits 16-31 rows, 32-47 columns (kSpawn's low bits
// are its flags; kResizeTerminal's are 0).
inline constexpr int64_t terminal_size_value(const TerminalSize& size) {
  return (int64_t{size.rows} << 16) | (int64_t{size.cols} << 32);
}
inline constexpr TerminalSize terminal_size_of(int64_t value) {
  return {static_cast<uint16_t>((value >> 16) & 0xffff), static_cast<uint16_t>((value >> 32) & 0xffff)};
}

inline constexpr int64_t spawn_value(bool keep_stdin, const TerminalSize* terminal) {
  int64_t value = keep_stdin ? kSpawnKeepStdin : 0;
  if (terminal) value |= kSpawnKeepStdin | kSpawnTerminal | terminal_size_value(*terminal);
  return value;
}
inline constexpr bool spawn_keeps_stdin(int64_t value) { return (value & kSpawnKeepStdin) != 0; }
inline constexpr bool spawn_on_terminal(int64_t value) { return (value & kSpawnTerminal) != 0; }
inline constexpr TerminalSize spawn_terminal_size(int64_t value) { return terminal_size_of(value); }

// kStdin's value when the server's end of the process's stdin was closed: PID 1 closes
// the process's stdin once what came before is written.
inline constexpr int64_t kStdinEnd = 1;

// The bytes of a relayed process's output (both streams together) or of its stdin that
// may be sent and not yet acknowledged (kOutputTaken, kStdinTaken).
inline constexpr size_t kRelayWindow = 256 * 1024;

// A plain command's output pipes stay with PID 1 while it runs, this long at most. One
// that ends sooner (most do) has them sent with its kExited, so a command is one message
// each way and the server is not woken while it runs; one still running then has them
// sent in a kSpawned, and the server reads them as they fill from then on. So this is
// also the longest a command that writes more than a pipe holds waits for its reader. A
// process the server talks to (kSpawnKeepStdin) has its kSpawned at once, as its pid is
// wanted at its start.
inline constexpr int kHoldOutputMs = 20;

struct Header {
  Type type;
  uint32_t id;
  int64_t value;
};

struct Message {
  Header header{};
  std::string payload;
  std::vector<int> fds;  // owned by the receiver
};

inline constexpr size_t kMaxMessage = 256 * 1024;
inline constexpr size_t kMaxFds = 32;  // >= kMaxListeners

// Sends one packet. Returns 0 or -errno (EAGAIN included: the caller decides).
int send_message(int sock, Type type, uint32_t id, int64_t value, std::string_view payload,
                 const int* fds = nullptr, size_t nfds = 0, bool dont_wait = false);

// Receives one packet. Returns 1 on a message, 0 on orderly EOF, -errno on error
// (-EAGAIN on a non-blocking socket with nothing queued).
int receive_message(int sock, Message& out, bool dont_wait = false);

// The command the init spawns: argv and environment, NUL-separated. `terminal` is the
// path of the pseudo-terminal slave the child opens as its controlling terminal: set
// only by PID 1 (it opened the terminal), encoded after the environment when set.
struct SpawnRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd;
  std::string terminal;
};
std::string encode(const SpawnRequest& req);
bool decode(std::string_view payload, SpawnRequest& out);

}  // namespace sandboxd::runtime::protocol
