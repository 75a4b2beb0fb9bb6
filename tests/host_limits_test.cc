// Host-wide tables, attacked from the attacker's side (code in a sandbox, or a client
// with an owner's token), each scaled down to be safe on a shared machine: the process
// table (a cap on all sandboxes together, a per-owner cap on running sandboxes, 503/429
// with Retry-After instead of a 500), per-user kernel counters (inotify charged to the
// sandbox's own user namespace, never to root), open files and OOM scores. Each shows
// that another owner's work goes on (or comes back once the attacker is gone).

#include <gtest/gtest.h>
#include <sys/inotify.h>

#include <atomic>
#include <regex>
#include <thread>

#include "eventually.h"
#include "server_harness.h"

using namespace sandboxd::testing;
namespace bj = boost::json;

namespace {

// Forks children that sleep (stdio closed, so the command can end) until fork fails or
// `most` are running; prints how many it made.
const char* kForkMany =
    "import os, time\n"
    "made = 0\n"
    "for i in range(%d):\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError:\n"
    "        break\n"
    "    if pid == 0:\n"
    "        fd = os.open('/dev/null', os.O_RDWR)\n"
    "        for n in (0, 1, 2): os.dup2(fd, n)\n"
    "        time.sleep(600)\n"
    "        os._exit(0)\n"
    "    made += 1\n"
    "print(made)\n";

// Holds inotify instances until inotify_init fails; writes how many to a file; sleeps.
const char* kInotifyHog =
    "import ctypes, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "held = []\n"
    "while len(held) < 100000:\n"
    "    fd = libc.inotify_init()\n"
    "    if fd < 0: break\n"
    "    held.append(fd)\n"
    "open('/tmp/held.tmp', 'w').write(str(len(held)))\n"
    "import os; os.rename('/tmp/held.tmp', '/tmp/held')\n"
    "time.sleep(600)\n";

class HostLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Scaled down: 150 processes and 400 MiB for all sandboxes together (a sandbox alone
    // may have 512 processes and no memory limit), two running sandboxes per owner, no
    // pre-started sandboxes (they would count); four commands at once, three per owner.
    server = new ServerProcess(
        "quotas:\n  runningSandboxesPerOwner: 2\n  containersPerOwner: 5\n"
        "capacity:\n  maxConcurrentExecutions: 4\n  maxConcurrentExecutionsPerOwner: 3\n  queueTimeoutSec: "
        "20\n"
        "runtime:\n  sandboxesPidsMax: 150\n  sandboxesMemoryMax: 400Mi\n  prestartedSandboxes: 0\n");
    work = new fs::path(server->dir() / "client");
    fs::create_directories(*work);
  }
  static void TearDownTestSuite() {
    delete server;
    delete work;
  }
  // POSTs a command; returns "<status>\n<headers and body>".
  std::string bash_raw(const std::string& container, const std::string& command,
                       const std::string& token = "secret-alice", int timeout_sec = 0) {
    static std::atomic<int> n{0};
    fs::path body = *work / ("body-" + std::to_string(++n) + ".json");
    bj::object input{{"command", command}};
    if (timeout_sec > 0) input["timeout"] = timeout_sec;
    std::ofstream(body) << bj::serialize(input);
    return server->curl("-i -X POST " + server->base() + "/containers/" + container +
                            "/tools/bash_code_execution -d @" + body.string(),
                        token);
  }
  bj::object bash(const std::string& container, const std::string& command,
                  const std::string& token = "secret-alice") {
    std::string raw = bash_raw(container, command, token);
    return json(raw.substr(raw.find("\r\n\r\n") + 4)).as_object();
  }
  static std::string status_line(const std::string& raw) { return raw.substr(0, raw.find("\r\n")); }
  void remove_container(const std::string& container, const std::string& token = "secret-alice") {
    server->curl("-X DELETE " + server->base() + "/containers/" + container, token);
  }
  std::string script(const std::string& name, const std::string& text) {
    return "cat > /tmp/" + name + " <<'PY'\n" + text + "PY\n";
  }

