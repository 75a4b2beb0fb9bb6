// Gives memory the server freed back to the kernel.
//
// The allocator keeps what is freed for reuse: after a burst (a client's large bodies,
// the outputs of a cell whose reader left) the server's RSS stays at the burst's peak
// although nothing holds it, and on a shared host that memory is lost to every other
// owner's sandboxes. A timer looks, once a second, at how much the allocator holds free,
// and past a threshold hands it back (tcmalloc's ReleaseFreeMemory, or malloc_trim
// with glibc's malloc). Below the threshold it does nothing: ordinary traffic reuses
// its memory without a page fault per allocation.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstddef>

namespace sandboxd::app {

// Freed memory the allocator may keep before it is handed back.
inline constexpr size_t kFreeMemoryKept = 64u << 20;

// Starts the timer on `io` (it runs as long as `io` does).
void start_memory_release(boost::asio::io_context& io);

// Hands what the allocator holds free back now if it is past kFreeMemoryKept (or
// always, with `force`); returns the bytes it held free before (0 where unknown).
size_t release_free_memory(bool force = false);

}  // namespace sandboxd::app
