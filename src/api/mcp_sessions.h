// The MCP endpoint's sessions (Streamable HTTP transport): each is an owner's, made by
// `initialize` and named by the Mcp-Session-Id header of every later request. A session
// holds the protocol version it negotiated and the requests it has in flight, so that a
// client's notifications/cancelled (a request of its own) or the end of the session
// stops them. Transport state only: containers and files stay the service's.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "api/mcp_subscriptions.h"
#include "base/error.h"
#include "runtime/cancellation.h"

namespace sandboxd::api {

class McpSessions {
 public:
  struct Session {
    std::string id, owner, protocol_version;
    // What its GET stream carries (subscriptions, log messages).
    std::shared_ptr<McpSessionEvents> events;
  };

  // A new session of `owner`. At most `per_owner` live at once (0: no cap): past it the
  // owner's least recently used idle session (no request in flight) makes room, and with
  // none idle the answer is 429. Sessions unused for `idle_ttl` are forgotten.
  Result<std::shared_ptr<const Session>> create(const std::string& owner, const std::string& protocol_version,
                                                size_t per_owner, std::chrono::seconds idle_ttl);
  // The session `id` of `owner` (another owner's is as missing as an unknown one), its
  // use recorded; null when there is none.
  std::shared_ptr<const Session> find(const std::string& id, const std::string& owner);
  // Ends the session: its requests in flight are cancelled. False when it did not exist.
  bool end(const std::string& id, const std::string& owner);

  // A request in flight under `key` (its JSON-RPC id, serialised) until the returned
  // handle goes. A second request with an id in flight keeps the first's entry.
  class InFlight {
   public:
    InFlight(McpSessions* sessions, std::string session, std::string key, bool registered)
        : sessions_(sessions), session_(std::move(session)), key_(std::move(key)), registered_(registered) {}
    ~InFlight();
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    McpSessions* sessions_;
    std::string session_, key_;
    bool registered_;
  };
  std::unique_ptr<InFlight> begin_request(const std::string& session, const std::string& key,
                                          std::shared_ptr<runtime::Cancellation> cancellation);
  // The session's GET stream, in flight (as a request is) until the returned handle
  // goes: the session is not ended to make room meanwhile, and its end cancels
  // `cancellation`. 409 when the session has one open already, 429 when the owner has
  // `per_owner` open, 404 when the session is gone.
  Result<std::unique_ptr<InFlight>> begin_stream(const std::string& session, const std::string& owner,
                                                 size_t per_owner,
                                                 std::shared_ptr<runtime::Cancellation> cancellation);
  // notifications/cancelled: the request `key` of the session, if it runs, is cancelled.
  void cancel(const std::string& session, const std::string& key);

  size_t count(const std::string& owner) const;

 private:
  struct Entry {
    std::shared_ptr<const Session> session;
    std::chrono::steady_clock::time_point last_used;
    std::chrono::seconds idle_ttl{0};
    std::map<std::string, std::shared_ptr<runtime::Cancellation>> in_flight;
  };
  // Unused for its idle_ttl, with no request in flight.
  static bool expired(const Entry& entry, std::chrono::steady_clock::time_point now);
  void forget_expired(std::chrono::steady_clock::time_point now);  // under mutex_
  void cancel_all(Entry& entry);                                   // under mutex_

  mutable std::mutex mutex_;
  std::map<std::string, Entry> sessions_;
};

}  // namespace sandboxd::api
