#include "kubernetes/peer_watch.h"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include "base/percent_encoding.h"

namespace sandboxd::kubernetes {
namespace asio = boost::asio;
namespace json = boost::json;
namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
// A watch the server ends after this long is opened again from its resource version;
// with bookmarks, a healthy one is never quiet for longer than this plus a margin.
constexpr int kWatchTimeoutSec = 300;
constexpr auto kWatchIdle = std::chrono::seconds(kWatchTimeoutSec + 30);
constexpr size_t kListPage = 500;
constexpr size_t kListPageBytes = 64u << 20;
constexpr size_t kEventBytes = 8u << 20;
constexpr auto kFirstBackoff = std::chrono::milliseconds(500);
constexpr auto kMaxBackoff = std::chrono::seconds(30);
// Changes that arrive together (a rollout) make one new set.
constexpr auto kPublishDelay = std::chrono::milliseconds(50);

const json::object* metadata_of(const json::value& value) {
  const json::object* object = value.if_object();
  if (!object) return nullptr;
  const json::value* metadata = object->if_contains("metadata");
  return metadata ? metadata->if_object() : nullptr;
}

std::string resource_version_of(const json::value& value) {
  const json::object* metadata = metadata_of(value);
  if (!metadata) return {};
  const json::value* version = metadata->if_contains("resourceVersion");
  return version && version->is_string() ? std::string(version->as_string()) : std::string();
}

}  // namespace

struct PeerWatch::Resource {
  std::string path;  // e.g. /api/v1/pods
  std::function<void(ClusterObjects&, const json::object&)> put;
  std::function<void(ClusterObjects&, const json::object&)> remove;
  std::function<void(ClusterObjects&)> clear;
  std::string resource_version;
  bool listed = false, open = false;
};

PeerWatch::PeerWatch(asio::io_context& io, ApiEndpoint endpoint, std::vector<ops::NetworkPeer> peers)
    : strand_(asio::make_strand(io)),
      client_(strand_, std::move(endpoint)),
      peer_rules_(std::move(peers)),
      publish_timer_(strand_),
      current_(std::make_shared<ResolvedPeers>()) {
  auto key_of = [](const json::object& object, bool by_name) {
    if (!by_name) return object_key(object);
    const json::value* metadata = object.if_contains("metadata");
    const json::value* name =
        metadata && metadata->is_object() ? metadata->as_object().if_contains("name") : nullptr;
    return name && name->is_string() ? std::string(name->as_string()) : std::string();
  };
  auto resource = [&](std::string path, auto member, auto convert, bool by_name) {
    auto r = std::make_shared<Resource>();
    r->path = std::move(path);
    r->put = [=](ClusterObjects& objects, const json::object& object) {
      auto& map = objects.*member;
      const std::string key = key_of(object, by_name);
      if (auto converted = convert(object))
        map[key] = std::move(*converted);
      else
        map.erase(key);  // e.g. a pod that finished: its address is not its own any more
    };
    r->remove = [=](ClusterObjects& objects, const json::object& object) {
      (objects.*member).erase(key_of(object, by_name));
    };
    r->clear = [=](ClusterObjects& objects) { (objects.*member).clear(); };
    resources_.push_back(std::move(r));
  };
  resource("/api/v1/namespaces", &ClusterObjects::namespaces, namespace_from_json, true);
  resource("/api/v1/pods", &ClusterObjects::pods, pod_from_json, false);
  resource("/api/v1/services", &ClusterObjects::services, service_from_json, false);
  resource("/apis/discovery.k8s.io/v1/endpointslices", &ClusterObjects::endpoint_slices,
           endpoint_slice_from_json, false);
  not_current_since_ = std::chrono::steady_clock::now();
  status_.problem = "the first list from the Kubernetes API has not completed";
}

void PeerWatch::start() {
  for (auto& resource : resources_)
    asio::co_spawn(
        strand_, [self = shared_from_this(), resource] { return self->follow(resource); }, asio::detached);
}

void PeerWatch::stop() {
  stopped_ = true;
  asio::post(strand_, [self = shared_from_this()] { self->publish_timer_.cancel(); });
}

std::shared_ptr<const ResolvedPeers> PeerWatch::peers() const {
  std::lock_guard lock(mutex_);
  return current_;
}

PeerWatch::Status PeerWatch::status() const {
  std::lock_guard lock(mutex_);
  Status status = status_;
  if (!status.current)
    status.seconds_not_current =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - not_current_since_).count();
  status.names = current_->names();
  status.addresses = current_->addresses();
  return status;
}

void PeerWatch::on_change(std::function<void()> listener) {
  asio::post(strand_, [self = shared_from_this(), listener = std::move(listener)]() mutable {
    self->listeners_.push_back(std::move(listener));
  });
}

void PeerWatch::set_problem(const std::string& problem) {
  std::lock_guard lock(mutex_);
  bool all_open = true, all_listed = true;
  for (const auto& resource : resources_) {
    all_open = all_open && resource->open;
    all_listed = all_listed && resource->listed;
  }
  // Listed is not yet in force: the set is published a moment after the lists (changes
  // are coalesced), and until then a sandbox would resolve nothing.
  const bool synced = all_listed && published_;
  const bool current = all_open && synced && problem.empty();
  if (status_.current && !current) not_current_since_ = std::chrono::steady_clock::now();
  status_.current = current;
  status_.synced = synced;
  if (!problem.empty()) status_.problem = problem;
  if (current) status_.problem.clear();
}

