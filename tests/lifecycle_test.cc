// cgroup v2, crash recovery and the workspace size limit.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/magic.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "cgroup_paths.h"
#include "runtime/syscall_error.h"
#include "runtime/volume.h"
#include "sandbox_harness.h"
#include "server_harness.h"  // sh

using namespace sandboxd::testing;
using namespace std::chrono_literals;

namespace {

uint32_t kHostId = 101000;

// The v2 writer against a scratch tree laid out like a cgroup2 mount: this machine's
// controllers are all bound to v1 hierarchies, so limits cannot be enabled in a real
// cgroup2 mount here.
TEST(CgroupV2, WritesLimitsAndEnablesControllersDownTheTree) {
  ContainerDirs scratch(0, 0);
  fs::path root = scratch.root / "cgroup2";
  fs::path sandbox = root / "sandboxd" / "inst" / "sbx";
  fs::create_directories(sandbox);
  write_text(root / "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
  for (const auto& dir : {root, root / "sandboxd", root / "sandboxd" / "inst"})
    write_text(dir / "cgroup.subtree_control", "");
  for (const char* file : {"memory.max", "memory.swap.max", "pids.max", "cpu.max", "cgroup.procs"})
    write_text(sandbox / file, "");

  rt::CgroupOptions options;
  options.mode = "v2";
  options.v2_root = root;
  options.instance = "inst";
  auto backend = rt::detect_cgroups(options);
  ASSERT_EQ(backend->version(), "v2");
  rt::CgroupLimits limits;
  limits.memory_bytes = 512ull << 20;
  limits.pids = 100;
  limits.cpu_millis = 500;
  auto created = backend->create("sbx", limits);
  for (const auto& dir : {root, root / "sandboxd", root / "sandboxd" / "inst"})
    EXPECT_EQ(read_text(dir / "cgroup.subtree_control"), "+cpu +memory +pids") << dir;
  EXPECT_EQ(read_text(sandbox / "memory.max"), "536870912");
  EXPECT_EQ(read_text(sandbox / "memory.swap.max"), "0");
  EXPECT_EQ(read_text(sandbox / "pids.max"), "100");
  EXPECT_EQ(read_text(sandbox / "cpu.max"), "50000 100000");
  EXPECT_EQ(created.join_dirs, std::vector<std::string>{sandbox.string()});
  EXPECT_EQ(created.exec_parent, sandbox.string());
}

// The CPU time a sandbox used, as the E2B metrics sample it: cpu.stat's usage_usec.
TEST(CgroupV2, ReadsTheSandboxCpuUsage) {
  ContainerDirs scratch(0, 0);
  fs::path root = scratch.root / "cgroup2";
  fs::path sandbox = root / "sandboxd" / "inst" / "sbx";
  fs::create_directories(sandbox);
  write_text(root / "cgroup.controllers", "cpu memory pids\n");
  for (const auto& dir : {root, root / "sandboxd", root / "sandboxd" / "inst"})
    write_text(dir / "cgroup.subtree_control", "");
  rt::CgroupOptions options{"v2", root, "/sys/fs/cgroup", "inst"};
  auto backend = rt::detect_cgroups(options);
  EXPECT_FALSE(backend->cpu_usage_usec("sbx"));  // no cpu.stat: not measured
  write_text(sandbox / "cpu.stat", "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n");
  EXPECT_EQ(backend->cpu_usage_usec("sbx"), std::optional<uint64_t>(1234567));
  write_text(sandbox / "cpu.stat", "nr_periods 0\nuser_usec 5\n");
  EXPECT_FALSE(backend->cpu_usage_usec("sbx"));
}

TEST(CgroupV2, RefusesALimitWhoseControllerIsMissing) {
  ContainerDirs scratch(0, 0);
  fs::path root = scratch.root / "cgroup2";
  fs::create_directories(root / "sandboxd" / "inst");
  write_text(root / "cgroup.controllers", "pids\n");
  for (const auto& dir : {root, root / "sandboxd", root / "sandboxd" / "inst"})
    write_text(dir / "cgroup.subtree_control", "");
  rt::CgroupOptions options{"v2", root, "/sys/fs/cgroup", "inst"};
  auto backend = rt::detect_cgroups(options);
  rt::CgroupLimits limits;
  limits.pids = 0;
  limits.memory_bytes = 1 << 30;
  EXPECT_THROW(backend->create("sbx", limits), rt::SyscallError);
}

// A whole sandbox on a real cgroup2 hierarchy (the hybrid layout's "unified" mount, or
// the host's own on a pure v2 machine): PID 1 joins it, each execution gets a child
// cgroup, and a timeout empties that child with cgroup.kill.
TEST(CgroupV2, SandboxOnARealCgroup2Hierarchy) {
  std::string v2_root;
  for (const char* candidate : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    struct statfs st;
    if (statfs(candidate, &st) == 0 && st.f_type == CGROUP2_SUPER_MAGIC) {
      v2_root = candidate;
      break;
    }
  }
  if (v2_root.empty()) GTEST_SKIP() << "no cgroup2 mount on this machine";
  rt::RuntimeOptions options;
  options.cgroups.mode = "v2";
  options.cgroups.v2_root = v2_root;
  Harness harness(options);
  ASSERT_EQ(harness.runtime->cgroups().version(), "v2");
  ContainerDirs dirs(kHostId, kHostId);
  auto sandbox_options = harness.options_for(dirs);
  std::string controllers = read_text(fs::path(v2_root) / "cgroup.controllers");
  if (controllers.find("pids") == std::string::npos) sandbox_options.limits.pids = 0;
  auto sandbox = harness.start(sandbox_options);
  fs::path cgroup = sandbox_cgroup_paths(*harness.runtime, sandbox->name()).exec_parent;
  EXPECT_EQ(cgroup, fs::path(v2_root) / "sandboxd" / harness.runtime->options().instance / sandbox->name());
  EXPECT_TRUE(fs::exists(cgroup / "cgroup.kill"));
  // PID 1 and the command template sit in the sandbox cgroup; the child kept ready for
  // the next command moves into its own execution cgroup right after it is cloned. The
  // template is the other process that has no session of its own (the child calls
  // setsid first thing).
  auto pid1_and_template_only = [&](const std::string& procs) {
    std::istringstream lines(procs);
    std::vector<std::string> pids;
    for (std::string line; std::getline(lines, line);) pids.push_back(line);
    if (pids.size() != 2) return false;
    std::string pid1 = std::to_string(sandbox->pid());
    std::string other = pids[0] == pid1 ? pids[1] : pids[1] == pid1 ? pids[0] : "";
    if (other.empty()) return false;
    std::string stat = read_text(fs::path("/proc") / other / "stat");
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));
    std::string state, ppid, pgrp, session;
    fields >> state >> ppid >> pgrp >> session;
    return ppid == pid1 && session != other;
  };
  std::string procs;
  for (int i = 0; i < 200; ++i) {
    procs = read_text(cgroup / "cgroup.procs");
    if (pid1_and_template_only(procs)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(pid1_and_template_only(procs))
      << "PID 1 and the template alone in the sandbox cgroup: " << procs;
  auto r =
      harness.exec(*sandbox, "cat /proc/self/cgroup | grep -o '0::.*'; setsid sleep 1000 & sleep 1000", 1s);
  EXPECT_EQ(r.return_code, 124);
  EXPECT_EQ(r.stdout_text, "0::/e1\n") << "the cgroup namespace is rooted at the sandbox";
  auto after = harness.exec(*sandbox, "pgrep -c sleep");
  EXPECT_EQ(after.stdout_text, "0\n");
  harness.stop(*sandbox);
  EXPECT_FALSE(fs::exists(cgroup));
}

// A cgroup v2 Kubernetes node: the pod has a cgroup namespace of its own, so v2_root is
// the pod's cgroup (not the host's root) and the server sits in it. The kernel refuses
// to enable a controller for the children of a non-root cgroup that holds processes
// (EBUSY); the backend moves them into a leaf first. Reproduced on a real cgroup2 mount:
// a "pod" cgroup holding a process, and a controller the host leaves to the unified
// hierarchy (hugetlb on a v1 host; any on a pure v2 host).
TEST(CgroupV2, APodCgroupHoldingTheServerIsDelegatedThroughALeaf) {
  fs::path mount_point = fs::temp_directory_path() / ("sandboxd-cgroup2-" + unique_suffix());
  fs::create_directories(mount_point);
  ASSERT_EQ(mount("none", mount_point.c_str(), "cgroup2", 0, nullptr), 0)
      << "mount cgroup2: " << strerror(errno);
  std::string available = read_text(mount_point / "cgroup.controllers");
  std::string controller;
  for (const char* candidate : {"hugetlb", "pids", "memory", "cpu"})
    if (available.find(candidate) != std::string::npos) {
      controller = candidate;
      break;
    }
  ASSERT_FALSE(controller.empty()) << "no controller in the unified hierarchy: " << available;
  {  // the host's root hands it down to the pod (the root is exempt from the rule)
    std::ofstream root_control(mount_point / "cgroup.subtree_control");
    root_control << "+" << controller;
  }
  const fs::path pod = mount_point / ("pod-" + unique_suffix());
  fs::create_directories(pod);
  pid_t server = fork();
  if (server == 0) {
    pause();
    _exit(0);
  }
  {
    std::ofstream procs(pod / "cgroup.procs");
    procs << server;
  }
  ASSERT_EQ(read_text(pod / "cgroup.procs"), std::to_string(server) + "\n");
  {  // the rule this is about: a process in the pod, so no controller for its children
    int fd = open((pod / "cgroup.subtree_control").c_str(), O_WRONLY | O_CLOEXEC);
    std::string enable = "+" + controller;
    EXPECT_EQ(write(fd, enable.data(), enable.size()), -1);
    EXPECT_EQ(errno, EBUSY);
    close(fd);
  }

  rt::CgroupOptions options;
  options.mode = "v2";
  options.v2_root = pod;
  options.instance = "inst";
  options.v2_controllers = {controller};
  auto backend = rt::detect_cgroups(options);
  ASSERT_EQ(backend->version(), "v2");
  EXPECT_NE(read_text(pod / "cgroup.subtree_control").find(controller), std::string::npos);
  EXPECT_NE(read_text(pod / "sandboxd" / "inst" / "cgroup.controllers").find(controller), std::string::npos)
      << "handed down to the instance";
  EXPECT_EQ(read_text(pod / "cgroup.procs"), "") << "the pod's cgroup holds no process now";
  EXPECT_EQ(read_text(pod / "sandboxd-server" / "cgroup.procs"), std::to_string(server) + "\n");
  auto created = backend->create("sbx", rt::CgroupLimits{0, 0, 0});
  EXPECT_EQ(created.join_dirs, std::vector<std::string>{(pod / "sandboxd" / "inst" / "sbx").string()});
  EXPECT_TRUE(fs::exists(pod / "sandboxd" / "inst" / "sbx" / "cgroup.procs"));
  backend->destroy("sbx");
  backend->remove_instance();
  EXPECT_FALSE(fs::exists(pod / "sandboxd" / "inst"));

  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);
  for (const auto& dir : {pod / "sandboxd", pod / "sandboxd-server", pod})
    EXPECT_EQ(rmdir(dir.c_str()), 0) << dir << ": " << strerror(errno);
  EXPECT_EQ(umount2(mount_point.c_str(), MNT_DETACH), 0);
  fs::remove(mount_point);
}

// A server killed with SIGKILL leaves running sandboxes (here PID 1 is even stopped, so
// it cannot notice its socket closing) and mounted volumes; the next server with the
// same instance removes all of it.
// The crash test's "server" runs in a process of its own, this binary started afresh
// with only that test selected, not a fork of this process: earlier tests leave threads
// here (the runtime's user-namespace helpers), and a fork of a threaded process can
// inherit a lock one of them held, which hangs the child before it starts anything.
constexpr const char* kCrashServerEnv = "SANDBOXD_TEST_CRASH_SERVER";

// The server's part: start a sandbox with a background process, report its PID 1 on the
// descriptor, and wait to be killed. `spec`: instance, volume image, volume mount,
// uploads folder and the descriptor, one per line.
[[noreturn]] void crashing_server(const std::string& spec) {
  std::istringstream lines(spec);
  std::string instance, image, mount, uploads, fd_text;
  std::getline(lines, instance);
  std::getline(lines, image);
  std::getline(lines, mount);
  std::getline(lines, uploads);
  std::getline(lines, fd_text);
  const int report = std::stoi(fd_text);
  rt::RuntimeOptions options;
  options.instance = instance;
  Harness harness(options);
  const fs::path volume_mount = mount;
  if (!rt::Volume::mount(image, volume_mount)) _exit(3);
  fs::create_directories(volume_mount / "workspace");
  fs::create_directories(volume_mount / "outputs");
  chown((volume_mount / "workspace").c_str(), kHostId, kHostId);
  chown((volume_mount / "outputs").c_str(), kHostId, kHostId);
  rt::SandboxOptions o;
  o.name = "victim";
  o.workspace_dir = volume_mount / "workspace";
  o.outputs_dir = volume_mount / "outputs";
  o.uploads_dir = uploads;
  auto sandbox = harness.start(o);
  harness.exec(*sandbox, "echo kept > kept.txt; sleep 1000 >/dev/null 2>&1 &");
  pid_t pid1 = sandbox->pid();
  (void)!write(report, &pid1, sizeof pid1);
  pause();
  _exit(0);
}

TEST(Recovery, ANewServerCleansWhatAKilledOneLeft) {
  if (const char* spec = getenv(kCrashServerEnv)) crashing_server(spec);
  std::string instance = "crash-" + unique_suffix();
  ContainerDirs data(0, 0);
  fs::path volume_image = data.root / "vol.img";
  fs::path volume_mount = data.root / "volumes" / "c1";
  fs::create_directories(volume_mount);
  ASSERT_TRUE(rt::Volume::create(volume_image, 16 << 20, kHostId, kHostId));
  // This process adopts the orphans, as the real server does.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);

  int report[2];
  ASSERT_EQ(pipe(report), 0);
  // Everything the exec needs is made before the fork: between fork and exec the child
  // of a threaded process may only make async-signal-safe calls.
  const std::string spec = instance + "\n" + volume_image.string() + "\n" + volume_mount.string() + "\n" +
                           data.uploads.string() + "\n" + std::to_string(report[1]) + "\n";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  env_strings.push_back(std::string(kCrashServerEnv) + "=" + spec);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=Recovery.ANewServerCleansWhatAKilledOneLeft";
  char* argv[] = {self.data(), filter.data(), nullptr};
  pid_t server = fork();
  if (server == 0) {
    close(report[0]);
    execve(self.c_str(), argv, envp.data());
    _exit(127);
  }
  close(report[1]);
  pid_t pid1 = 0;
  ASSERT_EQ(read(report[0], &pid1, sizeof pid1), static_cast<ssize_t>(sizeof pid1));
  close(report[0]);
  ASSERT_EQ(kill(pid1, SIGSTOP), 0);
  kill(server, SIGKILL);
  waitpid(server, nullptr, 0);
  ASSERT_EQ(kill(pid1, 0), 0) << "the sandbox outlived its server";
  ASSERT_TRUE(rt::Volume::is_mounted(volume_mount));
  // The victim's cgroups in the hierarchy this host uses are there, so that their
  // absence after the clean-up means the next server removed them.
  rt::RuntimeOptions options;
  options.instance = instance;
  const std::string version = cgroup_version_in_use(options.cgroups);
  auto cgroups = sandbox_cgroup_paths(version, options.cgroups, instance, "victim");
  ASSERT_FALSE(cgroups.always.empty());
  for (const auto& dir : cgroups.always)
    EXPECT_TRUE(fs::is_directory(dir)) << "left by the killed server: " << dir;

  Harness next(options);
  EXPECT_EQ(next.runtime->cgroups().version(), version);
  EXPECT_EQ(next.runtime->cleanup_stale(data.root / "volumes"), 1u);
  int status = 0;
  EXPECT_EQ(waitpid(pid1, &status, 0), pid1) << "PID 1 was killed";
  for (const auto& dir : cgroups.always) EXPECT_FALSE(fs::exists(dir)) << dir;
  if (!cgroups.cpu.empty()) {
    EXPECT_FALSE(fs::exists(cgroups.cpu)) << cgroups.cpu;
  }
  EXPECT_FALSE(rt::Volume::is_mounted(volume_mount));
  // The files written before the crash are intact.
  ASSERT_TRUE(rt::Volume::mount(volume_image, volume_mount));
  EXPECT_EQ(read_text(volume_mount / "workspace" / "kept.txt"), "kept\n");
  rt::Volume::unmount(volume_mount);
}

TEST(Volume, WorkspaceAndOutputsShareAHardLimit) {
  Harness harness;
  ContainerDirs data(kHostId, kHostId);
  fs::path image = data.root / "vol.img";
  fs::path mount = data.root / "vol";
  fs::create_directories(mount);
  ASSERT_TRUE(rt::Volume::create(image, 32 << 20, kHostId, kHostId));
  ASSERT_TRUE(rt::Volume::mount(image, mount));
  for (const char* sub : {"workspace", "outputs"}) {
    fs::create_directories(mount / sub);
    ASSERT_EQ(chown((mount / sub).c_str(), kHostId, kHostId), 0);
  }
  auto o = harness.options_for(data);
  o.workspace_dir = mount / "workspace";
  o.outputs_dir = mount / "outputs";
  auto sandbox = harness.start(o);
  auto r = harness.exec(*sandbox, R"(
    head -c 12M /dev/urandom > first.bin && md5sum first.bin > first.md5 && echo first-ok
    head -c 40M /dev/zero > /mnt/user-data/outputs/big.bin; echo big=$?
    head -c 1M /dev/zero > more.bin; echo more=$?
    md5sum -c first.md5 >/dev/null && echo first-intact)");
  EXPECT_NE(r.stdout_text.find("first-ok\nbig=1\n"), std::string::npos) << r.stdout_text << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("No space left on device"), std::string::npos) << r.stderr_text;
  EXPECT_NE(r.stdout_text.find("first-intact"), std::string::npos);
  harness.stop(*sandbox);
  rt::Volume::unmount(mount);
  EXPECT_FALSE(rt::Volume::is_mounted(mount));
  // Remounted: everything that fit is still there.
  ASSERT_TRUE(rt::Volume::mount(image, mount));
  EXPECT_EQ(fs::file_size(mount / "workspace" / "first.bin"), 12u << 20);
  rt::Volume::unmount(mount);
}

