// Terminals (runtime/terminal.h) in real sandboxes, on both isolation tiers: a process
// started on a pseudo-terminal has the slave as its stdin, stdout, stderr and controlling
// terminal; the terminal is in the sandbox's own devpts instance (from inside, /dev/pts
// lists only the sandbox's terminals; on the native tier it is not the host's devpts, on
// the gvisor tier it is gVisor's); the server types, reads, resizes and, by killing the
// process's tree, ends it, through the master (native) or PID 1's relay of it (gvisor).
//
// Instantiated once per tier and executable: terminal_test.cc (native) and
// gvisor_terminal_test.cc (gvisor: serial, as the other gvisor tests).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "runtime/terminal.h"
#include "sandbox_fixture.h"
#include "sandbox_harness.h"

namespace sandboxd::testing {

using namespace std::chrono_literals;

// The server's side of one process on a terminal, its descriptors closed at the end.
struct Terminal {
  rt::ProcessChannel channel;
  std::string screen;  // everything read from the master so far
  bool ended = false;  // the master read EIO: no process holds the slave any more

  ~Terminal() {
    for (int fd : {channel.stdin_write, channel.stdout_read, channel.stderr_read})
      if (fd >= 0) close(fd);
  }

  void type(const std::string& text) const {
    ASSERT_EQ(write(channel.stdin_write, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }

  // The harness's io_context, where the server's side of the sandbox runs (on the gvisor
  // tier it relays the terminal's master): run while the test waits for the bytes.
  static inline asio::io_context* io = nullptr;

  // Reads the terminal until `marker` has appeared after `from` or the terminal ended,
  // waiting at most 20 s in all (poll: woken by the bytes, no fixed sleep; between two
  // waits of at most 10 ms each, the server's ready handlers run).
  bool read_until(const std::string& marker, size_t from = 0) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (screen.find(marker, from) == std::string::npos && !ended) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        // What the process's start may have said (its stderr pipe, which only reads end of
        // file once it runs), shown with the screen in the failure.
        fcntl(channel.stderr_read, F_SETFL, O_NONBLOCK);
        char buffer[4096];
        const ssize_t n = read(channel.stderr_read, buffer, sizeof buffer);
        if (n > 0) screen += "\n[stderr: " + std::string(buffer, static_cast<size_t>(n)) + "]";
        return false;
      }
      io->poll();
      pollfd p{channel.stdout_read, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 10))) <= 0) continue;
      char buffer[4096];
      const ssize_t n = read(channel.stdout_read, buffer, sizeof buffer);
      if (n > 0)
        screen.append(buffer, static_cast<size_t>(n));
      else if (n == 0 || errno == EIO)
        ended = true;
    }
    return screen.find(marker, from) != std::string::npos;
  }
};

class TerminalTest : public TieredSandboxSuite {
 protected:
  void SetUp() override {
    TieredSandboxSuite::SetUp();
    if (IsSkipped()) return;
    // As the server does (app/serve.cc): a relay writing to a pipe the test closed gets
    // EPIPE, never the signal.
    signal(SIGPIPE, SIG_IGN);
    Terminal::io = &harness->io;
    sandbox = harness->start(harness->options_for(*dirs));
  }
  // `script` in sh on a terminal of rows x cols.
  rt::ProcessChannel start(const std::string& script, uint16_t rows = 24, uint16_t cols = 80) {
    rt::ProcessRequest request;
    request.argv = {"/bin/sh", "-c", script};
    request.terminal = rt::protocol::TerminalSize{rows, cols};
    return run_sync(harness->io, sandbox->start_process(std::move(request)));
  }
  int wait(uint32_t id) { return run_sync(harness->io, sandbox->wait_process(id)); }
  int resize(uint32_t id, uint16_t rows, uint16_t cols) {
    return run_sync(harness->io, sandbox->resize_terminal(id, {rows, cols}));
  }
};

TEST_P(TerminalTest, TheSlaveIsTheControllingTerminalOfTheSandboxsOwnDevpts) {
  struct stat host_pts {};
  ASSERT_EQ(stat("/dev/pts", &host_pts), 0);
  Terminal t{start(
      // isatty on every stdio stream; it is the controlling terminal (tcgetpgrp answers
      // only on one's own, and names the process's group as its foreground) and /dev/tty
      // opens only for a process with one (gVisor has no /dev/tty device: natively only);
      // the slave is the agent's; /dev/pts has this terminal only (a fresh instance
      // numbers from 0) and is not the host's.
      "tty; for fd in 0 1 2; do test -t $fd && echo \"isatty-$fd\"; done; "
      "test \"$(readlink /proc/self/fd/0)\" = \"$(tty)\" && echo stdin-is-it; "
      "python3 -c 'import os; print(\"foreground\", os.tcgetpgrp(0) == os.getpgrp())'; "
      "sh -c 'exec 3</dev/tty && echo controlling' ; "
      "stat -c 'owner %U %a' \"$(tty)\"; ls /dev/pts | tr '\\n' ' '; echo; stat -c 'devpts %d' /dev/pts; "
      "echo done-$((1+1))")};
  ASSERT_TRUE(t.channel.terminal);
  ASSERT_TRUE(t.read_until("done-2")) << t.screen;
  EXPECT_NE(t.screen.find("/dev/pts/0\r\n"), std::string::npos) << t.screen;
  for (const char* line : {"isatty-0\r\n", "isatty-1\r\n", "isatty-2\r\n", "stdin-is-it\r\n",
                           "foreground True\r\n", "owner agent 620\r\n", "\n0 ptmx \r\n"})
    EXPECT_NE(t.screen.find(line), std::string::npos) << line << " missing in: " << t.screen;
  if (!on_gvisor()) {
    EXPECT_NE(t.screen.find("controlling\r\n"), std::string::npos) << t.screen;
  }
  // (A device number inside gVisor is the sentry's, not comparable with the host's: there
  // the host's devpts is not mounted at all, gvisor_launcher.cc's spec names none.)
  if (!on_gvisor()) {
    EXPECT_EQ(t.screen.find("devpts " + std::to_string(host_pts.st_dev) + "\r\n"), std::string::npos)
        << "the sandbox sees the host's devpts: " << t.screen;
  }
  EXPECT_EQ(wait(t.channel.id), 0);
  // Nothing holds the slave any more: the master reads its end.
  t.read_until("\x01 not printed");
  EXPECT_TRUE(t.ended);
}

