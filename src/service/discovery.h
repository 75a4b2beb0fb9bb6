// Discovering the files that code wrote, so that they are listed (with created_at when
// first seen) without walking a container's folders on every request: after an
// execution the walk runs once, after the response and coalesced with other
// executions; a listing walks only when something may have changed (an execution since
// the last walk, or a running sandbox whose background processes may write). The walks
// run on the blocking pool, never on an I/O thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "service/services.h"

namespace sandboxd::service {

void after_execution(Services& services, const std::shared_ptr<Container>& container);

// After a command whose result lists the files it made: the index sync that
// after_execution would schedule runs now instead, on the blocking pool, and the same
// walk returns the outputs/ files changed since `since_ns` (the command's start, see
// store::OutputChanges). No walk is added: the one every execution costs anyway moves
// before the response. The paths come from the file times, not from a comparison with
// the index, so a listing (or another command) syncing meanwhile takes nothing away.
struct ChangedOutputs {
  std::vector<std::string> paths;
  bool truncated = false;
};
asio::awaitable<ChangedOutputs> sync_after_command(Services& services, std::shared_ptr<Container> container,
                                                   int64_t since_ns);
// Both walk the container's folders and hash new files on the blocking pool
// (base/blocking.h); the caller keeps `container` alive until the await returns.
asio::awaitable<void> before_listing(Services& services, Container& container);
// Syncs the index with the disk now, whatever changed.
asio::awaitable<void> sync_off_io_thread(Services& services, Container& container);

}  // namespace sandboxd::service
