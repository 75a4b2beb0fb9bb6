// The server's side of the control protocol, with the test playing PID 1 over a
// socketpair: what a PID 1 that is slow to read (the gvisor tier's agent reads one message
// per turn of its loop) gets from a server that sends faster than it reads.

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "runtime/cgroup.h"
#include "runtime/protocol.h"
#include "runtime/sandbox.h"

namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
namespace rt = sandboxd::runtime;
namespace proto = sandboxd::runtime::protocol;
using namespace std::chrono_literals;

constexpr const char* kRefusal = "refused by the test's PID 1";

// A cgroup v2 hierarchy of plain files: the sandbox here has no processes and no
// cgroups, and its stop removes nothing real.
std::unique_ptr<rt::CgroupBackend> scratch_cgroups(const fs::path& root) {
  const fs::path instance = root / "sandboxd" / "controlsocket";
  fs::create_directories(instance);
  std::ofstream(root / "cgroup.controllers") << "cpu memory pids\n";
  for (const auto& dir : {root, root / "sandboxd", instance})
    std::ofstream(dir / "cgroup.subtree_control") << "";
  rt::CgroupOptions options;
  options.mode = "v2";
  options.v2_root = root.string();
  options.instance = "controlsocket";
  return rt::detect_cgroups(options);
}

TEST(ControlSocket, CommandsSentFasterThanPid1ReadsWaitInOrderAndNoneIsLost) {
  const fs::path scratch = fs::temp_directory_path() / ("control-socket-" + std::to_string(getpid()));
  auto cgroups = scratch_cgroups(scratch / "cgroup");
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
  const int pid1 = pair[1];
  asio::io_context io;
  auto sandbox =
      std::make_shared<rt::Sandbox>(io.get_executor(), "control-socket-test", pair[0], -1, cgroups.get());
  ASSERT_EQ(proto::send_message(pid1, proto::Type::kReady, 0, 0, {}), 0);
  bool ready = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await sandbox->wait_ready(10s);
        ready = true;
      },
      asio::detached);
  while (!ready && io.run_one_for(10s) > 0) {
  }
  ASSERT_TRUE(ready);

  // More commands than the socket holds (net.unix.max_dgram_qlen, 512 by default, and its
  // send buffer), all sent before PID 1 reads any: every one must arrive.
  constexpr int kCommands = 1500;
  std::map<int, std::string> errors;  // by command: what exec threw
  for (int i = 0; i < kCommands; ++i)
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          rt::ExecRequest request;
          request.command = "echo " + std::to_string(i);
          try {
            co_await sandbox->exec(std::move(request));
            errors[i] = "ran";
          } catch (const rt::SandboxError& e) {
            errors[i] = e.what();
          }
        },
        asio::detached);
  io.poll();  // each command up to its wait for PID 1's answer

  // PID 1 reads now: each spawn refused, in the order sent.
  std::set<uint32_t> spawned;
  uint32_t last_id = 0;
  bool in_order = true;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (static_cast<int>(errors.size()) < kCommands && std::chrono::steady_clock::now() < deadline) {
    for (;;) {
      proto::Message msg;
      const int rc = proto::receive_message(pid1, msg, /*dont_wait=*/true);
      if (rc <= 0) break;
      if (msg.header.type != proto::Type::kSpawn) continue;
      in_order = in_order && msg.header.id > last_id;
      last_id = msg.header.id;
      spawned.insert(msg.header.id);
      ASSERT_EQ(proto::send_message(pid1, proto::Type::kSpawnFailed, msg.header.id, EPERM, kRefusal), 0);
    }
    io.run_one_for(10ms);
    io.poll();
  }
  EXPECT_EQ(static_cast<int>(spawned.size()), kCommands);
  EXPECT_TRUE(in_order);
  ASSERT_EQ(static_cast<int>(errors.size()), kCommands);
  for (const auto& [i, error] : errors) {
    EXPECT_NE(error.find(kRefusal), std::string::npos) << "command " << i << ": " << error;
    if (error.find(kRefusal) == std::string::npos) break;  // one is enough to see why
  }

  // PID 1 goes away: the sandbox stops.
  close(pid1);
  bool stopped = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await sandbox->stop();
        stopped = true;
      },
      asio::detached);
  while (!stopped && io.run_one_for(10s) > 0) {
  }
  EXPECT_TRUE(stopped);
  std::error_code ec;
  fs::remove_all(scratch, ec);
}

}  // namespace
