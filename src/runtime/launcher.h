// How a sandbox's PID 1 comes to be: the seam between the isolation tiers. The runtime
// holds one launcher, chosen at start (RuntimeOptions::isolation); everything past the
// start (commands, their output, timeouts, kills, stop) is the same Sandbox speaking the
// same control protocol to its PID 1, whichever launcher made it.
//   native (native_launcher.h): sandboxd-init makes the namespaces itself and is PID 1.
//   gvisor (gvisor_launcher.h): runsc runs the sandbox, sandboxd-init is the container's PID 1.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <memory>

#include "runtime/sandbox.h"

namespace sandboxd::runtime {

struct SandboxOptions;

class SandboxLauncher {
 public:
  virtual ~SandboxLauncher() = default;
  // Starts a sandbox (its cgroups, its PID 1) and returns once PID 1 is ready. Throws
  // SandboxError, having removed whatever it made.
  virtual asio::awaitable<std::shared_ptr<Sandbox>> start(asio::any_io_executor executor,
                                                          const SandboxOptions& options) = 0;
  // Removes what sandboxes of a crashed predecessor left outside their cgroups (which the
  // runtime removes itself).
  virtual void cleanup_stale() {}
  // Whether this tier can keep a sandbox's memory (checkpoint, then a start restoring it:
  // SandboxOptions::restore_from).
  virtual bool keeps_memory() const { return false; }
  virtual bool starts_over_slots() const { return false; }  // Runtime::starts_over_slots
  // Saves the running sandbox's whole state (its processes and their memory, its /tmp)
  // into the empty folder `image_dir`; the sandbox then ends (wait with Sandbox::stop).
  // Throws SandboxError when it cannot (the sandbox then runs on).
  virtual asio::awaitable<void> checkpoint(std::shared_ptr<Sandbox> sandbox, std::string /*image_dir*/) {
    throw SandboxError("sandbox " + sandbox->name() + ": this isolation tier keeps no memory");
    co_return;
  }
  // Stops every process of the running sandbox where it is, its memory kept in place, and
  // lets them go on (Runtime::pause). Throw SandboxError when they cannot.
  virtual asio::awaitable<void> pause(std::shared_ptr<Sandbox> sandbox) {
    throw SandboxError("sandbox " + sandbox->name() + ": this isolation tier cannot pause");
    co_return;
  }
  virtual asio::awaitable<void> resume(std::shared_ptr<Sandbox> sandbox) {
    throw SandboxError("sandbox " + sandbox->name() + ": this isolation tier cannot pause");
    co_return;
  }
};

}  // namespace sandboxd::runtime
