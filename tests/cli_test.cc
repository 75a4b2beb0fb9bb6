// `sandboxd run` and `sandboxd version`, as a user runs them.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <regex>

#include "sandbox_harness.h"

using namespace sandboxd::testing;

namespace {

struct Outcome {
  std::string out, err;
  int code = -1;
};

Outcome run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), SANDBOXD_PATH);
  ContainerDirs tmp(0, 0);
  fs::path out_file = tmp.root / "out", err_file = tmp.root / "err";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  Outcome outcome;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) return outcome;
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  waitpid(pid, &status, 0);
  outcome.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  outcome.out = read_text(out_file);
  outcome.err = read_text(err_file);
  return outcome;
}

TEST(Cli, VersionPrintsTheVersion) {
  auto r = run_cli({"version"});
  EXPECT_EQ(r.code, 0);
  // The commit is the source tree's (40 hex digits, "-dirty" with uncommitted changes)
  // or "unknown" for a tree without git (a tarball); the build type is CMake's.
  EXPECT_TRUE(std::regex_match(
      r.out, std::regex(std::string("sandboxd ") + SANDBOXD_VERSION +
                        "\ncommit: ([0-9a-f]{40}(-dirty)?|unknown)\nbuild type: [A-Za-z]+\n")))
      << r.out;
}

TEST(Cli, RunPassesOutputAndExitStatusThrough) {
  auto r = run_cli({"run", "--", "echo hi; echo err >&2; whoami; exit 3"});
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, "hi\nagent\n");
  EXPECT_EQ(r.err, "err\n");
  auto words = run_cli({"run", "--", "printf", "%s|", "a b", "$HOME"});
  EXPECT_EQ(words.out, "a b|$HOME|") << "several words are one command, quoted";
}

TEST(Cli, RunTimesOut) {
  auto r = run_cli({"run", "--timeout", "1", "--", "echo before; sleep 30"});
  EXPECT_EQ(r.code, 124);
  EXPECT_EQ(r.out, "before\n");
  EXPECT_EQ(r.err, "Command timed out after 1s.\n");
}

TEST(Cli, RunKeepsFilesInTheContainerDirectory) {
  ContainerDirs tmp(0, 0);
  fs::path container = tmp.root / "c";
  auto first = run_cli({"run", "--container", container, "--",
                        "echo data > result.txt; cp result.txt /mnt/user-data/outputs/"});
  EXPECT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(read_text(container / "workspace" / "result.txt"), "data\n");
  EXPECT_EQ(read_text(container / "outputs" / "result.txt"), "data\n");
  EXPECT_TRUE(fs::is_directory(container / "uploads"));
  auto second = run_cli({"run", "--container", container, "--", "cat result.txt"});
  EXPECT_EQ(second.out, "data\n");
}

TEST(Cli, RunEnforcesMemoryAndWorkspaceLimits) {
  auto oom = run_cli({"run", "--memory", "32Mi", "--", "python3 -c 'b = bytearray(256 << 20)'"});
  EXPECT_EQ(oom.code, 137);
  ContainerDirs tmp(0, 0);
  fs::path container = tmp.root / "c";
  auto full = run_cli({"run", "--container", container, "--workspace-size", "16Mi", "--",
                       "head -c 32M /dev/zero > big; echo rc=$?"});
  EXPECT_EQ(full.out, "rc=1\n");
  EXPECT_NE(full.err.find("No space left on device"), std::string::npos) << full.err;
  EXPECT_TRUE(fs::exists(container / "volume.img"));
}

TEST(Cli, RunRejectsBadArguments) {
  auto r = run_cli({"run", "--memory", "lots", "--", "true"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("lots"), std::string::npos) << r.err;
  auto none = run_cli({"run"});
  EXPECT_NE(none.code, 0);
}

// Kubernetes hands tokens and the pod's identity over as environment variables
// (deploy/kubernetes): they win over the file and are checked under the key's path.
TEST(Cli, ConfigCheckTakesValuesFromTheEnvironment) {
  ContainerDirs tmp(0, 0);
  const fs::path file = tmp.root / "config.yaml";
  write_text(file,
             "server: { listen: \"127.0.0.1:8080\" }\nauth: { adminToken: \"a-long-enough-admin-token\" }\n");
  auto check = [&] { return run_cli({"config", "check", file.string()}); };
  EXPECT_EQ(check().code, 0);
  setenv("SANDBOXD_ADMIN_TOKEN", "too-short", 1);
  auto short_admin = check();
  EXPECT_EQ(short_admin.code, 2);
  EXPECT_NE(short_admin.err.find("auth.adminToken: must be at least 16 characters"), std::string::npos)
      << short_admin.err;
  setenv("SANDBOXD_ADMIN_TOKEN", "another-long-admin-token #: x", 1);
  setenv("SANDBOXD_AUTH_TOKENS", "[{token: tiny, owner: alice}]", 1);
  auto short_token = check();
  EXPECT_NE(short_token.err.find("auth.tokens[0].token: must be at least 8 characters"), std::string::npos)
      << short_token.err;
  setenv("SANDBOXD_AUTH_TOKENS", "[{token: long-enough-token, owner: alice}", 1);
  auto broken = check();
  EXPECT_EQ(broken.code, 2);
  EXPECT_NE(broken.err.find("SANDBOXD_AUTH_TOKENS: not valid YAML"), std::string::npos) << broken.err;
  setenv("SANDBOXD_AUTH_TOKENS", "[{token: long-enough-token, owner: alice}]", 1);
  auto good = check();
  unsetenv("SANDBOXD_AUTH_TOKENS");
  unsetenv("SANDBOXD_ADMIN_TOKEN");
  EXPECT_EQ(good.code, 0) << good.err;
}

}  // namespace