// The line of `dumpe2fs -h` that starts with `field`: of the primary superblock, or of
// the backup at block `backup` (of `block_size` bytes).
std::string superblock_field(const fs::path& image, const std::string& field, long backup = 0,
                             long block_size = 0) {
  int status = -1;
  const std::string which =
      backup > 0 ? " -o superblock=" + std::to_string(backup) + " -o blocksize=" + std::to_string(block_size)
                 : "";
  std::istringstream in(sh("dumpe2fs -h" + which + " " + image.string() + " 2>&1", &status));
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field, 0) == 0) return line;
  return "";
}

// The blocks holding backups of the superblock, as dumpe2fs lists them.
std::vector<long> backup_superblocks(const fs::path& image) {
  int status = -1;
  std::istringstream in(sh("dumpe2fs " + image.string() + " 2>&1", &status));
  std::vector<long> out;
  const std::string marker = "Backup superblock at ";
  for (std::string line; std::getline(in, line);)
    if (auto at = line.find(marker); at != std::string::npos)
      out.push_back(std::stol(line.substr(at + marker.size())));
  return out;
}

TEST(Volume, CopiesOfAPristineImageAreCleanFileSystemsEachWithItsOwnIdentity) {
  ContainerDirs data(kHostId, kHostId);
  const fs::path pristine = data.root / "pristine.img", a = data.root / "a.img", b = data.root / "b.img";
  ASSERT_TRUE(rt::Volume::create(pristine, 48 << 20, kHostId, kHostId));
  ASSERT_TRUE(rt::Volume::copy_pristine(pristine, a));
  ASSERT_TRUE(rt::Volume::copy_pristine(pristine, b));
  // Each copy passes a full check, its superblock checksum (over the new UUID) included.
  for (const auto& image : {a, b}) {
    int status = -1;
    const std::string report = sh("e2fsck -fn " + image.string() + " 2>&1", &status);
    EXPECT_EQ(status, 0) << image << ":\n" << report;
  }
  // A UUID and a directory hash seed of its own, in every backup of the superblock too
  // (each with its checksum right); the same size, the holes kept.
  const std::vector<long> backups = backup_superblocks(a);
  ASSERT_GE(backups.size(), 2u);  // 48 MiB: six groups of 8 MiB, backups in groups 1, 3 and 5
  const long block_size = std::stol(superblock_field(a, "Block size:").substr(strlen("Block size:")));
  for (const char* field : {"Filesystem UUID:", "Directory Hash Seed:"}) {
    const std::string original = superblock_field(pristine, field);
    ASSERT_FALSE(original.empty()) << field;
    EXPECT_NE(superblock_field(a, field), original);
    EXPECT_NE(superblock_field(b, field), original);
    EXPECT_NE(superblock_field(a, field), superblock_field(b, field));
    for (long backup : backups)
      EXPECT_EQ(superblock_field(a, field, backup, block_size), superblock_field(a, field));
  }
  for (long backup : backups) {
    int status = -1;
    const std::string report = sh("dumpe2fs -h -o superblock=" + std::to_string(backup) + " -o blocksize=" +
                                      std::to_string(block_size) + " " + a.string() + " 2>&1",
                                  &status);
    EXPECT_EQ(status, 0) << "the backup at " << backup << ":\n" << report;
    EXPECT_EQ(report.find("checksum"), std::string::npos) << "the backup at " << backup << ":\n" << report;
  }
  struct stat original {
  }, copy{};
  ASSERT_EQ(stat(pristine.c_str(), &original), 0);
  ASSERT_EQ(stat(a.c_str(), &copy), 0);
  EXPECT_EQ(copy.st_size, original.st_size);
  EXPECT_LE(copy.st_blocks, original.st_blocks);
  // Mounted, its root belongs to the sandbox's user and what is written stays.
  const fs::path mount = data.root / "a";
  fs::create_directories(mount);
  ASSERT_TRUE(rt::Volume::mount(a, mount));
  struct stat root {};
  ASSERT_EQ(stat(mount.c_str(), &root), 0);
  EXPECT_EQ(root.st_uid, kHostId);
  std::ofstream(mount / "kept.txt") << "kept";
  rt::Volume::unmount(mount);
  ASSERT_TRUE(rt::Volume::mount(a, mount));
  std::ifstream kept(mount / "kept.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "kept");
  rt::Volume::unmount(mount);
  // The pristine image was never mounted, and stays as mke2fs left it.
  EXPECT_NE(superblock_field(pristine, "Mount count:").find(" 0"), std::string::npos)
      << superblock_field(pristine, "Mount count:");
  // Anything else as the pristine image is refused, and nothing is left behind.
  const fs::path zeros = data.root / "zeros.img";
  std::ofstream(zeros) << std::string(1 << 16, '\0');
  auto refused = rt::Volume::copy_pristine(zeros, data.root / "c.img");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), rt::VolumeError::kFormatFailed);
  EXPECT_FALSE(fs::exists(data.root / "c.img"));
  EXPECT_FALSE(fs::exists(data.root / "c.img.tmp"));
}

