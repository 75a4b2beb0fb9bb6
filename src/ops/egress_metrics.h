// Outside connections refused, by why: sandboxd_egress_refused_total{reason} (rendered
// by ops/metrics.h with the other egress metrics). `reason` is one of a few fixed words:
// policy, invalid, resolve, connect, sandbox_limit, owner_limit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sandboxd::ops {

void count_egress_refusal(std::string_view reason);
// (reason, count) pairs, in the order of the reasons' names.
std::vector<std::pair<std::string, uint64_t>> egress_refusals();

}  // namespace sandboxd::ops