  static ServerProcess* server;
  static fs::path* work;
};
ServerProcess* HostLimitsTest::server = nullptr;
fs::path* HostLimitsTest::work = nullptr;

// --- the process table -------------------------------------------------------------
TEST_F(HostLimitsTest, AllSandboxesTogetherStayUnderTheTotalPidsCapAndOthersGetA503NotA500) {
  // Bob's sandbox runs first.
  EXPECT_EQ(bash("bob-pids", "echo bob-ok", "secret-bob-x").at("stdout"), "bob-ok\n");
  // Alice forks as many sleepers as she can (her sandbox alone may have 512).
  char forker[1024];
  std::snprintf(forker, sizeof forker, kForkMany, 400);
  auto attack = bash("alice-pids", script("fork.py", forker) + "python3 /tmp/fork.py");
  ASSERT_TRUE(attack.contains("stdout")) << bj::serialize(attack);
  const int made = std::stoi(std::string(attack.at("stdout").as_string()));
  EXPECT_LT(made, 150) << "the total cap on all sandboxes did not hold";
  EXPECT_GT(made, 20);
  // Bob, out of processes because of her, gets a clear 503 with Retry-After (or his
  // command still fits); never a 500. The server itself keeps answering.
  std::string bob = bash_raw("bob-pids", "echo bob-ok", "secret-bob-x");
  const std::string line = status_line(bob);
  EXPECT_EQ(line.find(" 500"), std::string::npos) << bob;
  if (line.find(" 503") != std::string::npos) {
    EXPECT_NE(bob.find("Retry-After: "), std::string::npos) << bob;
    EXPECT_NE(bob.find("\"overloaded_error\""), std::string::npos) << bob;
  }
  // A new sandbox of his cannot start now: 503 overloaded_error with Retry-After.
  std::string fresh = bash_raw("bob-pids-new", "echo bob-ok", "secret-bob-x");
  EXPECT_NE(status_line(fresh).find(" 503"), std::string::npos) << fresh;
  EXPECT_NE(fresh.find("Retry-After: "), std::string::npos) << fresh;
  EXPECT_NE(fresh.find("\"overloaded_error\""), std::string::npos) << fresh;
  EXPECT_EQ(server->status(server->url("/health")), 200);
  // Once her sandbox is gone, Bob's work goes on.
  remove_container("alice-pids");
  EXPECT_EQ(bash("bob-pids", "echo bob-ok", "secret-bob-x").at("stdout"), "bob-ok\n");
  EXPECT_EQ(bash("bob-pids-new", "echo bob-ok", "secret-bob-x").at("stdout"), "bob-ok\n");
  remove_container("bob-pids", "secret-bob-x");
  remove_container("bob-pids-new", "secret-bob-x");
}

