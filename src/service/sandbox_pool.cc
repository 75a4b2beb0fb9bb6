#include "service/sandbox_pool.h"

#include <unistd.h>
#include <algorithm>

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <tuple>

#include "ops/metrics.h"
#include "runtime/volume.h"

namespace sandboxd::service {

namespace fs = std::filesystem;
using runtime::Volume;

SandboxPool::SandboxPool(asio::io_context& io, runtime::Runtime* runtime, std::string slots_dir,
                         Settings settings)
    : io_(io), runtime_(runtime), slots_dir_(std::move(slots_dir)), settings_(std::move(settings)) {
  fs::remove_all(slots_dir_);
  fs::create_directories(slots_dir_);
}

void SandboxPool::start() { asio::co_spawn(io_, refill(), asio::detached); }

size_t SandboxPool::ready() const {
  std::lock_guard lock(mutex_);
  return ready_.size();
}

std::shared_ptr<Slot> SandboxPool::new_slot() {
  auto slot = std::make_shared<Slot>();
  {
    std::lock_guard lock(mutex_);
    slot->root = (fs::path(slots_dir_) / std::to_string(slots_made_++)).string();
  }
  // Two parents, root's and closed to others: a sandbox that takes them whole (the gvisor
  // tier) gets the writable one writable and the other read-only, and only its PID 1
  // ever sees them whole.
  for (const char* parent : {"/rw", "/ro"}) {
    fs::create_directories(slot->root + parent);
    fs::permissions(slot->root + parent, fs::perms::owner_all, fs::perm_options::replace);
  }
  slot->dirs.workspace = slot->root + "/rw/workspace";
  slot->dirs.outputs = slot->root + "/rw/outputs";
  slot->dirs.uploads = slot->root + "/ro/uploads";
  const uid_t uid = settings_.owner();
  for (const auto* dir : {&slot->dirs.workspace, &slot->dirs.uploads, &slot->dirs.outputs}) {
    fs::create_directories(*dir);
    if (chown(dir->c_str(), uid, uid) != 0) throw std::runtime_error("chown(" + *dir + ") failed");
    Volume::make_shared_mount(*dir);
  }
  slot->dirs.skills = slot->root + "/ro/skills";  // root's, read-only: a container's skills folder goes on it
  fs::create_directories(slot->dirs.skills);
  Volume::make_shared_mount(slot->dirs.skills);
  return slot;
}

void SandboxPool::bind_container(Slot& slot, const ContainerPaths& paths) {
  for (auto [source, target, read_only] : {std::tuple{&paths.workspace, &slot.dirs.workspace, false},
                                           std::tuple{&paths.uploads, &slot.dirs.uploads, true},
                                           std::tuple{&paths.outputs, &slot.dirs.outputs, false}}) {
    Volume::attach_bind(*source, *target, read_only);
    slot.bound.push_back(*target);
  }
  // With the skills loaded in it now, and those that later requests load.
  Volume::attach_bind(paths.skills, slot.dirs.skills, /*read_only=*/true, /*recursive=*/true);
  slot.bound.push_back(slot.dirs.skills);
}

void SandboxPool::unbind_container(Slot& slot) {
  for (const auto& dir : slot.bound) {
    try {
      // The container's skills folder is shared: its copy comes off without taking
      // the skills of requests still running off the original.
      if (dir == slot.dirs.skills)
        Volume::detach_private(dir);
      else
        Volume::unmount(dir);  // the topmost mount there: the container's bind
    } catch (const std::exception& e) {
      spdlog::warn("releasing slot {}: {}", dir, e.what());
    }
  }
  slot.bound.clear();
}

std::shared_ptr<Slot> SandboxPool::slot_for(const ContainerPaths& paths) {
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    }
  }
  if (!slot) slot = new_slot();
  try {
    bind_container(*slot, paths);
  } catch (...) {
    release(slot);
    throw;
  }
  return slot;
}

asio::awaitable<void> SandboxPool::refill() {
  for (;;) {
    std::shared_ptr<Slot> slot;
    {
      std::lock_guard lock(mutex_);
      if (stopping_ || !runtime_ || static_cast<int>(ready_.size()) + starting_ >= settings_.size())
        co_return;
      ++starting_;
      if (!free_.empty()) {
        slot = free_.back();
        free_.pop_back();
      }
    }
    bool ok = false;
    try {
      if (!slot) slot = new_slot();
      auto options = settings_.sandbox_options(slot->dirs, "pool-" + std::to_string(++started_));
      options.pre_started = true;
      slot->sandbox = co_await runtime_->start(io_.get_executor(), options);
      if (network_) slot->link = co_await network_->attach(slot->sandbox);
      ops::metrics().sandbox_started();
      ok = true;
      if (stopping_) {  // shutdown began while it started: it is not wanted
        co_await slot->sandbox->stop();
        slot->sandbox.reset();
        ok = false;
      }
    } catch (const std::exception& e) {
      spdlog::warn("pre-starting a sandbox: {}", e.what());
    }
    std::lock_guard lock(mutex_);
    --starting_;
    if (!ok) {
      if (slot) free_.push_back(slot);
      co_return;  // try again on the next claim
    }
    ready_.push_back(slot);
  }
}