asio::awaitable<bool> PeerWatch::list(Resource& resource) {
  // Paged, as kubectl lists: a page's continue token holds the list's snapshot; when it
  // has expired (410) the list starts over.
  std::string continue_token;
  std::vector<json::value> items;
  std::string version;
  for (;;) {
    std::string target = resource.path + "?limit=" + std::to_string(kListPage);
    if (!continue_token.empty()) target += "&continue=" + percent_encode(continue_token);
    auto page = co_await client_.get(target, kListPageBytes);
    if (!page) {
      spdlog::warn("kubernetes: listing {}: {}", resource.path, page.error().message);
      set_problem("listing " + resource.path + ": " + page.error().message);
      if (page.error().status == kStatusGone && !continue_token.empty()) {
        continue_token.clear();
        items.clear();
        continue;
      }
      co_return false;
    }
    const json::object* body = page->if_object();
    const json::value* list_items = body ? body->if_contains("items") : nullptr;
    if (!list_items || !list_items->is_array()) {
      set_problem("listing " + resource.path + ": the answer has no items");
      co_return false;
    }
    for (auto& item : list_items->as_array()) items.push_back(std::move(item));
    const json::object* metadata = metadata_of(*page);
    version = resource_version_of(*page);
    const json::value* next = metadata ? metadata->if_contains("continue") : nullptr;
    continue_token = next && next->is_string() ? std::string(next->as_string()) : std::string();
    if (continue_token.empty()) break;
  }
  resource.clear(objects_);
  for (const auto& item : items)
    if (const json::object* object = item.if_object()) resource.put(objects_, *object);
  resource.resource_version = version;
  resource.listed = true;
  {
    std::lock_guard lock(mutex_);
    ++status_.relists;
  }
  set_problem("");
  changed();
  co_return true;
}

asio::awaitable<void> PeerWatch::follow(std::shared_ptr<Resource> resource) {
  auto backoff = std::chrono::duration_cast<std::chrono::milliseconds>(kFirstBackoff);
  bool need_list = true;
  asio::steady_timer pause(strand_);
  while (!stopped_) {
    bool ok = true;
    if (need_list) {
      ok = co_await list(*resource);
      need_list = !ok;
    }
    if (ok) {
      bool gone = false, opened = false;
      std::string target = resource->path + "?watch=true&allowWatchBookmarks=true&timeoutSeconds=" +
                           std::to_string(kWatchTimeoutSec) +
                           "&resourceVersion=" + percent_encode(resource->resource_version);
      // The callbacks are named before co_await (GCC 12 mishandles temporaries of a
      // co_await expression).
      const std::function<bool(json::value)> on_event = [&](json::value event) {
        const json::object* object = event.if_object();
        const json::value* type = object ? object->if_contains("type") : nullptr;
        const json::value* item = object ? object->if_contains("object") : nullptr;
        if (!type || !type->is_string() || !item || !item->is_object()) return false;
        const std::string kind(type->as_string());
        if (kind == "ERROR") {
          // A Status: 410 means our resource version is too old to watch from.
          const json::value* code = item->as_object().if_contains("code");
          gone = code && code->is_int64() && code->as_int64() == 410;
          if (!gone) set_problem("watching " + resource->path + ": the API sent an error");
          return false;
        }
        if (std::string version = resource_version_of(*item); !version.empty())
          resource->resource_version = version;
        if (kind == "BOOKMARK") return true;
        if (kind == "ADDED" || kind == "MODIFIED")
          resource->put(objects_, item->as_object());
        else if (kind == "DELETED")
          resource->remove(objects_, item->as_object());
        else
          return true;  // a type this client does not know changes nothing
        changed();
        return true;
      };
      const std::function<void()> on_open = [&] {
        opened = true;
        resource->open = true;
        backoff = std::chrono::duration_cast<std::chrono::milliseconds>(kFirstBackoff);
        set_problem("");
      };
      auto result = co_await client_.watch(target, kWatchIdle, kEventBytes, on_event, on_open);
      resource->open = false;
      if (!result && result.error().status == kStatusGone) gone = true;
      if (gone) {
        need_list = true;
        continue;  // relist at once: the last set stays in force meanwhile
      }
      if (result && opened) continue;  // the server ended the watch (its timeout): open it again
      set_problem(result ? "watching " + resource->path + ": ended"
                         : "watching " + resource->path + ": " + result.error().message);
      if (!result) spdlog::warn("kubernetes: watching {}: {}", resource->path, result.error().message);
    }
    {
      std::lock_guard lock(mutex_);
      ++status_.reconnects;
    }
    pause.expires_after(backoff);
    co_await pause.async_wait(use_tuple);
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, kMaxBackoff);
  }
}

void PeerWatch::changed() {
  if (publish_pending_) return;
  for (const auto& resource : resources_)
    if (!resource->listed) return;  // a partial view would drop peers that are there
  publish_pending_ = true;
  publish_timer_.expires_after(kPublishDelay);
  publish_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    self->publish_pending_ = false;
    if (!ec) self->publish();
  });
}

void PeerWatch::publish() {
  auto next = std::make_shared<const ResolvedPeers>(
      resolve_peers(peer_rules_, client_.endpoint().namespace_name, objects_));
  {
    std::lock_guard lock(mutex_);
    current_ = next;
    ++status_.updates;
    published_ = true;
  }
  set_problem("");  // (recomputes the status: the first publish makes it synced)
  for (const auto& listener : listeners_) listener();
}

}  // namespace sandboxd::kubernetes