TEST_P(TerminalTest, TypedInputAndAResizeReachTheProcess) {
  // The size it starts with, then after a resize: the window size the process reads and
  // the SIGWINCH its foreground group gets.
  Terminal t{
      start("stty size; trap 'echo winch-$((2+2))' WINCH; echo ready-$((1+2)); "
            "while ! read line; do :; done; "
            "echo \"got-$line\"; stty size; echo end-$((3+3))",
            24, 80)};
  ASSERT_TRUE(t.read_until("ready-3")) << t.screen;
  EXPECT_NE(t.screen.find("24 80\r\n"), std::string::npos) << t.screen;
  ASSERT_EQ(resize(t.channel.id, 45, 123), 0);
  ASSERT_TRUE(t.read_until("winch-4")) << t.screen;
  const size_t from = t.screen.size();
  t.type("hello\n");
  ASSERT_TRUE(t.read_until("end-6", from)) << t.screen;
  EXPECT_NE(t.screen.find("got-hello\r\n", from), std::string::npos) << t.screen;
  EXPECT_NE(t.screen.find("45 123\r\n", from), std::string::npos) << t.screen;
  EXPECT_EQ(wait(t.channel.id), 0);
}

TEST_P(TerminalTest, KillEndsTheSessionsWholeTree) {
  // A background job keeps the slave open; a kill of the process ends it too, and the
  // master then reads its end.
  Terminal t{start("sleep 1000 & echo started-$((4+5)); wait")};
  ASSERT_TRUE(t.read_until("started-9")) << t.screen;
  sandbox->kill_process(t.channel.id);
  EXPECT_EQ(wait(t.channel.id), 128 + SIGKILL);
  t.read_until("\x01 not printed");
  EXPECT_TRUE(t.ended) << "a process of the killed session still holds the terminal";
  auto left = harness->exec(*sandbox, "grep -lx sleep /proc/[0-9]*/comm 2>/dev/null | wc -l", 30s, 1 << 20);
  EXPECT_EQ(left.stdout_text, "0\n") << left.stderr_text;
}

TEST_P(TerminalTest, NoInputCanBePushedIntoTheTerminal) {
  // TIOCSTI (typing into a terminal as if from its keyboard) is refused by the seccomp
  // filter even on the process's own terminal, so nothing in the sandbox can type into
  // a terminal, and the server never gives it one outside.
  Terminal t{
      start("python3 -c 'import fcntl, termios\n"
            "try:\n fcntl.ioctl(0, termios.TIOCSTI, b\"x\"); print(\"pushed\")\n"
            "except OSError as e: print(\"refused\", e.errno)'; echo end-$((2+5))")};
  ASSERT_TRUE(t.read_until("end-7")) << t.screen;
  EXPECT_NE(t.screen.find("refused 1\r\n"), std::string::npos) << t.screen;
  EXPECT_EQ(t.screen.find("pushed"), std::string::npos) << t.screen;
  EXPECT_EQ(wait(t.channel.id), 0);
}

TEST_P(TerminalTest, EachTerminalIsNewAndCommandsStayOnPipes) {
  Terminal first{start("echo one-$((0+1)); read line")};
  ASSERT_TRUE(first.read_until("one-1")) << first.screen;
  Terminal second{start("tty; echo two-$((1+1))")};
  ASSERT_TRUE(second.read_until("two-2")) << second.screen;
  EXPECT_NE(second.screen.find("/dev/pts/1\r\n"), std::string::npos) << second.screen;
  // A plain command next to them has no terminal.
  auto plain = harness->exec(*sandbox, "test -t 0 || echo no-tty; tty || true", 30s, 1 << 20);
  EXPECT_EQ(plain.stdout_text, "no-tty\nnot a tty\n") << plain.stderr_text;
  first.type("x\n");
  EXPECT_EQ(wait(first.channel.id), 0);
  EXPECT_EQ(wait(second.channel.id), 0);
}

TEST_P(TerminalTest, AResizeIsRefusedForAProcessOnPipesOrOneThatEnded) {
  rt::ProcessRequest request;
  request.argv = {"/bin/sh", "-c", "read line"};
  const rt::ProcessChannel piped = run_sync(harness->io, sandbox->start_process(std::move(request)));
  EXPECT_FALSE(piped.terminal);
  EXPECT_EQ(resize(piped.id, 10, 10), -ENOTTY);
  ASSERT_EQ(write(piped.stdin_write, "x\n", 2), 2);
  EXPECT_EQ(wait(piped.id), 0);
  for (int fd : {piped.stdin_write, piped.stdout_read, piped.stderr_read}) close(fd);
  Terminal t{start("echo gone-$((1+4))")};
  ASSERT_TRUE(t.read_until("gone-5")) << t.screen;
  EXPECT_EQ(wait(t.channel.id), 0);
  EXPECT_EQ(resize(t.channel.id, 10, 10), -ESRCH);
  EXPECT_EQ(resize(999999, 10, 10), -ESRCH);
}

}  // namespace sandboxd::testing
