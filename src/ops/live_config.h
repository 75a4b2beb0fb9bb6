// The configuration in effect, replaceable while the server runs (SIGHUP): readers take
// a snapshot (one atomic load) and keep it for the piece of work at hand, so a reload
// applies to new work and never changes a setting under a request.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "ops/config.h"

namespace sandboxd::ops {

class LiveConfig {
 public:
  explicit LiveConfig(Config initial) : current_(std::make_shared<const Config>(std::move(initial))) {}

  std::shared_ptr<const Config> get() const { return current_.load(); }

  // Takes the keys of `loaded` whose row in the key table says Reload::new_work. Returns
  // the Reload::restart keys `loaded` changes; those keep their current values.
  std::vector<std::string> reload(const Config& loaded);

 private:
  std::atomic<std::shared_ptr<const Config>> current_;
};

}  // namespace sandboxd::ops