TEST_F(HostLimitsTest, AnOwnerPastTheRunningSandboxCapGetsA429AndOthersGoOn) {
  // Two busy sandboxes of Alice's: each command waits for an uploaded "go". (It waits
  // on the file, not on a count of sleeps, with a command timeout far past anything
  // this test waits for: on a loaded machine the default 60 s ran out while the test
  // was still starting Bob's sandbox, and a finished command is an idle sandbox that
  // the third one may replace.)
  const std::string wait_for_go =
      "touch /mnt/user-data/outputs/started; "
      "while [ ! -e /mnt/user-data/uploads/go ]; do sleep 0.1; done; echo released";
  std::vector<std::thread> busy;
  std::vector<std::string> answers(2);
  for (int i = 0; i < 2; ++i)
    busy.emplace_back([&, i] {
      answers[i] = bash_raw("alice-busy-" + std::to_string(i), wait_for_go, "secret-alice", 600);
    });
  // Both commands run before the third sandbox is asked for: the 429 depends on it. (A
  // finished wait means the command is running, however long its sandbox took to start.)
  std::ofstream(*work / "go") << "go";
  auto release = [&] {
    for (int i = 0; i < 2; ++i)
      server->curl("-X POST '" + server->base() + "/files?scope_id=alice-busy-" + std::to_string(i) +
                   "' -F file=@" + (*work / "go").string());
    for (auto& thread : busy)
      if (thread.joinable()) thread.join();
  };
  const std::string started = file_id("/mnt/user-data/outputs/started");
  for (int i = 0; i < 2; ++i) {
    bool running = false;
    for (int tries = 0; tries < 1200 && !running; ++tries) {
      running = server->status("'" + server->base() + "/files/" + started + "/content?scope_id=alice-busy-" +
                               std::to_string(i) + "'") == 200;
      if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!running) release();
    ASSERT_TRUE(running) << "alice-busy-" << i << "'s command did not start: " << answers[i];
  }
  // A third sandbox of hers: refused with 429 and Retry-After, none of hers stopped.
  std::string third = bash_raw("alice-third", "echo third");
  EXPECT_NE(status_line(third).find(" 429"), std::string::npos) << third;
  EXPECT_NE(third.find("Retry-After: "), std::string::npos) << third;
  EXPECT_NE(third.find("\"rate_limit_error\""), std::string::npos) << third;
  EXPECT_NE(third.find("sandboxes of this owner"), std::string::npos) << third;
  // Bob is not affected.
  EXPECT_EQ(bash("bob-busy", "echo bob-ok", "secret-bob-x").at("stdout"), "bob-ok\n");
  // Released, Alice's commands finish; then her third sandbox starts (an idle one of
  // hers makes room).
  release();
  for (const auto& answer : answers) EXPECT_NE(answer.find("released"), std::string::npos) << answer;
  EXPECT_EQ(bash("alice-third", "echo third").at("stdout"), "third\n");
  for (const char* c : {"alice-busy-0", "alice-busy-1", "alice-third"}) remove_container(c);
  remove_container("bob-busy", "secret-bob-x");
}

