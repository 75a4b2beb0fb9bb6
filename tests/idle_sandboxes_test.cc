// Many running sandboxes on one host, each with its container's volume mounted (a loop
// device and mounts on the host, cgroups in every hierarchy), and what stopping them
// leaves: the small-count twin of the 1,000-sandbox benchmark (bench/server_bench.cc,
// SANDBOXD_BENCH_ONLY=idle). A real `sandboxd serve` on loopback; the loop devices,
// mounts and cgroups are read from the host's own tables, scoped to this server's data
// directory and cgroup instance (other servers on the host do not count).
//
// Also: a command's process, while it waits for its command sharing PID 1's memory
// (clone(CLONE_VM)), can be signalled by the agent's own processes; nothing they send
// it may reach PID 1.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "host_leftovers.h"
#include "server_harness.h"

namespace {

using sandboxd::testing::ServerProcess;
using sandboxd::testing::sh;
namespace fs = std::filesystem;

constexpr int kSandboxes = 20;
const char* kAdminToken = "admin-token-for-idle-test";

using sandboxd::testing::host::cgroups;
using sandboxd::testing::host::instance_dirs;
using sandboxd::testing::host::loop_devices;
using sandboxd::testing::host::mounts;

std::string run(const ServerProcess& server, const std::string& container, const std::string& command) {
  auto reply = server.curl_json("-X POST -H 'Content-Type: application/json' " + server.base() +
                                "/containers/" + container + "/tools/bash_code_execution -d '" +
                                boost::json::serialize(boost::json::object{{"command", command}}) + "'");
  if (!reply.is_object() || !reply.as_object().contains("stdout"))
    return "error: " + boost::json::serialize(reply);
  return std::string(reply.at("stdout").as_string());
}

const std::string kConfig = "auth:\n  adminToken: \"" + std::string(kAdminToken) +
                            "\"\n"
                            "quotas: { runningSandboxesPerOwner: 0, containersPerOwner: 0 }\n"
                            "runtime: { prestartedSandboxes: 0 }\n";

TEST(IdleSandboxes, StoppingThemAllLeavesNoLoopDeviceMountOrCgroup) {
  ServerProcess server(kConfig);
  const fs::path data_dir = server.data_dir();
  for (int i = 0; i < kSandboxes; ++i)
    ASSERT_EQ(run(server, "idle-" + std::to_string(i), "echo ok"), "ok\n") << "container " << i;
  // All of them running at once, each with its own volume and cgroups.
  auto status = server.curl_json(server.url("/admin/sandboxes"), kAdminToken);
  ASSERT_TRUE(status.is_object()) << boost::json::serialize(status);
  size_t running = 0;
  for (const auto& entry : status.at("data").as_array())
    if (std::string(entry.at("container").as_string()).rfind("idle-", 0) == 0) ++running;
  EXPECT_EQ(running, static_cast<size_t>(kSandboxes));
  EXPECT_GE(loop_devices(data_dir), kSandboxes);
  EXPECT_GE(mounts(data_dir), kSandboxes);
  ASSERT_FALSE(instance_dirs(data_dir).empty()) << "no cgroup instance for " << data_dir;
  EXPECT_GE(cgroups(data_dir), kSandboxes);
  // A command in the last one works as in the first.
  EXPECT_EQ(run(server, "idle-0", "echo first"), "first\n");
  EXPECT_EQ(run(server, "idle-" + std::to_string(kSandboxes - 1), "echo last"), "last\n");

  // Stopped one by one through the admin API: no sandbox cgroup is left (the volumes
  // stay mounted while their containers are open, until idle or shutdown).
  for (int i = 0; i < kSandboxes; ++i)
    EXPECT_NE(server
                  .curl("-X POST " + server.url("/admin/sandboxes/idle-" + std::to_string(i) + "/stop"),
                        kAdminToken)
                  .find("\"stopped\""),
              std::string::npos);
  EXPECT_EQ(cgroups(data_dir), 0);

  // The server's shutdown closes every container: nothing of theirs is left on the host.
  EXPECT_EQ(server.stop(SIGTERM), 0);
  EXPECT_EQ(loop_devices(data_dir), 0);
  EXPECT_EQ(mounts(data_dir), 0);
  EXPECT_EQ(cgroups(data_dir), 0);
  EXPECT_TRUE(instance_dirs(data_dir).empty());
}

// The host pids of every running sandbox's PID 1.
std::vector<pid_t> pid1s(const ServerProcess& server) {
  std::vector<pid_t> pids;
  auto status = server.curl_json(server.url("/admin/sandboxes"), kAdminToken);
  if (!status.is_object() || !status.as_object().contains("data")) return pids;
  for (const auto& entry : status.at("data").as_array()) pids.push_back(entry.at("pid").to_number<pid_t>());
  return pids;
}

// Whether `pid` is a live process (a zombie counts as gone: it runs and holds nothing).
bool alive(pid_t pid) {
  const std::string stat = sandboxd::testing::read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto state_at = stat.rfind(')');
  return state_at != std::string::npos && stat.size() > state_at + 2 && stat[state_at + 2] != 'Z';
}

// SIGTERM while many sandboxes are busy (a command in flight in each, background
// processes in each): the server stops within cluster.shutdownGraceSec, and nothing of
// theirs is left on the host (mount, loop device, cgroup, process). Waiting the whole
// grace for the requests in flight, then stopping the sandboxes one by one, overran it.
TEST(IdleSandboxes, SigtermWithBusySandboxesStopsWithinTheGraceAndLeavesNothing) {
  constexpr int kBusy = 12;
  constexpr int kGraceSec = 8;
  ServerProcess server(kConfig + "cluster: { shutdownGraceSec: " + std::to_string(kGraceSec) + " }\n");
  const fs::path data_dir = server.data_dir();
  // Each container: ten processes left in the background, then a command that runs on
  // (its request stays in flight until the shutdown ends it).
  std::vector<FILE*> in_flight;
  for (int i = 0; i < kBusy; ++i) {
    const std::string id = "busy-" + std::to_string(i);
    ASSERT_EQ(run(server, id, "for i in $(seq 10); do sleep 600 & done; echo ok"), "ok\n") << id;
    const std::string body =
        boost::json::serialize(boost::json::object{{"command", "sleep 600"}, {"timeout", 900}});
    in_flight.push_back(popen(
        ("curl -s -m 120 -X POST -H 'Authorization: Bearer secret-alice' -H "
         "'Content-Type: application/json' " +
         server.base() + "/containers/" + id + "/tools/bash_code_execution -d '" + body + "' >/dev/null 2>&1")
            .c_str(),
        "r"));
  }
  // Every command in flight is running (each sandbox's commands: its shell's sleep).
  for (int i = 0; i < 200; ++i) {
    auto status = server.curl_json(server.url("/admin/sandboxes"), kAdminToken);
    int running = 0;
    if (status.is_object())
      for (const auto& entry : status.at("data").as_array())
        if (const auto& executing = entry.at("executing");
            executing.is_bool() ? executing.as_bool() : executing.to_number<int>() > 0)
          ++running;
    if (running == kBusy) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::vector<pid_t> pids = pid1s(server);
  ASSERT_EQ(pids.size(), static_cast<size_t>(kBusy));
  ASSERT_GE(mounts(data_dir), kBusy);

  const auto began = std::chrono::steady_clock::now();
  EXPECT_EQ(server.stop(SIGTERM), 0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  EXPECT_LT(took, kGraceSec) << "the shutdown overran its grace";
  std::printf("shutdown with %d busy sandboxes: %.1f s (grace %d s)\n", kBusy, took, kGraceSec);
  for (FILE* request : in_flight) pclose(request);
  EXPECT_EQ(loop_devices(data_dir), 0);
  EXPECT_EQ(mounts(data_dir), 0);
  EXPECT_EQ(cgroups(data_dir), 0);
  EXPECT_TRUE(instance_dirs(data_dir).empty());
  for (pid_t pid : pids) EXPECT_FALSE(alive(pid)) << "PID 1 " << pid << " outlived the server";
}

// What a server killed outright leaves (operations.md): its sandboxes end on their own,
// their volumes stay mounted with their loop devices, and the cgroup instance stays;
// host::clean, which a test that kills a server without starting it again calls (the
// harnesses' destructors), removes all of it.
TEST(IdleSandboxes, WhatAKilledServerLeavesEndsOrIsCleanedAfter) {
  ServerProcess server(kConfig);
  const fs::path data_dir = server.data_dir();
  for (const char* id : {"killed-a", "killed-b"})
    ASSERT_EQ(run(server, id, "sleep 600 >/dev/null 2>&1 & echo ok"), "ok\n") << id;
  const std::vector<pid_t> pids = pid1s(server);
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_EQ(server.stop(SIGKILL), -SIGKILL);
  EXPECT_GE(loop_devices(data_dir), 2);
  EXPECT_GE(mounts(data_dir), 2);
  // Each PID 1 exits once its control socket closes, its namespace's processes with it.
  for (int i = 0; i < 500; ++i) {
    if (std::none_of(pids.begin(), pids.end(), alive)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (pid_t pid : pids) EXPECT_FALSE(alive(pid)) << "PID 1 " << pid << " outlived the killed server";
  EXPECT_EQ(sandboxd::testing::host::clean(data_dir), "");
  EXPECT_EQ(loop_devices(data_dir), 0);
  EXPECT_EQ(mounts(data_dir), 0);
  EXPECT_EQ(cgroups(data_dir), 0);
  EXPECT_TRUE(instance_dirs(data_dir).empty());
}

// The host pid of the PID 1 of container `id`'s sandbox, or -1.
int64_t pid1_of(const ServerProcess& server, const std::string& id) {
  auto status = server.curl_json(server.url("/admin/sandboxes"), kAdminToken);
  if (!status.is_object() || !status.as_object().contains("data")) return -1;
  for (const auto& entry : status.at("data").as_array())
    if (entry.at("container").as_string() == id) return entry.at("pid").to_number<int64_t>();
  return -1;
}

TEST(IdleSandboxes, SignalsToAWaitingCommandProcessDoNotReachPid1) {
  ServerProcess server(kConfig);
  ASSERT_EQ(run(server, "sig", "echo ok"), "ok\n");
  const int64_t pid1 = pid1_of(server, "sig");
  ASSERT_GT(pid1, 0);
  // Every process the agent may signal, including the one PID 1 has ready for the next
  // command (which shares PID 1's memory until its execve): core-dumping and fatal
  // signals first, then SIGKILL.
  for (const char* signal : {"QUIT", "SEGV", "ABRT", "BUS", "TERM", "KILL"})
    run(server, "sig",
        std::string("for p in /proc/[0-9]*; do kill -") + signal + " ${p#/proc/} 2>/dev/null; done; true");
  // The sandbox is still the same one (PID 1 alive), and it still runs commands.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(run(server, "sig", "echo again"), "again\n");
  EXPECT_EQ(pid1_of(server, "sig"), pid1);
}

}  // namespace
