// The server side's way to make a sandbox's user namespace (user.h) without holding an
// I/O thread: the holder process is spawned and waited for on a thread of its own.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <string>
#include <vector>

#include "runtime/user.h"

namespace sandboxd::runtime {

// create_agent_userns, run on the runtime's holder threads; the caller's coroutine
// resumes on its own executor with the namespace's fd. Throws as create_agent_userns.
boost::asio::awaitable<int> create_agent_userns_off_io(std::string init_path, uint32_t host_uid, uint32_t host_gid,
                                                       std::vector<UsernsLimit> limits);

}  // namespace sandboxd::runtime
