// `sandboxd serve`: wires configuration, runtime, store, services and the HTTP server,
// and runs until SIGTERM/SIGINT (graceful: stop accepting, let in-flight requests
// finish up to a bound, stop every sandbox, exit 0).
#pragma once

#include "ops/config.h"

namespace sandboxd::ops {

int serve(Config config);

}  // namespace sandboxd::ops
