#include "ops/egress_metrics.h"

#include <map>
#include <mutex>

namespace sandboxd::ops {
namespace {

struct Refusals {
  std::mutex mutex;
  std::map<std::string, uint64_t, std::less<>> by_reason;
};
Refusals& refusals() {
  static Refusals instance;
  return instance;
}

}  // namespace

void count_egress_refusal(std::string_view reason) {
  auto& all = refusals();
  std::lock_guard lock(all.mutex);
  auto it = all.by_reason.find(reason);
  if (it == all.by_reason.end()) it = all.by_reason.emplace(std::string(reason), 0).first;
  ++it->second;
}

std::vector<std::pair<std::string, uint64_t>> egress_refusals() {
  auto& all = refusals();
  std::lock_guard lock(all.mutex);
  return {all.by_reason.begin(), all.by_reason.end()};
}

}  // namespace sandboxd::ops
