#include "api/mcp_sessions.h"

#include "base/ids.h"

namespace sandboxd::api {

using Clock = std::chrono::steady_clock;

namespace {
// A session id is a bearer of the session (with the owner's token): 128 random bits.
std::string new_session_id() { return "mcps_" + random_hex(32); }
// The GET stream's key among the requests in flight: no JSON-RPC id serialises to it
// (a string's has quotes, a number's only digits and signs).
constexpr std::string_view kStreamKey = "stream";
}  // namespace

bool McpSessions::expired(const Entry& entry, Clock::time_point now) {
  return entry.in_flight.empty() && entry.idle_ttl.count() > 0 && now - entry.last_used > entry.idle_ttl;
}

void McpSessions::forget_expired(Clock::time_point now) {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (expired(it->second, now))
      it = sessions_.erase(it);
    else
      ++it;
  }
}

void McpSessions::cancel_all(Entry& entry) {
  // Cancellation callbacks only post work to their strands: safe under the lock.
  for (auto& [key, cancellation] : entry.in_flight) cancellation->cancel();
}

Result<std::shared_ptr<const McpSessions::Session>> McpSessions::create(const std::string& owner,
                                                                        const std::string& protocol_version,
                                                                        size_t per_owner,
                                                                        std::chrono::seconds idle_ttl) {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  forget_expired(now);
  if (per_owner > 0) {
    size_t mine = 0;
    auto idlest = sessions_.end();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (it->second.session->owner != owner) continue;
      ++mine;
      if (it->second.in_flight.empty() &&
          (idlest == sessions_.end() || it->second.last_used < idlest->second.last_used))
        idlest = it;
    }
    if (mine >= per_owner) {
      if (idlest == sessions_.end())
        return ApiError::rate_limited(
            "Too many MCP sessions for this owner (" + std::to_string(per_owner) +
                ", server.maxConnectionsPerOwner), each with a request running; end one "
                "(DELETE /mcp) or try again later",
            1);
      sessions_.erase(idlest);
    }
  }
  auto session = std::make_shared<Session>();
  session->id = new_session_id();
  session->owner = owner;
  session->protocol_version = protocol_version;
  session->events = std::make_shared<McpSessionEvents>();
  sessions_[session->id] = Entry{session, now, idle_ttl, {}};
  return std::shared_ptr<const Session>(session);
}

std::shared_ptr<const McpSessions::Session> McpSessions::find(const std::string& id,
                                                              const std::string& owner) {
  // Only this session's own expiry is looked at: the sweep of all of them is create's
  // (the one call that adds sessions), not every request's.
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return nullptr;
  if (expired(it->second, now)) {
    sessions_.erase(it);
    return nullptr;
  }
  if (it->second.session->owner != owner) return nullptr;
  it->second.last_used = now;
  return it->second.session;
}

bool McpSessions::end(const std::string& id, const std::string& owner) {
  std::lock_guard lock(mutex_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second.session->owner != owner) return false;
  cancel_all(it->second);
  sessions_.erase(it);
  return true;
}

std::unique_ptr<McpSessions::InFlight> McpSessions::begin_request(
    const std::string& session, const std::string& key, std::shared_ptr<runtime::Cancellation> cancellation) {
  std::lock_guard lock(mutex_);
  auto it = sessions_.find(session);
  bool registered = false;
  if (it != sessions_.end()) registered = it->second.in_flight.emplace(key, std::move(cancellation)).second;
  return std::make_unique<InFlight>(this, session, key, registered);
}

McpSessions::InFlight::~InFlight() {
  if (!registered_) return;
  std::lock_guard lock(sessions_->mutex_);
  auto it = sessions_->sessions_.find(session_);
  if (it == sessions_->sessions_.end()) return;
  it->second.in_flight.erase(key_);
  it->second.last_used = Clock::now();
}

Result<std::unique_ptr<McpSessions::InFlight>> McpSessions::begin_stream(
    const std::string& session, const std::string& owner, size_t per_owner,
    std::shared_ptr<runtime::Cancellation> cancellation) {
  std::lock_guard lock(mutex_);
  auto it = sessions_.find(session);
  if (it == sessions_.end() || it->second.session->owner != owner)
    return ApiError::not_found("Session not found");
  const std::string key(kStreamKey);
  if (it->second.in_flight.contains(key))
    return ApiError::conflict(
        "Conflict: this session has its stream open already (one GET stream a session)");
  size_t open = 0;
  for (const auto& [id, entry] : sessions_)
    if (entry.session->owner == owner && entry.in_flight.contains(key)) ++open;
  if (per_owner > 0 && open >= per_owner)
    return ApiError::rate_limited("Too many MCP session streams open for this owner (" +
                                      std::to_string(per_owner) + "); close one first",
                                  1);
  it->second.in_flight.emplace(key, std::move(cancellation));
  it->second.last_used = Clock::now();
  return std::make_unique<InFlight>(this, session, key, true);
}

void McpSessions::cancel(const std::string& session, const std::string& key) {
  std::shared_ptr<runtime::Cancellation> target;
  {
    std::lock_guard lock(mutex_);
    auto it = sessions_.find(session);
    if (it == sessions_.end()) return;
    auto request = it->second.in_flight.find(key);
    if (request == it->second.in_flight.end()) return;
    target = request->second;
  }
  target->cancel();
}

size_t McpSessions::count(const std::string& owner) const {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  size_t n = 0;
  for (const auto& [id, entry] : sessions_)
    if (entry.session->owner == owner && !expired(entry, now)) ++n;
  return n;
}

}  // namespace sandboxd::api
