// How a sandbox ends and what its own processes can do to the next command, at the
// runtime's level (real sandboxes, real cgroups):
//
// - FrozenCgroups: PID 1 kills a command's tree by freezing its cgroup (v1), killing
//   and thawing. A PID 1 killed in between (a delete racing a timeout's kill) left the
//   cgroup frozen, the frozen processes never took their SIGKILL, PID 1 waited for them
//   forever and so did the stop. A stop must always finish and leave nothing frozen.
// - ForkBomb: a fork bomb left in the background holds the sandbox's whole process
//   limit; the next command must still run, say what was done, and keep the files.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cgroup_paths.h"
#include "sandbox_fixture.h"

namespace sandboxd::testing {

class Teardown : public SandboxSuite {
 protected:
  std::string version() const { return cgroup_version_in_use(harness->runtime->options().cgroups); }
  SandboxCgroupPaths paths_of(const std::string& sandbox) const {
    return sandbox_cgroup_paths(version(), harness->runtime->options().cgroups,
                                harness->runtime->options().instance, sandbox);
  }
  // Every cgroup folder below this suite's runtime instance, at any depth.
  std::vector<fs::path> instance_cgroups() const {
    std::vector<fs::path> found;
    const auto& options = harness->runtime->options();
    std::vector<fs::path> roots;
    if (version() == "v2") {
      roots.push_back(fs::path(options.cgroups.v2_root) / "sandboxd" / options.instance);
    } else {
      for (const char* controller : {"memory", "pids", "cpu", "freezer"})
        roots.push_back(fs::path(options.cgroups.v1_root) / controller / "sandboxd" / options.instance);
    }
    for (const auto& root : roots) {
      std::error_code ec;
      for (auto it = fs::recursive_directory_iterator(root, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->is_directory(ec)) found.push_back(it->path());
    }
    return found;
  }
  // The frozen (or freezing) cgroups below the instance (v1's freezer).
  std::vector<fs::path> frozen_cgroups() const {
    std::vector<fs::path> frozen;
    for (const auto& dir : instance_cgroups()) {
      const std::string state = read_text(dir / "freezer.state");
      if (!state.empty() && state.rfind("THAWED", 0) != 0) frozen.push_back(dir);
    }
    return frozen;
  }
  // Stops `sandbox`, driving the harness's io_context here, and waits at most `limit`.
  // A stop that hangs is rescued (every frozen cgroup thawed from here, which lets PID 1
  // end) so that the suite goes on; it returns false then.
  bool stop_within(const std::shared_ptr<rt::Sandbox>& sandbox, std::chrono::seconds limit) {
    auto stopped = asio::co_spawn(harness->io, sandbox->stop(), asio::use_future);
    return drive_until(stopped, limit);
  }
  // Runs the harness's io_context until `done` is ready; past `limit`, thaws what is
  // frozen (once) and returns false when it had to.
  bool drive_until(std::future<void>& done, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    bool rescued = false;
    harness->io.restart();
    while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      harness->io.run_for(std::chrono::milliseconds(5));
      harness->io.restart();
      if (!rescued && std::chrono::steady_clock::now() > deadline) {
        rescued = true;
        for (const auto& dir : frozen_cgroups()) write_text(dir / "freezer.state", "THAWED");
      }
    }
    done.get();
    return !rescued;
  }
};

}  // namespace sandboxd::testing

