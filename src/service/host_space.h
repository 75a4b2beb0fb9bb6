// A full host disk while a container's storage is made: the client can only wait it out,
// so it is answered 503 overloaded_error with Retry-After, never a 500.
#pragma once

#include <exception>
#include <filesystem>

namespace sandboxd::service {

// fs::create_directories for a container's storage. Failpoint NO_SPACE=1
// (base/failpoint.h) makes it fail as a full disk does (ENOSPC).
void create_storage_dirs(const std::filesystem::path& dir);

// Whether `e` says the disk is full (ENOSPC, EDQUOT).
bool is_disk_full(const std::exception& e);

}  // namespace sandboxd::service
