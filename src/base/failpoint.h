// Fault injection for tests and drills: a failpoint is an environment variable
// SANDBOXD_FAILPOINT_<NAME> that makes one code path fail as the host would (a full
// disk, no free loop device, a process paused in a fenced write). Only a build
// configured with -DSANDBOXD_FAILPOINTS=ON reads them (scripts/build.sh, which
// scripts/test.sh runs); in the package's build (scripts/package.sh) every failpoint is
// unset whatever the environment says, so no variable can make a production server
// fail on purpose.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sandboxd {

// Whether this build reads failpoints at all.
bool failpoints_built();

// The failpoint's value when it is set and not empty (read once per call: callers on a
// hot path keep the answer).
std::optional<std::string> failpoint(std::string_view name);

// The failpoint is set to "1".
bool failpoint_on(std::string_view name);

}  // namespace sandboxd
