// Where a container keeps its sandbox's memory between stops (container_memory.cc): a
// checkpoint beside its volume, never in it. The sessions bucket copies it with the
// files (cluster/container_durability.cc), so that a container that moves to another
// replica comes back there with its memory.
#pragma once

#include <string>
#include <string_view>

#include "service/container.h"

namespace sandboxd::service {

// <container folder>/memory: the checkpoint's image (image/) and, written last, the list
// of the Python kernels it holds (kernels): a folder without that list is unfinished.
std::string memory_folder(const Container& container);

// The memory folder's files in the sessions bucket's manifest: under this path, which
// no sandbox path starts with (so the Files API never lists them).
inline constexpr std::string_view kMemoryManifestPath = "/.sandboxd/memory";

}  // namespace sandboxd::service
