// The idle reaper's choices as pure functions of what it sees (no clock, no lock): which
// sandboxes stop for being idle past sessionTTLSeconds, and which stopped containers it
// may then close (unmount their volume; a request later opens them anew).
#pragma once

#include <cstdint>

namespace sandboxd::service {

// Idle past the TTL: unused for `ttl_seconds` or longer at `now` (unix seconds).
bool expired(int64_t last_used_at, int64_t ttl_seconds, int64_t now);

// An open container as the reaper sees it just before stopping its sandbox.
struct ReapCandidate {
  int64_t last_used_at = 0;
  int executing = 0;  // executions under way (a long command keeps its sandbox)
};

// Whether its sandbox stops now for being idle.
bool stops_idle(const ReapCandidate& candidate, int64_t ttl_seconds, int64_t now);

// A container after the stops, looked at again just before closing it.
struct CloseCandidate {
  bool still_open = false;     // the same container is still the open one for its key
  bool in_transition = false;  // being opened or closed by a request meanwhile
  bool running = false;        // a request started its sandbox again
  int64_t last_used_at = 0;
  bool held_elsewhere = false;  // a request holds it (its volume is in use)
  bool unflushed = false;       // the sessions bucket lacks some of its changes
};

// Whether the container may be closed now.
bool may_close(const CloseCandidate& candidate, int64_t ttl_seconds, int64_t now);

}  // namespace sandboxd::service
