// What a SIGHUP does to each key of the configuration: a field of the key's row in the key
// table (config.cc), the one place the reload (live_config.cc) and the "reload" column of
// docs/configuration.md follow (tests/config_test.cc holds the docs to it).
#pragma once

#include <string>
#include <vector>

#include "ops/config.h"

namespace sandboxd::ops {

enum class Reload {
  new_work,  // the file's value applies to requests, commands and sandboxes started after it
  restart,   // the running server is built on it: a changed value is logged and kept for a restart
};

struct KeyReload {
  std::string path;  // dotted, as in the file: "capacity.queueTimeoutSec"
  Reload reload;
};

// Every key of the file, in the key table's order, with what a reload does to it.
std::vector<KeyReload> key_reload_policies();

struct ReloadedConfig {
  Config config;                          // `current` with every new_work key of the file
  std::vector<std::string> restart_keys;  // restart keys the file changed: their values stay
};

// A reload of `current` with `loaded` (the file read again), key by key as the table says.
ReloadedConfig reload_config(const Config& current, const Config& loaded);

}  // namespace sandboxd::ops
