// sandboxd-init's two roles on the gvisor tier (runtime/gvisor_launcher.h), where the
// sandbox is a runsc container instead of namespaces made by sandboxd-init itself.
#pragma once

namespace sandboxd::runtime {

// `sandboxd-init --gvisor-launch CGROUP_DIR... [--listen=ADDRESS:PORT...]
// [--service-dir=DIR [--keep=PATH...]] -- RUNSC ARG...`, started by the server with the
// control socket on fd 3: joins the sandbox's cgroups (so that runsc, its sentry and its
// gofer are counted and limited there), detaches from its copy of the server's mounts
// the volumes (below DIR, or of a loop device) that hold no PATH (runtime/mount.h:
// detach_volume_mounts), forks runsc with
// the control socket as its stdin (the container's PID 1 inherits it as a host
// descriptor) in a network namespace of its own (only `lo`, with the listeners on it),
// reports runsc's pid, a pidfd of it and the listeners to the server (kInitPid, as the
// native launcher does for PID 1) and exits.
int run_gvisor_launch(int argc, char** argv);
inline constexpr const char* kServiceDirArg = "--service-dir=";
inline constexpr const char* kKeepArg = "--keep=";

// Where a sandbox over slots (SandboxOptions::pre_started) has its slots' two parents,
// rw/ (workspace, outputs) and ro/ (uploads, skills), for PID 1 to bind from.
inline constexpr const char* kSlotFolders = "/.sandboxd/slots";
// The last argument of --gvisor-agent for such a sandbox.
inline constexpr const char* kOverSlotsArg = "over-slots";

// `sandboxd-init --gvisor-agent NOFILE NPROC [over-slots]` (0: no limit): the container's
// PID 1 inside gVisor. Serves the native tier's control protocol on fd 0, except that a
// command's output travels in kOutput messages (a descriptor made inside gVisor cannot be
// passed to the host). Over slots, it keeps CAP_SYS_ADMIN until protocol::kAttachFolders
// has it bind the container's folders from kSlotFolders, and runs no command before.
int run_gvisor_agent(int argc, char** argv);

// `sandboxd-init --gvisor-enter PID -- RUNSC ARG...`: runs a runsc command (checkpoint)
// for the sandbox whose runsc PID is runsc's reaper, PID 1 of its namespaces (host pid
// PID): runsc finds its container by the pids it recorded, which are of that PID
// namespace, and reaches the sentry through that network namespace. Exits with runsc's
// status (126: the namespaces could not be entered).
int run_gvisor_enter(int argc, char** argv);

}  // namespace sandboxd::runtime