// E2B's snapshots copy a volume while it is mounted and in use: the copy is taken frozen,
// so it is a clean file system (a full check passes, copy_pristine takes it), it holds what
// was written, and the volume is thawed after (writes go on). A folder that is not a
// mounted volume is refused, never frozen (it would freeze the host's file system).
TEST(Volume, AFrozenCopyOfAMountedVolumeIsACleanImageWithItsFiles) {
  ContainerDirs data(kHostId, kHostId);
  const fs::path image = data.root / "v.img", copy = data.root / "copy.img",
                 seeded = data.root / "seeded.img";
  ASSERT_TRUE(rt::Volume::create(image, 48 << 20, kHostId, kHostId));
  const fs::path mount = data.root / "v";
  fs::create_directories(mount);
  ASSERT_TRUE(rt::Volume::mount(image, mount));
  write_text(mount / "kept.txt", "before the copy\n");
  auto bytes = rt::Volume::copy_frozen(image, mount, copy);
  ASSERT_TRUE(bytes);
  struct stat copied {};
  ASSERT_EQ(stat(copy.c_str(), &copied), 0);
  EXPECT_EQ(*bytes, static_cast<uint64_t>(copied.st_blocks) * 512);
  EXPECT_FALSE(fs::exists(data.root / "copy.img.tmp"));
  write_text(mount / "after.txt", "thawed\n");  // would hang on a frozen volume
  int status = -1;
  const std::string report = sh("e2fsck -fn " + copy.string() + " 2>&1", &status);
  EXPECT_EQ(status, 0) << report;
  ASSERT_TRUE(rt::Volume::copy_pristine(copy, seeded));
  const fs::path seeded_mount = data.root / "seeded";
  fs::create_directories(seeded_mount);
  ASSERT_TRUE(rt::Volume::mount(seeded, seeded_mount));
  EXPECT_EQ(read_text(seeded_mount / "kept.txt"), "before the copy\n");
  EXPECT_FALSE(fs::exists(seeded_mount / "after.txt"));
  rt::Volume::unmount(seeded_mount);
  // Not a mount point: refused before anything is frozen or written.
  const fs::path plain = data.root / "plain";
  fs::create_directories(plain);
  EXPECT_THROW(rt::Volume::copy_frozen(image, plain, data.root / "never.img"), rt::SyscallError);
  EXPECT_FALSE(fs::exists(data.root / "never.img"));
  write_text(data.root / "host-writable.txt", "the host's file system was never frozen\n");
  rt::Volume::unmount(mount);
}

}  // namespace

