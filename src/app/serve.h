// `sandboxd serve`: wires configuration, runtime, store, services and the HTTP server,
// and runs until SIGTERM/SIGINT (graceful: stop accepting, let in-flight requests
// finish up to a bound, stop every sandbox, exit 0).
#pragma once

#include <string>

#include "ops/config.h"

namespace sandboxd::app {

// `config_path` is the file SIGHUP reloads (empty: the embedded defaults, no reload).
int serve(ops::Config config, const std::string& config_path = "");

}  // namespace sandboxd::app