namespace {

using namespace sandboxd::testing;

// The tasks of a cgroup folder (its cgroup.procs).
std::vector<pid_t> procs_of(const fs::path& dir) {
  std::vector<pid_t> pids;
  std::ifstream in(dir / "cgroup.procs");
  for (pid_t pid; in >> pid;) pids.push_back(pid);
  return pids;
}

bool alive(pid_t pid) {
  // A zombie counts as gone: it holds no cgroup and runs nothing.
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  const auto state_at = stat.rfind(')');
  return state_at != std::string::npos && stat.size() > state_at + 2 && stat[state_at + 2] != 'Z';
}

TEST_F(Teardown, AStopFinishesWhenPid1WasKilledWithACommandsCgroupFrozen) {
  if (version() != "v1") GTEST_SKIP() << "v1's freezer only (v2 kills with cgroup.kill)";
  sandbox = harness->start(harness->options_for(*dirs));
  auto result = harness->exec(*sandbox, "for i in $(seq 20); do sleep 600 & done; echo started");
  ASSERT_EQ(result.stdout_text, "started\n") << result.stderr_text;
  // What PID 1 leaves when it is killed between its freeze and its thaw: the command's
  // cgroup frozen, its processes in it.
  const fs::path freezer = paths_of(sandbox->name()).exec_parent;
  std::vector<pid_t> left;
  for (const auto& entry : fs::directory_iterator(freezer)) {
    if (!entry.is_directory()) continue;
    auto pids = procs_of(entry.path());
    if (pids.empty()) continue;
    left.insert(left.end(), pids.begin(), pids.end());
    write_text(entry.path() / "freezer.state", "FROZEN");
  }
  ASSERT_GE(left.size(), 20u);
  ASSERT_FALSE(frozen_cgroups().empty());
  const pid_t pid1 = sandbox->pid();

  const auto began = std::chrono::steady_clock::now();
  EXPECT_TRUE(stop_within(sandbox, std::chrono::seconds(20))) << "the stop hung on a frozen cgroup";
  EXPECT_LT(std::chrono::steady_clock::now() - began, rt::kPid1ExitLimit + std::chrono::seconds(5));
  sandbox.reset();
  EXPECT_TRUE(frozen_cgroups().empty());
  EXPECT_TRUE(instance_cgroups().empty()) << instance_cgroups().front();
  EXPECT_FALSE(alive(pid1));
  for (pid_t pid : left) EXPECT_FALSE(alive(pid)) << "process " << pid << " outlived its sandbox";
}

// The race itself, many times: a command's timeout kill (PID 1 freezes, kills, thaws)
// and the sandbox's stop a moment later (PID 1 killed at any point of it). Every stop
// finishes; no cgroup is left, frozen or not. SANDBOXD_FREEZE_RACE_ROUNDS sets the
// rounds (the hand-run loop uses thousands).
TEST_F(Teardown, StopsRacingATimeoutKillAlwaysFinishAndLeaveNothingFrozen) {
  int rounds = 120;
  if (const char* env = std::getenv("SANDBOXD_FREEZE_RACE_ROUNDS")) rounds = std::atoi(env);
  std::mt19937 rng(std::random_device{}());
  int hung = 0;
  const auto began = std::chrono::steady_clock::now();
  for (int round = 0; round < rounds; ++round) {
    auto one = harness->start(harness->options_for(*dirs));
    // The command forks while its timeout comes (a tree to freeze as it grows); the stop
    // comes within a few milliseconds of the timeout, either side.
    const auto timeout = std::chrono::milliseconds(10 + static_cast<int>(rng() % 10));
    const auto stop_after = timeout - std::chrono::milliseconds(2) + std::chrono::microseconds(rng() % 6000);
    auto work = [one, timeout, stop_after]() -> asio::awaitable<void> {
      auto command = [one, timeout]() -> asio::awaitable<void> {
        rt::ExecRequest request;
        request.command = "for i in $(seq 60); do sleep 600 & done; wait";
        request.timeout = timeout;
        try {
          co_await one->exec(request);
        } catch (const rt::SandboxError&) {  // the sandbox stopped under it: expected
        }
      };
      auto executor = co_await asio::this_coro::executor;
      auto command_done = asio::co_spawn(executor, command(), asio::use_future);
      asio::steady_timer pause(executor, stop_after);
      co_await pause.async_wait(asio::use_awaitable);
      co_await one->stop();
      // The command's coroutine ends once the sandbox has stopped.
      while (command_done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        pause.expires_after(std::chrono::milliseconds(1));
        co_await pause.async_wait(asio::use_awaitable);
      }
      command_done.get();
    };
    auto done = asio::co_spawn(harness->io, work(), asio::use_future);
    if (!drive_until(done, std::chrono::seconds(20))) {
      ++hung;
      ADD_FAILURE() << "round " << round << ": the stop hung on a frozen cgroup";
    }
  }
  std::printf("%d rounds in %.1f s\n", rounds,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  EXPECT_EQ(hung, 0);
  EXPECT_TRUE(frozen_cgroups().empty());
  EXPECT_TRUE(instance_cgroups().empty())
      << instance_cgroups().size() << " cgroups left, " << instance_cgroups().front();
}

// The sandbox's tasks (pids.current of its pids cgroup), or -1.
long tasks_in(const fs::path& pids_dir) {
  const std::string text = read_text(pids_dir / "pids.current");
  return text.empty() ? -1 : std::stol(text);
}

// The forks refused at the sandbox's limit (pids.events' "max"), or -1.
long forks_refused(const fs::path& pids_dir) {
  const std::string text = read_text(pids_dir / "pids.events");
  const size_t max = text.find("max ");
  return max == std::string::npos ? -1 : std::stol(text.substr(max + 4));
}

TEST_F(Teardown, ACommandAfterAForkBombRunsAndTheFilesStay) {
  auto options = harness->options_for(*dirs);
  options.limits.pids = 64;  // small, so that the bomb fills it at once
  sandbox = harness->start(options);
  fs::path pids_dir;
  for (const auto& dir : paths_of(sandbox->name()).always)
    if (fs::exists(dir / "pids.max")) pids_dir = dir;
  ASSERT_FALSE(pids_dir.empty()) << "no pids controller for the sandbox";
  auto kept = harness->exec(*sandbox, "echo precious > /home/agent/workspace/keep.txt && echo /tmp > /tmp/t");
  ASSERT_EQ(kept.return_code, 0) << kept.stderr_text;

  // The bomb: its shell returns at once, its processes stay in the background.
  auto bomb = harness->exec(*sandbox, ":(){ :|:& };:", std::chrono::seconds(5));
  EXPECT_EQ(bomb.return_code, 0) << bomb.stderr_text;
  // Full: near the limit, and forks refused at it. The count swings after that (the
  // refused shells sleep before they fork again while the others exit), and the next
  // command must find room whichever way it has swung.
  for (int i = 0; i < 500 && (tasks_in(pids_dir) < 60 || forks_refused(pids_dir) == 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(tasks_in(pids_dir), 60) << "the bomb did not fill the sandbox's limit";
  ASSERT_GT(forks_refused(pids_dir), 0) << "no fork was refused at the limit";

  // The next command runs, at once, with its files, and says what was done.
  const auto began = std::chrono::steady_clock::now();
  auto next =
      harness->exec(*sandbox, "cat /home/agent/workspace/keep.txt /tmp/t; ls / | wc -l >/dev/null; echo ok",
                    std::chrono::seconds(20));
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(10));
  EXPECT_EQ(next.return_code, 0) << next.stderr_text;
  EXPECT_EQ(next.stdout_text, "precious\n/tmp\nok\n") << next.stderr_text;
  EXPECT_NE(next.stderr_text.find("limit of 64 processes"), std::string::npos) << next.stderr_text;
  EXPECT_NE(next.stderr_text.find("left running in the background"), std::string::npos) << next.stderr_text;
  // The bomb is gone, and the commands after run as before, with nothing to say.
  EXPECT_LT(tasks_in(pids_dir), 16);
  auto after = harness->exec(*sandbox, "echo again");
  EXPECT_EQ(after.stdout_text, "again\n");
  EXPECT_EQ(after.stderr_text, "");

  // A background process that is not at the limit is left alone.
  auto server = harness->exec(*sandbox, "sleep 600 >/dev/null 2>&1 & echo $!");
  ASSERT_EQ(server.return_code, 0);
  auto still = harness->exec(
      *sandbox, "kill -0 " + server.stdout_text.substr(0, server.stdout_text.size() - 1) + " && echo alive");
  EXPECT_EQ(still.stdout_text, "alive\n") << still.stderr_text;
}

}  // namespace
