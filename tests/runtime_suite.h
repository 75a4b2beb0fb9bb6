// The sandbox contract (docs/contract.md), checked from inside real sandboxes: identity,
// environment, filesystem layout, executions (timeouts, output caps, background
// processes, concurrency), lifecycle.
//
// One suite for both isolation tiers (runtime.isolation), instantiated once per tier by
// runtime_test.cc (native) and gvisor_runtime_test.cc (gvisor: its own executable,
// serial, because runsc's ptrace platform stops on every system call of the sandbox).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <set>
#include <string>
#include <thread>

#include "cgroup_paths.h"
#include "eventually.h"
#include "sandbox_fixture.h"
#include "sandbox_harness.h"

namespace sandboxd::testing {

using namespace std::chrono_literals;

class RuntimeTest : public TieredSandboxSuite {
 protected:
  void SetUp() override {
    TieredSandboxSuite::SetUp();
    if (IsSkipped()) return;
    sandbox = harness->start(harness->options_for(*dirs));
  }
  rt::ExecResult run(const std::string& command, std::chrono::milliseconds timeout = 30s,
                     size_t limit = 1 << 20) {
    return harness->exec(*sandbox, command, timeout, limit);
  }
};

TEST_P(RuntimeTest, RunsAsAgentInTheWorkspace) {
  auto r = run("id; pwd; echo $HOME");
  EXPECT_EQ(r.return_code, 0) << r.stderr_text;
  EXPECT_EQ(r.stdout_text,
            "uid=1000(agent) gid=1000(agent) groups=1000(agent)\n/home/agent/workspace\n/home/agent\n");
}

TEST_P(RuntimeTest, PassesStdoutStderrAndExitCode) {
  auto r = run("echo out; echo err >&2; exit 7");
  EXPECT_EQ(r.stdout_text, "out\n");
  EXPECT_EQ(r.stderr_text, "err\n");
  EXPECT_EQ(r.return_code, 7);
  auto killed = run("kill -TERM $$");
  EXPECT_EQ(killed.return_code, 128 + SIGTERM);
}

TEST_P(RuntimeTest, EnvironmentIsFixedAndNothingOfTheServerLeaks) {
  setenv("SANDBOXD_TEST_SECRET", "do-not-leak", 1);
  auto r = run("env | sort");
  unsetenv("SANDBOXD_TEST_SECRET");
  EXPECT_EQ(
      r.stdout_text,
      "HOME=/home/agent\nLANG=C.UTF-8\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
      "PWD=/home/agent/workspace\nSHLVL=1\nTERM=dumb\nUSER=agent\n_=/usr/bin/env\n");
}

TEST_P(RuntimeTest, EachCallIsANewShellButFilesPersist) {
  run("export FOO=bar; cd /tmp; echo hi > /home/agent/workspace/note.txt");
  auto r = run("echo \"[$FOO]\"; pwd; cat note.txt");
  EXPECT_EQ(r.stdout_text, "[]\n/home/agent/workspace\nhi\n");
  EXPECT_EQ(read_text(dirs->workspace / "note.txt"), "hi\n");
}

TEST_P(RuntimeTest, FilesystemLayoutMatchesTheContract) {
  write_text(dirs->uploads / "in.csv", "a,b\n");
  fs::create_directories(dirs->skills / "pdf");
  write_text(dirs->skills / "pdf" / "SKILL.md", "skill\n");
  auto r = run(R"(
    cat /mnt/user-data/uploads/in.csv
    cat /mnt/skills/pdf/SKILL.md
    echo made > /mnt/user-data/outputs/chart.txt && echo outputs-rw
    touch /mnt/user-data/uploads/x 2>/dev/null || echo uploads-ro
    touch /mnt/skills/x 2>/dev/null || echo skills-ro
    touch /usr/x /etc/x /x /bin/x 2>/dev/null || echo image-ro
    touch /tmp/t /home/agent/.cache && echo tmp-home-rw
    stat -c '%U:%G %a' /home/agent/workspace /mnt/user-data/outputs /home/agent
    echo x > w.txt; ls -l w.txt | awk '{print $3, $4}'
  )");
  EXPECT_EQ(r.stdout_text,
            "a,b\nskill\noutputs-rw\nuploads-ro\nskills-ro\nimage-ro\ntmp-home-rw\n"
            "agent:agent 755\nagent:agent 755\nagent:agent 755\nagent agent\n")
      << r.stderr_text;
  EXPECT_EQ(read_text(dirs->outputs / "chart.txt"), "made\n");
  struct stat st;
  ASSERT_EQ(stat((dirs->workspace / "w.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, harness->runtime->options().host_uid) << "agent is an unprivileged host uid";
}

TEST_P(RuntimeTest, GeneratedEtcAndMinimalDev) {
  auto r = run(R"(
    getent passwd agent; getent group agent; hostname
    test -e /etc/shadow && echo shadow-visible
    ls /dev | tr '\n' ' '; echo
    head -c 4 /dev/zero | od -An -tx1; echo x > /dev/null && echo null-ok
  )");
  EXPECT_EQ(r.stdout_text,
            "agent:x:1000:1000:agent:/home/agent:/bin/bash\nagent:x:1000:\nsandbox\n"
            "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero \n"
            " 00 00 00 00\nnull-ok\n")
      << r.stderr_text;
}

// A login shell (what E2B's SDKs run every command in) reads /etc/profile. The host's
// Debian profile asks `"$(id -u)"` whether the user is root; the sandbox's copy lets
// bash answer from $EUID: the same branch, no subshell and no exec of id per command.
TEST_P(RuntimeTest, LoginShellsTakeTheProfilesNonRootBranchWithoutRunningId) {
  if (read_text("/etc/profile").find("\"$(id -u)\"") == std::string::npos)
    GTEST_SKIP() << "this host's /etc/profile does not ask id -u";
  // sh (dash) has no $EUID: it still asks id, and must end up with the same PATH.
  auto r = run(R"(
    bash -l -x -c 'echo "bash:$PATH"' 2>&1
    sh -l -c 'echo "sh:$PATH"'
    grep -c 'EUID' /etc/profile
  )");
  ASSERT_EQ(r.return_code, 0) << r.stdout_text << r.stderr_text;
  EXPECT_EQ(r.stdout_text.find("id -u"), std::string::npos) << "bash ran id: " << r.stdout_text;
  const std::string non_root = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games";
  EXPECT_NE(r.stdout_text.find("'[' 1000 -eq 0 ']'"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("\nbash:" + non_root + "\n"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("\nsh:" + non_root + "\n"), std::string::npos) << r.stdout_text;
}

TEST_P(RuntimeTest, TmpIsSizeLimited) {
  auto r = run("head -c 100M /dev/zero > /tmp/big; echo rc=$?; df -k /tmp | tail -1 | awk '{print $2}'");
  EXPECT_NE(r.stdout_text.find("rc=1"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stderr_text.find("No space left on device"), std::string::npos) << r.stderr_text;
  EXPECT_NE(r.stdout_text.find("65536"), std::string::npos) << r.stdout_text;  // 64 MiB in KiB
}

TEST_P(RuntimeTest, TimeoutKillsTheWholeTreeIncludingDetachedDescendants) {
  auto r =
      run("setsid bash -c 'sleep 1000' & (sleep 1001 &); nohup sleep 1002 >/dev/null 2>&1 & "
          "echo started; sleep 1003",
          1s);
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.return_code, 124);
  EXPECT_EQ(r.stderr_text, "Command timed out after 1s.");
  EXPECT_EQ(r.stdout_text, "started\n");
  auto after = run("ps -eo comm= | sort | uniq -c | tr -s ' '");
  ASSERT_EQ(after.return_code, 0) << after.stderr_text;
  EXPECT_NE(after.stdout_text.find(" ps\n"), std::string::npos) << "ps lists itself: " << after.stdout_text;
  EXPECT_EQ(after.stdout_text.find("sleep"), std::string::npos) << after.stdout_text;
}

TEST_P(RuntimeTest, TimeoutKillsOnlyItsOwnCall) {
  run("sleep 300 >/dev/null 2>&1 &");
  auto r = run("sleep 100", 500ms);
  EXPECT_EQ(r.return_code, 124);
  EXPECT_EQ(r.stderr_text, "Command timed out after 0.5s.");
  auto after = run("pgrep -c -x sleep");
  EXPECT_EQ(after.stdout_text, "1\n") << "the background sleep of the earlier call survives";
}

TEST_P(RuntimeTest, OutputIsCappedAndTheWriterNeverBlocks) {
  auto r = run("head -c 50000000 /dev/zero | tr '\\0' a; echo tail >&2", 60s, 1000);
  EXPECT_EQ(r.return_code, 0);
  EXPECT_TRUE(r.stdout_truncated);
  EXPECT_FALSE(r.stderr_truncated);
  EXPECT_EQ(r.stdout_text, std::string(1000, 'a') + "...[truncated]");
  EXPECT_EQ(r.stderr_text, "tail\n");
}

TEST_P(RuntimeTest, BackgroundProcessesKeepRunningAndDoNotHoldTheResult) {
  auto start = std::chrono::steady_clock::now();
  auto r =
      run("(sleep 0.1; while true; do echo tick; echo tick >> /tmp/ticks; sleep 0.2; done) & sleep 60 & echo "
          "started");
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.stdout_text.rfind("started\n", 0), 0u) << r.stdout_text;
  EXPECT_LT(elapsed, 20s) << "the call returned when its shell exited";  // behaviour, not a timing bar
  // The loop goes round and round after the call returned: its output pipe is drained.
  EXPECT_TRUE(eventually([&] {
    auto ticks = run("wc -l < /tmp/ticks");
    return ticks.return_code == 0 && std::stoi("0" + ticks.stdout_text) >= 3;
  }));
  auto later = run("pgrep -c -x sleep");
  EXPECT_EQ(later.return_code, 0) << "the background loop still runs (its output pipe is drained)";
  ASSERT_FALSE(later.stdout_text.empty()) << later.stderr_text;
  EXPECT_GE(std::stoi(later.stdout_text), 1) << "sleep 60 at least";
}

TEST_P(RuntimeTest, ConcurrentExecutionsInOneSandbox) {
  using namespace boost::asio::experimental::awaitable_operators;
  auto work = [&]() -> asio::awaitable<std::vector<std::string>> {
    std::vector<std::string> out;
    auto request = [](int i) {
      rt::ExecRequest req;
      req.command = "sleep 0.3; echo " + std::to_string(i);
      return req;
    };
    auto [a, b] = co_await (sandbox->exec(request(1)) && sandbox->exec(request(2)));
    auto [c, d] = co_await (sandbox->exec(request(3)) && sandbox->exec(request(4)));
    for (auto* r : {&a, &b, &c, &d}) out.push_back(r->stdout_text);
    co_return out;
  };
  auto outputs = run_sync(harness->io, work());
  EXPECT_EQ(outputs, (std::vector<std::string>{"1\n", "2\n", "3\n", "4\n"}));
}

// After a quiet spell PID 1 makes the next command's child only once the first command
// has ended (or has run for 20 ms): commands that come meanwhile each get a child of
// their own, made then, and every one runs as usual.
TEST_P(RuntimeTest, CommandsAfterAQuietSpellEachGetTheirOwnProcess) {
  using namespace boost::asio::experimental::awaitable_operators;
  run("true");
  std::this_thread::sleep_for(1200ms);
  auto work = [&]() -> asio::awaitable<std::vector<std::string>> {
    auto request = [](const std::string& command) {
      rt::ExecRequest req;
      req.command = command;
      return req;
    };
    // The first runs past the hold; the second and third arrive while it runs.
    auto [a, b, c] = co_await (sandbox->exec(request("sleep 0.1; echo a $$")) &&
                               sandbox->exec(request("echo b $$")) && sandbox->exec(request("echo c $$")));
    std::vector<std::string> out;
    for (auto* r : {&a, &b, &c}) out.push_back(r->stdout_text + std::to_string(r->return_code));
    co_return out;
  };
  auto outputs = run_sync(harness->io, work());
  ASSERT_EQ(outputs.size(), 3u);
  std::set<std::string> pids;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string letter(1, static_cast<char>('a' + i));
    EXPECT_EQ(outputs[i].rfind(letter + " ", 0), 0u) << outputs[i];
    EXPECT_EQ(outputs[i].substr(outputs[i].size() - 2), "\n0") << outputs[i];
    pids.insert(outputs[i].substr(2, outputs[i].size() - 4));
  }
  EXPECT_EQ(pids.size(), 3u) << "each command its own shell";
  std::this_thread::sleep_for(1200ms);
  EXPECT_EQ(run("echo after").stdout_text, "after\n");  // the first after a spell ends, alone
  EXPECT_EQ(run("echo next").stdout_text, "next\n");    // its child made after it
}

// A surface showing a running command's progress sees its output as it is written:
// the first line before the command ends, every kept byte once, on the right stream, and
// nothing past the output cap.
TEST_P(RuntimeTest, OutputIsObservedWhileTheCommandRuns) {
  struct Seen {
    std::string out, err;
    bool first_line_before_the_end = false;
  };
  auto seen = std::make_shared<Seen>();
  auto done = std::make_shared<std::atomic<bool>>(false);
  auto work = [&]() -> asio::awaitable<rt::ExecResult> {
    rt::ExecRequest req;
    req.command = "echo first; echo oops >&2; sleep 0.5; echo second; head -c 3000 /dev/zero | tr '\\0' x";
    req.output_limit = 2000;
    req.on_output = [seen, done](rt::OutputStreamId stream, std::string_view bytes) {
      auto& text = stream == rt::OutputStreamId::kStdout ? seen->out : seen->err;
      text.append(bytes);
      if (!done->load() && seen->out.find("first\n") == 0 && seen->out.find("second") == std::string::npos)
        seen->first_line_before_the_end = true;
    };
    auto result = co_await sandbox->exec(std::move(req));
    done->store(true);
    co_return result;
  };
  auto result = run_sync(harness->io, work());
  EXPECT_TRUE(seen->first_line_before_the_end);
  EXPECT_EQ(seen->err, "oops\n");
  EXPECT_EQ(seen->out.size(), 2000u);  // the cap, as the result keeps it
  EXPECT_EQ(result.stdout_text, seen->out + std::string(rt::kTruncationMarker));
}

TEST_P(RuntimeTest, NonUtf8AndBinaryOutputComeBackAsBytes) {
  auto r = run("printf '\\xff\\xfe\\x00ok'");
  EXPECT_EQ(r.stdout_text, std::string("\xff\xfe\0ok", 5));
}

TEST_P(RuntimeTest, StopLeavesNothingBehindAndFilesPersistAcrossRestart) {
  run("echo keep > /home/agent/workspace/keep.txt; echo out > /mnt/user-data/outputs/o.txt; sleep 500 &");
  pid_t pid1 = sandbox->pid();
  std::string name = sandbox->name();
  ASSERT_GT(pid1, 0);
  ASSERT_EQ(kill(pid1, 0), 0);
  // The cgroups of the hierarchy in use: there while the sandbox runs, so that their
  // absence afterwards means stop removed them.
  auto cgroups = sandbox_cgroup_paths(*harness->runtime, name);
  ASSERT_FALSE(cgroups.always.empty());
  for (const auto& dir : cgroups.always) EXPECT_TRUE(fs::is_directory(dir)) << "while it runs: " << dir;
  harness->stop(*sandbox);
  EXPECT_FALSE(sandbox->running());
  EXPECT_NE(kill(pid1, 0), 0) << "PID 1 is gone (and with it every process of the sandbox)";
  for (const auto& dir : cgroups.always) EXPECT_FALSE(fs::exists(dir)) << dir;
  if (!cgroups.cpu.empty()) {
    EXPECT_FALSE(fs::exists(cgroups.cpu)) << cgroups.cpu;
  }
  EXPECT_THROW(run("true"), rt::SandboxError);
  // A fresh sandbox over the same container: files are there, processes are not.
  sandbox = harness->start(harness->options_for(*dirs));
  auto r = run("cat keep.txt /mnt/user-data/outputs/o.txt; pgrep -c sleep");
  EXPECT_EQ(r.stdout_text, "keep\nout\n0\n");
}

TEST_P(RuntimeTest, ManyCommandsInARow) {
  for (int i = 0; i < 200; ++i) {
    auto r = run("echo " + std::to_string(i));
    ASSERT_EQ(r.stdout_text, std::to_string(i) + "\n");
  }
  if (on_gvisor()) {
    // The commands' cgroups inside gVisor (PID 1's cgroupfs) go with their processes:
    // at most this command's own is left.
    auto left = run("cd /.sandboxd/cgroup && echo c[0-9]*");
    EXPECT_EQ(left.stdout_text.find(' '), std::string::npos) << "one cgroup at most: " << left.stdout_text;
    return;
  }
  // Per-execution cgroups are removed once their processes are gone: what remains is
  // the one prepared for the next command (and, for a moment, the last one's).
  fs::path exec_parent = sandbox_cgroup_paths(*harness->runtime, sandbox->name()).exec_parent;
  ASSERT_TRUE(fs::is_directory(exec_parent)) << exec_parent;
  size_t children = 0;
  for (auto& entry : fs::directory_iterator(exec_parent)) children += entry.is_directory();
  EXPECT_LE(children, 2u) << exec_parent;
}

}  // namespace sandboxd::testing
