// The limits on all sandboxes together (runtime.sandboxes*), resolved against this host:
// the configured value, a share of the host when it is 0, nothing when it is "none".
#pragma once

#include "ops/config.h"
#include "runtime/cgroup.h"

namespace sandboxd::app {

runtime::CgroupLimits sandboxes_total(const ops::Config& config);

}  // namespace sandboxd::app