namespace {

// A sandbox started before it has a container (its folders are empty slots) receives
// the container's folders when the server binds them onto the slots: writes land in the
// container, uploads stay read-only, nothing of the slot's previous life shows.
TEST(PreStarted, ASandboxReceivesItsContainerWhenClaimed) {
  Harness harness;
  ContainerDirs slot(kHostId, kHostId), container(kHostId, kHostId);
  rt::Volume::make_private_mount(slot.root);
  for (const auto& dir : {slot.workspace, slot.uploads, slot.outputs}) rt::Volume::make_shared_mount(dir);
  auto options = harness.options_for(slot);
  options.pre_started = true;
  auto sandbox = harness.start(options);
  auto before = harness.exec(*sandbox, "ls -A /home/agent/workspace | wc -l");
  EXPECT_EQ(before.stdout_text, "0\n");

  write_text(container.workspace / "w.txt", "workspace\n");
  write_text(container.uploads / "u.txt", "upload\n");
  rt::Volume::attach_bind(container.workspace, slot.workspace, false);
  rt::Volume::attach_bind(container.uploads, slot.uploads, true);
  rt::Volume::attach_bind(container.outputs, slot.outputs, false);
  auto r = harness.exec(
      *sandbox,
      "cat w.txt /mnt/user-data/uploads/u.txt; echo new > made.txt; "
      "echo out > /mnt/user-data/outputs/o.txt; touch /mnt/user-data/uploads/x 2>&1 | grep -o 'Read-only'; "
      "grep -c ' /home/agent/workspace ' /proc/self/mountinfo");
  EXPECT_EQ(r.stdout_text, "workspace\nupload\nRead-only\n2\n") << r.stderr_text;
  EXPECT_EQ(read_text(container.workspace / "made.txt"), "new\n");
  EXPECT_EQ(read_text(container.outputs / "o.txt"), "out\n");
  auto setuid =
      harness.exec(*sandbox,
                   "cp /bin/true /home/agent/workspace/t && chmod u+s t && "
                   "grep ' /home/agent/workspace ' /proc/self/mountinfo | tail -1 | grep -o nosuid");
  EXPECT_EQ(setuid.stdout_text, "nosuid\n");
  harness.stop(*sandbox);
  for (const auto& dir : {slot.workspace, slot.uploads, slot.outputs}) {
    rt::Volume::unmount(dir);  // the container's bind
    EXPECT_TRUE(fs::is_empty(dir)) << "the slot itself stays empty: " << dir;
    rt::Volume::unmount(dir);  // the slot's own shared bind
  }
  rt::Volume::unmount(slot.root);
}

}  // namespace