// --- per-owner quotas --------------------------------------------------------------
TEST_F(HostLimitsTest, AnOwnerPastTheContainerQuotaGetsA403AndOthersGoOn) {
  std::ofstream(*work / "q.txt") << "q";
  auto upload = [&](const std::string& container, const std::string& token) {
    return server->curl("-i -X POST '" + server->base() + "/files?scope_id=" + container + "' -F file=@" +
                            (*work / "q.txt").string(),
                        token);
  };
  for (int i = 0; i < 5; ++i) {
    std::string made = upload("alice-q-" + std::to_string(i), "secret-alice");
    EXPECT_NE(status_line(made).find(" 20"), std::string::npos) << made;
  }
  std::string refused = upload("alice-q-5", "secret-alice");
  EXPECT_NE(status_line(refused).find(" 403"), std::string::npos) << refused;
  EXPECT_NE(refused.find("\"permission_error\""), std::string::npos) << refused;
  EXPECT_NE(refused.find("quotas.containersPerOwner"), std::string::npos) << refused;
  // /metrics reports the quotas in force and the refusal.
  const std::string metrics = sh("curl -sS " + server->url("/metrics"));
  EXPECT_NE(metrics.find("sandboxd_quota_containers_per_owner 5\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("sandboxd_quota_running_sandboxes_per_owner 2\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("sandboxd_quota_executions_per_owner 3\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("reason=\"containers_quota\"} 1\n"), std::string::npos) << metrics;
  // Nothing of the refused container exists; an existing one still takes files.
  EXPECT_EQ(server->status("'" + server->base() + "/files?scope_id=alice-q-5'"), 404);
  EXPECT_NE(status_line(upload("alice-q-0", "secret-alice")).find(" 20"), std::string::npos);
  // Bob is not affected; once Alice deletes one, she may make another.
  EXPECT_NE(status_line(upload("bob-q", "secret-bob-x")).find(" 20"), std::string::npos);
  remove_container("alice-q-0");
  EXPECT_NE(status_line(upload("alice-q-5", "secret-alice")).find(" 20"), std::string::npos);
  for (int i = 1; i <= 5; ++i) remove_container("alice-q-" + std::to_string(i));
  remove_container("bob-q", "secret-bob-x");
}

// --- fairness ----------------------------------------------------------------------
TEST_F(HostLimitsTest, OneOwnersLongCommandsLeaveRoomForOthers) {
  // Alice sends as many long commands as the server runs at once (4), in two containers.
  std::vector<std::thread> busy;
  std::vector<std::string> answers(4);
  for (int i = 0; i < 4; ++i)
    busy.emplace_back([&, i] {
      answers[i] =
          bash_raw("alice-fair-" + std::to_string(i % 2),
                   "touch /mnt/user-data/outputs/started-" + std::to_string(i) +
                       "; for i in $(seq 600); do [ -e /mnt/user-data/uploads/go ] && break; sleep 0.1; "
                       "done; echo released");
    });
  // Her share (three) runs; the fourth waits in her own line, not in the global one.
  // (The commands of one container share its sandbox; two containers stay under her
  // running-sandbox cap.)
  auto started = [&] {
    int n = 0;
    for (int i = 0; i < 4; ++i)
      n += server->status("'" + server->base() + "/files/" +
                          file_id("/mnt/user-data/outputs/started-" + std::to_string(i)) +
                          "/content?scope_id=alice-fair-" + std::to_string(i % 2) + "'") == 200;
    return n;
  };
  ASSERT_TRUE(eventually([&] { return started() >= 3; }, std::chrono::seconds(30))) << server->log();
  // The fourth is in line (the metrics count it), and it has not started.
  auto queued = [&] {
    const std::string text = sh("curl -sS " + server->url("/metrics"));
    std::smatch m;
    return std::regex_search(text, m, std::regex("\nsandboxd_executions_queued ([0-9]+)\n")) ? std::stoi(m[1])
                                                                                             : -1;
  };
  ASSERT_TRUE(eventually([&] { return queued() == 1; })) << server->log();
  EXPECT_EQ(started(), 3);
  // Bob gets a slot at once instead of waiting behind her and getting a 429.
  std::string bob = bash_raw("bob-fair", "echo bob-ok", "secret-bob-x");
  EXPECT_NE(status_line(bob).find(" 200"), std::string::npos) << bob;
  EXPECT_NE(bob.find("bob-ok"), std::string::npos) << bob;
  // Released, all four of hers finish.
  std::ofstream(*work / "go") << "go";
  for (int i = 0; i < 2; ++i)
    server->curl("-X POST '" + server->base() + "/files?scope_id=alice-fair-" + std::to_string(i) +
                 "' -F file=@" + (*work / "go").string());
  for (auto& thread : busy) thread.join();
  for (const auto& answer : answers) EXPECT_NE(answer.find("released"), std::string::npos) << answer;
  for (const char* c : {"alice-fair-0", "alice-fair-1"}) remove_container(c);
  remove_container("bob-fair", "secret-bob-x");
}

// --- memory and CPU -------------------------------------------------------------------
TEST_F(HostLimitsTest, AllSandboxesTogetherStayUnderTheMemoryCapAndTheOomKillStaysInside) {
  EXPECT_EQ(bash("bob-memory", "echo bob-ok", "secret-bob-x").at("stdout"), "bob-ok\n");
  // No limit of its own, but 600 MiB is past what all sandboxes together may have.
  auto hog = bash("alice-memory", "python3 -c \"b = b'x' * (600 << 20); print('allocated')\"; echo rc=$?");
  EXPECT_EQ(hog.at("stdout"), "rc=137\n") << bj::serialize(hog);
  EXPECT_EQ(server->status(server->url("/health")), 200);
  EXPECT_EQ(bash("bob-memory", "echo bob-ok", "secret-bob-x").at("stdout"), "bob-ok\n");
  remove_container("alice-memory");
  remove_container("bob-memory", "secret-bob-x");
}

TEST_F(HostLimitsTest, HealthAndOtherOwnersAreServedDuringACpuStorm) {
  auto storm = bash(
      "alice-cpu",
      "for i in 1 2 3 4 5 6; do setsid timeout 20 sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 & "
      "done; echo started");
  EXPECT_EQ(storm.at("stdout"), "started\n") << bj::serialize(storm);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(server->status("-m 5 " + server->url("/health")), 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(bash("bob-cpu", "echo bob-ok", "secret-bob-x").at("stdout"), "bob-ok\n");
  remove_container("alice-cpu");
  remove_container("bob-cpu", "secret-bob-x");
}

// --- per-user kernel counters --------------------------------------------------------
TEST_F(HostLimitsTest, InotifyInstancesAreChargedToTheSandboxNeverToRoot) {
  // A background process in Alice's sandbox takes every inotify instance it can.
  auto start =
      bash("alice-inotify", script("hog.py", kInotifyHog) +
                                "setsid python3 /tmp/hog.py </dev/null >/dev/null 2>&1 & "
                                "for i in $(seq 300); do [ -e /tmp/held ] && break; sleep 0.1; done; "
                                "cat /tmp/held; echo; cat /proc/sys/user/max_inotify_instances");
  std::istringstream numbers(std::string(start.at("stdout").as_string()));
  int held = -1, cap = -1;
  numbers >> held >> cap;
  ASSERT_GT(cap, 0) << bj::serialize(start);
  // Capped by the sandbox's own limit, far below the host's per-user limit.
  EXPECT_EQ(held, cap) << bj::serialize(start);
  const int host_limit = std::stoi(read_file("/proc/sys/fs/inotify/max_user_instances"));
  EXPECT_LE(cap, std::max(1, host_limit / 16));
  // Root on the host still gets inotify instances...
  int fd = inotify_init1(IN_CLOEXEC);
  EXPECT_GE(fd, 0) << "root's inotify instances were taken by a sandbox";
  if (fd >= 0) close(fd);
  // ... and so does another owner's sandbox.
  auto bob = bash("bob-inotify", "python3 -c 'import ctypes; print(ctypes.CDLL(None).inotify_init() >= 0)'",
                  "secret-bob-x");
  EXPECT_EQ(bob.at("stdout"), "True\n") << bj::serialize(bob);
  remove_container("alice-inotify");
  remove_container("bob-inotify", "secret-bob-x");
}

// --- open files and OOM scores ---------------------------------------------------------
TEST_F(HostLimitsTest, SandboxProcessesHaveABoundedOpenFileLimitAndTheHighestOomScore) {
  auto r =
      bash("alice-rlimits", "ulimit -n; cat /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'");
  std::istringstream values(std::string(r.at("stdout").as_string()));
  uint64_t open_files = 0;
  int score = 0, child_score = 0;
  values >> open_files >> score >> child_score;
  // Per process, at most a quarter of fs.file-max over the sandbox's 512 processes.
  const uint64_t file_max = std::stoull(read_file("/proc/sys/fs/file-max"));
  EXPECT_GE(open_files, 64u) << bj::serialize(r);
  EXPECT_LE(open_files, std::max<uint64_t>(64, std::min<uint64_t>(4096, file_max / 4 / 512)))
      << bj::serialize(r);
  EXPECT_EQ(score, 1000);
  EXPECT_EQ(child_score, 1000);
  remove_container("alice-rlimits");
}

}  // namespace

// --- leaks -------------------------------------------------------------------------
namespace {
size_t folders_in(const fs::path& dir) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) n += entry.is_directory() ? 1 : 0;
  return n;
}
size_t mounts_under(const fs::path& dir) {
  std::istringstream info(read_file("/proc/self/mountinfo"));
  size_t n = 0;
  for (std::string line; std::getline(info, line);)
    n += line.find(" " + dir.string() + "/") != std::string::npos;
  return n;
}
}  // namespace

