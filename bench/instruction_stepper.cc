#include "instruction_stepper.h"

#include <pthread.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

namespace sandboxd::bench {
namespace {

// Interrupts the tracer's waitpid when every task is blocked in a system call (a stepped
// task that waits in poll or futex reports its next step only once the call returns).
void wake_tracer(int) {}

std::string describe(const char* call, pid_t pid, int err) {
  return std::string(call) + "(" + std::to_string(pid) + "): " + std::strerror(err);
}

}  // namespace

InstructionStepper::InstructionStepper(std::vector<pid_t> pids) {
  struct sigaction action {};
  action.sa_handler = wake_tracer;  // no SA_RESTART: waitpid returns EINTR
  sigaction(SIGUSR1, &action, nullptr);
  thread_ = std::thread([this, pids = std::move(pids)]() mutable { run(std::move(pids)); });
}

InstructionStepper::~InstructionStepper() {
  if (thread_.joinable()) stop();
}

InstructionStepper::Counts InstructionStepper::stop() {
  stopping_ = true;
  // The tracer may be between two checks of stopping_ when one signal comes: it is sent
  // until the thread has let every task go.
  while (!finished_) {
    pthread_kill(thread_.native_handle(), SIGUSR1);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  thread_.join();
  return counts_;
}

void InstructionStepper::run(std::vector<pid_t> pids) {
  // Clones, forks and vforks are followed from their first instruction; an execve ends a
  // task's count (what runs after it is the command, not sandboxd).
  const long options = PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACEEXEC;
  std::set<pid_t> traced;
  for (pid_t pid : pids) {
    if (ptrace(PTRACE_SEIZE, pid, nullptr, reinterpret_cast<void*>(options)) != 0) {
      counts_.error = describe("ptrace(PTRACE_SEIZE)", pid, errno);
      continue;
    }
    traced.insert(pid);
    counts_.by_pid[pid] = 0;
    ptrace(PTRACE_INTERRUPT, pid, nullptr, nullptr);  // stops it, so that stepping can begin
  }
  bool interrupted_all = false;
  while (!traced.empty()) {
    if (stopping_ && !interrupted_all) {
      // Tasks blocked in a system call are stopped where they are, to be let go.
      for (pid_t pid : traced) ptrace(PTRACE_INTERRUPT, pid, nullptr, nullptr);
      interrupted_all = true;
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: nothing left
    }
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      traced.erase(pid);
      continue;
    }
    if (!WIFSTOPPED(status)) continue;
    if (!traced.count(pid)) {  // a clone of a stepped task, attached by the kernel
      traced.insert(pid);
      counts_.by_pid[pid] = 0;
    }
    const int event = status >> 16;
    const int signal = WSTOPSIG(status);
    int deliver = 0;  // a signal the task was about to get is passed on, never lost
    if (event == PTRACE_EVENT_EXEC) {
      counts_.execed.push_back(pid);
      ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
      traced.erase(pid);
      continue;
    }
    if (event == 0 && signal == SIGTRAP)
      ++counts_.by_pid[pid];  // one instruction retired
    else if (event == 0)
      deliver = signal;  // a signal-delivery stop
    if (stopping_) {
      ptrace(PTRACE_DETACH, pid, nullptr, reinterpret_cast<void*>(static_cast<long>(deliver)));
      traced.erase(pid);
      continue;
    }
    if (ptrace(PTRACE_SINGLESTEP, pid, nullptr, reinterpret_cast<void*>(static_cast<long>(deliver))) != 0 &&
        errno == ESRCH)
      traced.erase(pid);
  }
  finished_ = true;
}

}  // namespace sandboxd::bench
