#include "ops/live_config.h"

#include "ops/config_reload.h"

namespace sandboxd::ops {

std::vector<std::string> LiveConfig::reload(const Config& loaded) {
  // What each key does on a reload is a field of its row in the key table (config.cc).
  auto reloaded = reload_config(*get(), loaded);
  current_.store(std::make_shared<const Config>(std::move(reloaded.config)));
  return std::move(reloaded.restart_keys);
}

}  // namespace sandboxd::ops