std::shared_ptr<Slot> SandboxPool::claim(const ContainerPaths& paths, std::string_view container_id) {
  // A spare started under another network plan (a reload since gave sandboxes a resolver,
  // or took it away: /etc/resolv.conf is written at the start) is not handed out: the
  // container gets a sandbox started now instead.
  const std::string nameserver = network_ ? network_->nameserver() : "";
  std::shared_ptr<Slot> slot;
  std::vector<std::shared_ptr<Slot>> stale;
  {
    std::lock_guard lock(mutex_);
    while (!ready_.empty() && !slot) {
      slot = ready_.back();
      ready_.pop_back();
      if (!slot->sandbox->running()) {  // died while waiting
        slot->sandbox.reset();
        free_.push_back(slot);
        slot.reset();
      } else if (slot->sandbox->nameserver() != nameserver) {
        stale.push_back(std::move(slot));
      }
    }
  }
  for (auto& old : stale) {
    auto sandbox = std::move(old->sandbox);
    asio::co_spawn(io_, stop_and_release(std::move(sandbox), std::move(old)), asio::detached);
  }
  // Refill a little later: starting a sandbox migrates a process between cgroups, which
  // on cgroup v1 stalls every fork on the host for a moment (the claimed sandbox is
  // about to fork its first command).
  auto later = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(100));
  later->async_wait([this, later](const boost::system::error_code&) { start(); });
  if (!slot) return nullptr;
  try {
    bind_container(*slot, paths);
    return slot;
  } catch (const std::exception& e) {
    spdlog::warn("handing a pre-started sandbox to container {}: {}", container_id, e.what());
    auto sandbox = std::move(slot->sandbox);
    asio::co_spawn(io_, stop_and_release(sandbox, slot), asio::detached);
    return nullptr;
  }
}

asio::awaitable<void> SandboxPool::stop_and_release(std::shared_ptr<runtime::Sandbox> sandbox,
                                                    std::shared_ptr<Slot> slot) {
  co_await sandbox->stop();
  release(slot);
}

void SandboxPool::release(const std::shared_ptr<Slot>& slot) {
  unbind_container(*slot);
  slot->sandbox.reset();
  slot->link.reset();
  {
    std::lock_guard lock(mutex_);
    // Enough free slots for the next refills; any more would only hold folders and
    // shared mounts for nothing (a burst of containers would leave one per sandbox).
    if (static_cast<int>(free_.size()) < std::max(settings_.size(), 1)) {
      free_.push_back(slot);
      return;
    }
  }
  dispose(*slot);
}

void SandboxPool::dispose(const Slot& slot) {
  auto mounts = Volume::mounts_under(slot.root);
  // Deepest first: a mount on top of another comes off before it.
  std::sort(mounts.begin(), mounts.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const auto& mount_point : mounts) {
    try {
      for (int layer = 0; layer < 8 && Volume::is_mounted(mount_point); ++layer)
        if (!Volume::try_unmount(mount_point)) break;
    } catch (const std::exception& e) {
      spdlog::warn("unmounting slot {}: {}", mount_point, e.what());
    }
  }
  std::error_code ec;
  fs::remove_all(slot.root, ec);
  if (ec) spdlog::warn("removing slot {}: {}", slot.root, ec.message());
}

asio::awaitable<void> SandboxPool::shutdown() {
  stopping_ = true;
  // Pre-starts under way finish (and stop themselves, seeing the shutdown) first.
  for (asio::steady_timer pause(io_);;) {
    {
      std::lock_guard lock(mutex_);
      if (starting_ == 0) break;
    }
    pause.expires_after(std::chrono::milliseconds(10));
    boost::system::error_code ec;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  std::vector<std::shared_ptr<Slot>> slots;
  {
    std::lock_guard lock(mutex_);
    slots = ready_;
    slots.insert(slots.end(), free_.begin(), free_.end());
    ready_.clear();
    free_.clear();
  }
  for (auto& slot : slots) {
    if (slot->sandbox) co_await slot->sandbox->stop();
    for (const auto& mount_point : Volume::mounts_under(slot->root)) {
      try {
        Volume::unmount(mount_point);
      } catch (const std::exception& e) {
        spdlog::warn("unmounting {}: {}", mount_point, e.what());
      }
    }
  }
}

}  // namespace sandboxd::service
