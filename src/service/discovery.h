// Discovering the files that code wrote, so that they are listed (with created_at when
// first seen) without walking a container's folders on every request: after an
// execution the walk runs once, after the response and coalesced with other
// executions; a listing walks only when something may have changed (an execution since
// the last walk, or a running sandbox whose background processes may write). The walks
// run on the blocking pool, never on an I/O thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <optional>
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
//
// With `before` (output_mark, taken before the command started) and the kernel's word
// that nothing under the container's uploads/ and outputs/ changed since
// (store::TreeChanges), there is no walk: the command changed no output, and the index
// gets the coalesced walk of after_execution, as after any execution, for what inotify
// cannot see.
struct ChangedOutputs {
  std::vector<std::string> paths;
  bool truncated = false;
};
asio::awaitable<ChangedOutputs> sync_after_command(Services& services, std::shared_ptr<Container> container,
                                                   int64_t since_ns,
                                                   std::optional<store::TreeChanges::Mark> before = {});
// The container's trees as they are now (cheap: one non-blocking read), right before a
// command starts.
store::TreeChanges::Mark output_mark(Services& services, const Container& container);
// Reads the server's inotify events as they come, so that an idle server's queue never
// overflows (a command's own reads are the ones its decision counts on).
void drain_tree_changes(asio::io_context& io, store::TreeChanges& changes);
// Both walk the container's folders and hash new files on the blocking pool
// (base/blocking.h); the caller keeps `container` alive until the await returns.
asio::awaitable<void> before_listing(Services& services, Container& container);
// Syncs the index with the disk now, whatever changed.
asio::awaitable<void> sync_off_io_thread(Services& services, Container& container);

}  // namespace sandboxd::service
