// The command template (src/runtime/process.cc): the one process per sandbox that became
// the confined agent once and from which every command's child is cloned. It runs as
// the agent, so the agent can kill or stop it; these attacks come from inside a real
// sandbox, and after each the next commands must run, with the whole confinement, and
// other sandboxes must not notice.

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <sstream>

#include "sandbox_fixture.h"
#include "sandbox_harness.h"

using namespace sandboxd::testing;
using namespace std::chrono_literals;

namespace {

// From inside: the sandbox's template is the agent's sandboxd-init that is not in a
// session of its own (a child waiting for its command has called setsid). A child the
// template has just cloned for the next command is in the same state for the moment
// before its setsid, so the template is the one seen so in three looks 20 ms apart.
const char* kFindTemplate =
    "for look in 1 2 3; do ps -eo pid=,sid=,uid=,comm= | "
    "awk '$4 == \"sandboxd-init\" && $3 == 1000 && $1 != $2 {print $1}'; sleep 0.02; done | "
    "sort | uniq -c | awk '$1 == 3 {print $2}'";
// (Only the template: killing or stopping the child prepared for the next command hits
// that command, which is the agent's own doing and was so before the template.)
const std::string kKillTemplate = std::string("kill -KILL $(") + kFindTemplate + ")";
const std::string kStopTemplate = std::string("kill -STOP $(") + kFindTemplate + ")";
const char* kConfinement =
    "grep -E '^(Uid|CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t' ' '";
const char* kConfined =
    "Uid: 1000 1000 1000 1000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\n"
    "NoNewPrivs: 1\nSeccomp: 2\n";

class CommandTemplateTest : public SandboxPerTest {
 protected:
  rt::ExecResult run(const std::string& command) { return harness->exec(*sandbox, command, 30s); }
  std::string template_pid() {
    auto r = run(kFindTemplate);
    EXPECT_EQ(r.return_code, 0) << r.stderr_text;
    return r.stdout_text;
  }
  // Commands after an attack: they run, confined as always.
  void expect_commands_work() {
    for (int i = 0; i < 5; ++i) {
      auto r = run("echo " + std::to_string(i));
      ASSERT_EQ(r.return_code, 0) << r.stderr_text;
      ASSERT_EQ(r.stdout_text, std::to_string(i) + "\n");
    }
    auto c = run(kConfinement);
    EXPECT_EQ(c.stdout_text, kConfined) << c.stderr_text;
  }
};

TEST_F(CommandTemplateTest, OneTemplateServesEveryCommandAndItsChildrenAreConfined) {
  std::string first = template_pid();
  ASSERT_FALSE(first.empty()) << "a template process in the sandbox";
  EXPECT_EQ(first.find('\n'), first.size() - 1) << "exactly one: " << first;
  for (int i = 0; i < 10; ++i) ASSERT_EQ(run("true").return_code, 0);
  EXPECT_EQ(template_pid(), first) << "the same template across commands";
  auto c = run(kConfinement);
  EXPECT_EQ(c.stdout_text, kConfined) << c.stderr_text;
  // The agent cannot look into it: its memory is PID 1's and not dumpable.
  std::string pid = first.substr(0, first.size() - 1);
  auto peek =
      run("cat /proc/" + pid + "/environ; ls /proc/" + pid + "/fd; cat /proc/" + pid + "/maps; echo end");
  EXPECT_EQ(peek.stdout_text, "end\n") << peek.stdout_text;
  EXPECT_NE(peek.stderr_text.find("Permission denied"), std::string::npos) << peek.stderr_text;
}

TEST_F(CommandTemplateTest, KillingTheTemplateFromInsideBreaksNothing) {
  std::string before = template_pid();
  ASSERT_FALSE(before.empty());
  auto k = run(kKillTemplate + "; echo killed");
  EXPECT_EQ(k.stdout_text, "killed\n") << k.stderr_text;
  expect_commands_work();
  std::string after = template_pid();
  EXPECT_FALSE(after.empty()) << "a new template";
  EXPECT_NE(after, before);
  // Again, many times over: each kill costs the agent a restart, nothing more.
  for (int i = 0; i < 5; ++i) {
    run(kKillTemplate);
    run("true");
  }
  expect_commands_work();
}

TEST_F(CommandTemplateTest, StoppingTheTemplateFromInsideBreaksNothing) {
  std::string before = template_pid();
  ASSERT_FALSE(before.empty());
  auto s = run(kStopTemplate + "; echo stopped");
  EXPECT_EQ(s.stdout_text, "stopped\n") << s.stderr_text;
  // PID 1 stops waiting for it, replaces it, and makes those commands' children itself.
  expect_commands_work();
  std::string after = template_pid();
  EXPECT_FALSE(after.empty()) << "a new template";
  EXPECT_NE(after, before);
  auto stopped = run("ps -eo stat=,comm= | awk '$1 ~ /^T/ && $2 == \"sandboxd-init\"' | wc -l");
  EXPECT_EQ(stopped.stdout_text, "0\n") << "the stopped one was killed, not left behind";
}

TEST_F(CommandTemplateTest, AnAttackOnOneSandboxsTemplateLeavesAnotherAlone) {
  ContainerDirs other_dirs(harness->runtime->options().host_uid, harness->runtime->options().host_gid);
  auto other = harness->start(harness->options_for(other_dirs));
  auto other_template = harness->exec(*other, kFindTemplate).stdout_text;
  ASSERT_FALSE(other_template.empty());
  run(kKillTemplate);
  run("true");
  run(kStopTemplate);
  for (int i = 0; i < 5; ++i) {
    auto r = harness->exec(*other, "echo other");
    ASSERT_EQ(r.stdout_text, "other\n") << r.stderr_text;
  }
  EXPECT_EQ(harness->exec(*other, kFindTemplate).stdout_text, other_template) << "untouched";
  expect_commands_work();
  harness->stop(*other);
}

// A fork bomb fills the pids limit: the template's clone fails, and the command fails
// cleanly (as a directly made child would); after it, commands run again.
TEST_F(CommandTemplateTest, AFullPidsLimitFailsCleanlyAndRecovers) {
  harness->stop(*sandbox);
  rt::CgroupLimits limits;
  limits.pids = 32;
  auto options = harness->options_for(*dirs);
  options.limits = limits;
  sandbox = harness->start(options);
  auto bomb = harness->exec(*sandbox, "bomb() { bomb | bomb & }; bomb; sleep 30", 3s);
  EXPECT_EQ(bomb.return_code, 124);
  expect_commands_work();
}

// A child of the template that cannot reach execve says why through its region (it has
// no report pipe): here the workspace is made unenterable from the host, so the next
// commands' chdir fails. Each call fails with that step and reason, PID 1 keeps serving,
// and once the folder is usable again commands run as always.
TEST_F(CommandTemplateTest, AChildThatCannotStartSaysWhyAndTheNextCommandsRun) {
  ASSERT_EQ(run("true").return_code, 0);
  const fs::perms usable = fs::status(dirs->workspace).permissions();
  fs::permissions(dirs->workspace, fs::perms::none);
  for (int i = 0; i < 3; ++i) {
    try {
      auto r = run("true");
      ADD_FAILURE() << "ran in a workspace it may not enter: " << r.return_code;
    } catch (const rt::SandboxError& e) {
      EXPECT_NE(std::string(e.what()).find("chdir(cwd)"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::strerror(EACCES)), std::string::npos) << e.what();
    }
  }
  fs::permissions(dirs->workspace, usable);
  expect_commands_work();
}

}  // namespace
