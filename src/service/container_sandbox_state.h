// A container's sandbox as its strand holds it (Container::on_strand): the sandbox, the
// pre-started slot it came from, its network, and whether a start, a stop (whose
// checkpoint and flush no command may overlap) or a copy no start may overlap (a
// snapshot's) is under way.
//
// Locking: none; the strand is the rule. Every member and method is the container's
// strand's: used only from a coroutine or handler that runs on it (ContainerLifecycle's
// ensure_sandbox and stop_on_strand, ContainerSnapshots' capture). Readers on any other
// thread use Container's sandbox_up and live_sandbox instead.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <memory>

namespace sandboxd::runtime {
class Sandbox;
}

namespace sandboxd::service {

struct Slot;        // sandbox_pool.h
class NetworkLink;  // sandbox_networking.h

class ContainerSandboxState {
 public:
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;

  std::shared_ptr<runtime::Sandbox> sandbox;
  std::shared_ptr<Slot> slot;         // when the sandbox came from the pre-started pool
  std::shared_ptr<NetworkLink> link;  // the sandbox's network

  // Held: a stop paused the sandbox in place (runtime::Runtime::pause) instead of
  // checkpointing it, for runtime.pauseHoldSeconds (ContainerLifecycle::stop_on_strand).
  // `sandbox`, `slot` and `link` stay; the next start resumes it in milliseconds; the
  // hold's end, or a stop that cannot wait, checkpoints it as it is and stops it.
  bool held = false;
  std::shared_ptr<boost::asio::steady_timer> hold_end;  // cancelled when the hold ends

  // From begin_starting until end_starting, other work of the strand (another
  // execution, a stop, a copy) waits for it (wait_until_started): each step of a start
  // may suspend.
  bool starting() const { return starting_; }
  void begin_starting(const Strand& strand);
  void end_starting();
  // Returns once no start is under way (at once when none is).
  boost::asio::awaitable<void> wait_until_started();

 private:
  bool starting_ = false;
  std::unique_ptr<boost::asio::steady_timer> started_event_;  // cancelled when a start ends
};

}  // namespace sandboxd::service
