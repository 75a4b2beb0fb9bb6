#include "ops/owner_admission.h"

#include <algorithm>
#include <limits>

namespace sandboxd::ops {

void FairLines::set_limits(int limit, int owner_cap) {
  limit_ = std::max(1, limit);
  owner_cap_ = std::max(0, owner_cap);
}

bool FairLines::admit_now(const std::string& owner) {
  if (running_ >= limit_) return false;
  auto it = lines_.find(owner);
  if (it != lines_.end() && (!it->second.waiting.empty() || !under_cap(it->second))) return false;
  // grant() leaves no free slot that a waiter could take, so a free slot here wrongs no
  // other owner's waiter: the ones still waiting are all at their cap.
  if (it == lines_.end()) it = lines_.emplace(owner, Line{}).first;
  ++it->second.running;
  it->second.last_served = ++served_;
  ++running_;
  return true;
}

FairLines::WaiterId FairLines::enqueue(const std::string& owner) {
  const WaiterId id = next_waiter_++;
  lines_[owner].waiting.push_back(id);
  owner_of_.emplace(id, owner);
  return id;
}

bool FairLines::leave(WaiterId waiter) {
  auto found = owner_of_.find(waiter);
  if (found == owner_of_.end()) return false;
  auto line = lines_.find(found->second);
  owner_of_.erase(found);
  if (line != lines_.end()) {
    auto& waiting = line->second.waiting;
    waiting.erase(std::remove(waiting.begin(), waiting.end(), waiter), waiting.end());
    forget_if_idle(line);
  }
  return true;
}

void FairLines::release(const std::string& owner) {
  auto line = lines_.find(owner);
  if (line == lines_.end() || line->second.running == 0) return;  // a bug upstream; never negative
  --line->second.running;
  --running_;
  forget_if_idle(line);
}

std::vector<FairLines::WaiterId> FairLines::grant() {
  std::vector<WaiterId> granted;
  while (running_ < limit_) {
    // The eligible line served least recently (an owner that has not been served for
    // longest, or never, goes first).
    auto best = lines_.end();
    uint64_t best_served = std::numeric_limits<uint64_t>::max();
    for (auto it = lines_.begin(); it != lines_.end(); ++it) {
      if (it->second.waiting.empty() || !under_cap(it->second)) continue;
      if (it->second.last_served < best_served) {
        best = it;
        best_served = it->second.last_served;
      }
    }
    if (best == lines_.end()) break;
    auto& line = best->second;
    const WaiterId next = line.waiting.front();
    line.waiting.pop_front();
    owner_of_.erase(next);
    ++line.running;
    line.last_served = ++served_;
    ++running_;
    granted.push_back(next);
  }
  return granted;
}

int FairLines::running_of(const std::string& owner) const {
  auto it = lines_.find(owner);
  return it == lines_.end() ? 0 : it->second.running;
}

void FairLines::forget_if_idle(std::map<std::string, Line>::iterator line) {
  // An owner with nothing running or waiting needs no line; coming back, it counts as
  // not served for longest, which favours the owner that was quiet.
  if (line->second.running == 0 && line->second.waiting.empty()) lines_.erase(line);
}

int owner_execution_cap(int configured, int global_limit) {
  return configured > 0 ? configured : global_limit;
}

}  // namespace sandboxd::ops