TEST(HostLimitsLeaks, DeletedContainersLeaveNoPreStartedSlotsBehind) {
  ServerProcess server("auth:\n  adminToken: admin-secret-for-tests-x\nruntime:\n  prestartedSandboxes: 1\n");
  const fs::path slots = server.data_dir() / "slots";
  auto wait_for_a_ready_sandbox = [&] {
    for (int tries = 0; tries < 300; ++tries) {
      auto view = json(server.curl(server.url("/admin/sandboxes"), "admin-secret-for-tests-x"));
      if (view.as_object().at("prestarted").to_number<int64_t>() >= 1) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  };
  ASSERT_TRUE(wait_for_a_ready_sandbox());
  const size_t mounts_of_one_slot = mounts_under(slots);
  ASSERT_GT(mounts_of_one_slot, 0u);
  // Six containers, each taking the pool's waiting sandbox (and so a slot of its own).
  fs::path body = server.dir() / "body.json";
  std::ofstream(body) << R"({"command": "echo ok"})";
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(wait_for_a_ready_sandbox());
    EXPECT_NE(server
                  .curl("-X POST " + server.base() + "/containers/leak-" + std::to_string(i) +
                        "/tools/bash_code_execution -d @" + body.string())
                  .find("\"ok\\n\""),
              std::string::npos);
  }
  EXPECT_GE(folders_in(slots), 6u);
  for (int i = 0; i < 6; ++i)
    server.curl("-X DELETE " + server.base() + "/containers/leak-" + std::to_string(i));
  ASSERT_TRUE(wait_for_a_ready_sandbox());
  // What stays: the waiting sandbox's slot and one free slot for the next refill.
  EXPECT_LE(folders_in(slots), 2u);
  EXPECT_LE(mounts_under(slots), 2 * mounts_of_one_slot);
  // The pool still hands out sandboxes.
  EXPECT_NE(server
                .curl("-X POST " + server.base() + "/containers/after/tools/bash_code_execution -d @" +
                      body.string())
                .find("\"ok\\n\""),
            std::string::npos);
}

