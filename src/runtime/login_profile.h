// The /etc/profile a sandbox's login shells read. E2B's SDKs run every command as
// `bash -l -c ...`, a login shell, so /etc/profile runs before each of them. Debian's
// (the host image's and every image `sandboxd image build` makes) asks `"$(id -u)"`
// whether the user is root: a subshell and an exec of id for every command, more than
// the rest of a short command costs. bash knows the answer itself ($EUID), so the
// sandbox's copy asks it first and runs id only in a shell without it (sh, dash): the
// same branch is taken, with no process in bash. (bash keeps an EUID its caller put in
// its environment: a command that sets one chooses its own PATH, nothing more.)
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sandboxd::runtime {

// `profile` with each "$(id -u)" as "${EUID:-$(id -u)}"; nullopt when it has none (it is
// used as it is).
std::optional<std::string> profile_without_id_subshell(std::string_view profile);

// The profile open at `fd` rewritten so: nullopt when it is not a regular file of at
// most 64 KiB (Debian's is under 1 KiB), or has no "$(id -u)". `mode` gets its mode.
std::optional<std::string> rewritten_profile(int fd, unsigned& mode);

}  // namespace sandboxd::runtime
