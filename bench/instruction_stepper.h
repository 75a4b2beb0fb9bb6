// Counting the user-space instructions of processes that valgrind cannot run, by
// single-stepping them under ptrace. A sandbox's PID 1 makes each command's child (and
// its template process) with a raw clone(CLONE_VM) on a stack of its own, which valgrind
// refuses, so its instructions per command cannot come from callgrind. Stepping is slow
// (a ptrace stop per instruction: microseconds each), but it counts every instruction
// the tasks retire in user space, exactly and whatever else the machine does. (A `rep`
// string instruction counts once per iteration, as it does for callgrind.)
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace sandboxd::bench {

class InstructionStepper {
 public:
  struct Counts {
    // Instructions per task that was stepped, by pid.
    std::map<pid_t, uint64_t> by_pid;
    // The pids that called execve while stepped: children cloned for a command, counted
    // from their clone (or from the start, for one that was waiting already) until their
    // execve, after which they ran free.
    std::vector<pid_t> execed;
    std::string error;  // why nothing was counted (ptrace refused, a task gone)
  };

  // Starts a thread that seizes `pids` and single-steps them. Every process they clone
  // is stepped too, until it calls execve. It waits with waitpid(-1): while it steps,
  // the calling process must not wait for children of its own.
  explicit InstructionStepper(std::vector<pid_t> pids);
  ~InstructionStepper();
  InstructionStepper(const InstructionStepper&) = delete;
  InstructionStepper& operator=(const InstructionStepper&) = delete;

  // Detaches from every task (each carries on as before) and returns the counts.
  Counts stop();

 private:
  void run(std::vector<pid_t> pids);

  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> finished_{false};
  Counts counts_;
};

}  // namespace sandboxd::bench