// --- configuration ---------------------------------------------------------------------
TEST(HostLimitsConfig, TheNewKeysAreCheckedWithTheirPath) {
  const fs::path dir = fs::temp_directory_path() / ("sandboxd-hl-config-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto check = [&](const std::string& yaml) {
    std::ofstream(dir / "c.yaml") << yaml;
    return sh(std::string(SANDBOXD_PATH) + " config check " + (dir / "c.yaml").string() + " 2>&1");
  };
  EXPECT_NE(check("runtime: { sandboxesPidsMax: 0, sandboxesMemoryMax: none, sandboxesCpuMax: 0 }\n"
                  "quotas: { runningSandboxesPerOwner: 0, containersPerOwner: 10 }\n"
                  "capacity: { maxConcurrentExecutionsPerOwner: 4 }\n")
                .find(": ok"),
            std::string::npos);
  EXPECT_NE(check("runtime: { sandboxesMemoryMax: lots }\n").find("runtime.sandboxesMemoryMax"),
            std::string::npos);
  EXPECT_NE(check("runtime: { sandboxesPidsMax: -1 }\n").find("runtime.sandboxesPidsMax"), std::string::npos);
  EXPECT_NE(check("quotas: { containersPerOwner: x }\n").find("quotas.containersPerOwner"),
            std::string::npos);
  EXPECT_NE(check("quotas: { other: 1 }\n").find("quotas.other: unknown key"), std::string::npos);
  fs::remove_all(dir);
}
