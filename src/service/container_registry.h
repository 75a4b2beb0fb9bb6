// The open containers of this replica, by (owner, id): lookups and listings, the
// transitions (a container being opened or closed, which requests for it wait for), and
// the capacity bookkeeping that has to agree with the map (sandboxes admitted but not
// running yet). One lock, held for map operations only: never across a database, lease,
// disk or mount call, and never while a coroutine waits.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "service/capacity_policy.h"

namespace sandboxd::service {

struct Container;

class ContainerRegistry {
 public:
  using Key = std::pair<std::string, std::string>;  // (owner, id)

  // A container being opened, its lease confirmed, or being closed (unmounted,
  // deleted): requests for it wait for the outcome, on a strand of its own, with no
  // thread held; nothing else waits for it.
  struct Transition {
    Transition(boost::asio::any_io_executor executor, bool create);
    boost::asio::strand<boost::asio::any_io_executor> strand;
    boost::asio::steady_timer ended;  // cancelled when it ends (on `strand`)
    bool over = false;                // on `strand`
    const bool create;                // an opening that may make the container
    // An opening's outcome, for the requests that waited for it (set before it ends);
    // none for a closing: they look again.
    std::optional<Result<std::shared_ptr<Container>>> outcome;
  };
  // Resumes once `transition` ended (the caller holds it).
  static boost::asio::awaitable<void> await_end(std::shared_ptr<Transition> transition);

  explicit ContainerRegistry(boost::asio::any_io_executor executor) : executor_(std::move(executor)) {}

  std::shared_ptr<Container> find(const Key& key) const;
  std::vector<std::shared_ptr<Container>> all() const;
  std::vector<std::shared_ptr<Container>> with_id(const std::string& id) const;
  std::shared_ptr<Container> with_storage(const std::string& storage) const;
  std::vector<std::shared_ptr<Container>> running() const;
  size_t running_count() const;

  // What a request that opens `key` finds: a transition to wait for, or the open
  // container when `ready` accepts it (then no transition), or else a new opening of
  // its own (`ours`), which it runs and ends with settle_opening.
  struct Opening {
    std::shared_ptr<Container> open;
    std::shared_ptr<Transition> transition;
    bool ours = false;
  };
  Opening begin_opening(const Key& key, bool create, const std::function<bool(const Container&)>& ready);
  // An opening's end: `opened` (if any) becomes the open container of `key`; `gone` (if
  // it is still the open one) leaves the map. Then the transition ends.
  void settle_opening(const Key& key, const std::shared_ptr<Transition>& opening,
                      const std::shared_ptr<Container>& opened, const std::shared_ptr<Container>& gone);
  // A closing of `key`, once any other transition of it has ended; `container` (if it
  // is still the open one) leaves the map.
  boost::asio::awaitable<std::shared_ptr<Transition>> begin_closing(Key key,
                                                                    std::shared_ptr<Container> container);
  // A closing of `container` now if it is the open one of `key`, no transition of it is
  // under way and `may_close` agrees (asked under the lock: `uses` counts the
  // registry's reference and the caller's); it leaves the map. Null otherwise.
  std::shared_ptr<Transition> try_begin_closing(const Key& key, const std::shared_ptr<Container>& container,
                                                const std::function<bool(long uses)>& may_close);
  // A closing that did not happen (the volume was busy): the container is open again.
  void reopen(const Key& key, const std::shared_ptr<Container>& container);
  // Removes `transition` and wakes its waiters (from any thread).
  void end(const Key& key, const std::shared_ptr<Transition>& transition);
  void clear();

  // Capacity (capacity_policy.h) over the open containers and the reservations, decided
  // under the lock so that two starts never take the same room: on kAdmit a
  // reservation is made for `owner`, to be released with release_room once the sandbox
  // runs (or failed); on kEvict `victim` is set.
  CapacityDecision reserve_room(const Container& for_container, const CapacityLimits& limits,
                                std::shared_ptr<Container>& victim);
  void release_room(const std::string& owner);

 private:
  boost::asio::any_io_executor executor_;
  mutable std::mutex mutex_;
  std::map<Key, std::shared_ptr<Container>> open_;
  std::map<Key, std::shared_ptr<Transition>> transitions_;
  uint64_t reserved_ = 0;                           // sandboxes being started
  std::map<std::string, uint64_t> owner_reserved_;  // the same, per owner
};

}  // namespace sandboxd::service
