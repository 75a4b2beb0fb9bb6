// The scheduling policy behind Admission, as a plain class (no clock, no executor) so it
// can be checked on its own. It is work-conserving: while a slot is free and somebody
// may take it, somebody does, so an owner alone uses every slot. When slots are short
// and several owners wait, each freed slot goes to the waiting owner served least
// recently (round robin over the owners' lines, each command costing one turn), and
// within one owner's line first come, first served. A hard per-owner cap applies only
// when the operator sets one (capacity.maxConcurrentExecutionsPerOwner > 0).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace sandboxd::ops {

class FairLines {
 public:
  using WaiterId = uint64_t;

  // `limit`: slots in all; `owner_cap`: most slots one owner holds at once (0: no cap).
  // New limits apply to new grants (running commands keep their slots).
  void set_limits(int limit, int owner_cap);

  // A slot for `owner` now, when one is free, the owner is under its cap and nobody of
  // the owner's waits ahead; false otherwise (then the caller joins the line).
  bool admit_now(const std::string& owner);
  // Joins `owner`'s line; returns the waiter's id.
  WaiterId enqueue(const std::string& owner);
  // A waiter gives up (its time in line ran out); false when it was granted already.
  bool leave(WaiterId waiter);
  // A slot of `owner`'s goes back.
  void release(const std::string& owner);
  // Hands free slots to waiters by the policy above; returns who was granted, in order.
  // Call after release, set_limits or enqueue.
  std::vector<WaiterId> grant();

  int limit() const { return limit_; }
  int owner_cap() const { return owner_cap_; }
  int running() const { return running_; }
  int waiting() const { return static_cast<int>(owner_of_.size()); }
  int running_of(const std::string& owner) const;
  // Owners with a command running or waiting.
  size_t owners() const { return lines_.size(); }

 private:
  struct Line {
    int running = 0;
    std::deque<WaiterId> waiting;
    uint64_t last_served = 0;  // when this owner last got a slot (a counter, not a clock)
  };
  bool under_cap(const Line& line) const { return owner_cap_ <= 0 || line.running < owner_cap_; }
  void forget_if_idle(std::map<std::string, Line>::iterator line);

  int limit_ = 1;
  int owner_cap_ = 0;
  int running_ = 0;
  uint64_t next_waiter_ = 1;
  uint64_t served_ = 0;
  std::map<std::string, Line> lines_;
  std::map<WaiterId, std::string> owner_of_;
};

// The per-owner cap in force: `configured` when the operator set one (> 0), else the
// whole limit (an owner alone may use every slot).
int owner_execution_cap(int configured, int global_limit);

}  // namespace sandboxd::ops
