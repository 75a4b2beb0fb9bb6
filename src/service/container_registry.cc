#include "service/container_registry.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "service/container.h"

namespace sandboxd::service {

namespace asio = boost::asio;

ContainerRegistry::Transition::Transition(asio::any_io_executor executor, bool create)
    : strand(asio::make_strand(executor)),
      ended(strand, std::chrono::steady_clock::time_point::max()),
      create(create) {}

namespace {
asio::awaitable<void> wait_over(ContainerRegistry::Transition* transition) {
  while (!transition->over) {
    boost::system::error_code ec;
    co_await transition->ended.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}
}  // namespace

asio::awaitable<void> ContainerRegistry::await_end(std::shared_ptr<Transition> transition) {
  // On the transition's strand, which `over` and the timer belong to. (A plain coroutine
  // with a raw pointer: GCC 12 mishandles the shared_ptr captures of a lambda coroutine.)
  co_await asio::co_spawn(transition->strand, wait_over(transition.get()), asio::use_awaitable);
}

std::shared_ptr<Container> ContainerRegistry::find(const Key& key) const {
  std::lock_guard lock(mutex_);
  auto it = open_.find(key);
  return it == open_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Container>> ContainerRegistry::all() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Container>> out;
  out.reserve(open_.size());
  for (const auto& [key, container] : open_) out.push_back(container);
  return out;
}

std::vector<std::shared_ptr<Container>> ContainerRegistry::with_id(const std::string& id) const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Container>> out;
  for (const auto& [key, container] : open_)
    if (key.second == id) out.push_back(container);
  return out;
}

std::shared_ptr<Container> ContainerRegistry::with_storage(const std::string& storage) const {
  std::lock_guard lock(mutex_);
  std::shared_ptr<Container> found;
  for (const auto& [key, container] : open_)
    if (container->storage == storage) found = container;
  return found;
}

std::vector<std::shared_ptr<Container>> ContainerRegistry::running() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Container>> out;
  for (const auto& [key, container] : open_)
    if (container->running()) out.push_back(container);
  return out;
}

size_t ContainerRegistry::running_count() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [key, container] : open_) n += container->running();
  return n;
}

ContainerRegistry::Opening ContainerRegistry::begin_opening(
    const Key& key, bool create, const std::function<bool(const Container&)>& ready) {
  Opening opening;
  std::lock_guard lock(mutex_);
  if (auto it = transitions_.find(key); it != transitions_.end()) {
    opening.transition = it->second;
    return opening;
  }
  if (auto found = open_.find(key); found != open_.end()) opening.open = found->second;
  if (opening.open && ready(*opening.open)) return opening;
  opening.transition = std::make_shared<Transition>(executor_, create);
  transitions_.emplace(key, opening.transition);
  opening.ours = true;
  return opening;
}

void ContainerRegistry::settle_opening(const Key& key, const std::shared_ptr<Transition>& opening,
                                       const std::shared_ptr<Container>& opened,
                                       const std::shared_ptr<Container>& gone) {
  {
    std::lock_guard lock(mutex_);
    if (opened) open_[key] = opened;
    if (gone)
      if (auto it = open_.find(key); it != open_.end() && it->second == gone) open_.erase(it);
  }
  end(key, opening);
}

asio::awaitable<std::shared_ptr<ContainerRegistry::Transition>> ContainerRegistry::begin_closing(
    Key key, std::shared_ptr<Container> container) {
  for (;;) {
    std::shared_ptr<Transition> closing, other;
    {
      std::lock_guard lock(mutex_);
      if (auto it = transitions_.find(key); it != transitions_.end()) {
        other = it->second;
      } else {
        closing = std::make_shared<Transition>(executor_, false);
        transitions_.emplace(key, closing);
        if (auto it = open_.find(key); it != open_.end() && it->second == container) open_.erase(it);
      }
    }
    if (closing) co_return closing;
    co_await await_end(other);
  }
}

std::shared_ptr<ContainerRegistry::Transition> ContainerRegistry::try_begin_closing(
    const Key& key, const std::shared_ptr<Container>& container,
    const std::function<bool(long uses)>& may_close) {
  std::lock_guard lock(mutex_);
  auto it = open_.find(key);
  if (it == open_.end() || it->second != container || transitions_.count(key)) return nullptr;
  if (!may_close(container.use_count())) return nullptr;
  open_.erase(it);
  auto closing = std::make_shared<Transition>(executor_, false);
  transitions_.emplace(key, closing);
  return closing;
}

void ContainerRegistry::reopen(const Key& key, const std::shared_ptr<Container>& container) {
  std::lock_guard lock(mutex_);
  open_.emplace(key, container);
}

void ContainerRegistry::end(const Key& key, const std::shared_ptr<Transition>& transition) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = transitions_.find(key); it != transitions_.end() && it->second == transition)
      transitions_.erase(it);
  }
  asio::post(transition->strand, [transition] {
    transition->over = true;
    transition->ended.cancel();
  });
}

void ContainerRegistry::clear() {
  std::lock_guard lock(mutex_);
  open_.clear();
}

CapacityDecision ContainerRegistry::reserve_room(const Container& for_container, const CapacityLimits& limits,
                                                 std::shared_ptr<Container>& victim) {
  std::lock_guard lock(mutex_);
  std::vector<SandboxCandidate> candidates;
  std::vector<const std::shared_ptr<Container>*> containers;
  candidates.reserve(open_.size());
  containers.reserve(open_.size());
  for (const auto& [key, container] : open_) {
    candidates.push_back({container->owner, container->takes_room(), container->executing.load() > 0,
                          container->last_used_at.load(), container.get() == &for_container});
    containers.push_back(&container);
  }
  CapacityRequest request{for_container.owner, reserved_, 0};
  if (auto it = owner_reserved_.find(for_container.owner); it != owner_reserved_.end())
    request.reserved_by_owner = it->second;
  const CapacityDecision decision = decide_capacity(candidates, request, limits);
  if (decision.kind == CapacityDecision::Kind::kAdmit) {
    ++reserved_;
    ++owner_reserved_[for_container.owner];
  } else if (decision.kind == CapacityDecision::Kind::kEvict) {
    victim = *containers[decision.victim];
  }
  return decision;
}

void ContainerRegistry::release_room(const std::string& owner) {
  std::lock_guard lock(mutex_);
  if (reserved_ > 0) --reserved_;
  if (auto it = owner_reserved_.find(owner); it != owner_reserved_.end() && --it->second == 0)
    owner_reserved_.erase(it);
}

}  // namespace sandboxd::service
