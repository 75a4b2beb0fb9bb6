#include "service/egress_options.h"

#include <mutex>
#include <string>
#include <unordered_map>

namespace sandboxd::service {
namespace {

struct Options {
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<const ops::SandboxEgress>> by_storage;
};
Options& options() {
  static Options instance;
  return instance;
}

}  // namespace

void set_egress_options(const Container& container, std::shared_ptr<const ops::SandboxEgress> value) {
  auto& all = options();
  std::lock_guard lock(all.mutex);
  if (value)
    all.by_storage[container.storage] = std::move(value);
  else
    all.by_storage.erase(container.storage);
}

std::shared_ptr<const ops::SandboxEgress> egress_options(const Container& container) {
  auto& all = options();
  std::lock_guard lock(all.mutex);
  auto it = all.by_storage.find(container.storage);
  return it == all.by_storage.end() ? nullptr : it->second;
}

}  // namespace sandboxd::service
