#include "runtime/login_profile.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace sandboxd::runtime {

std::optional<std::string> profile_without_id_subshell(std::string_view profile) {
  // Only the quoted form Debian and Ubuntu write: as one word it expands the same with
  // either spelling, so nothing but the subshell changes.
  constexpr std::string_view kAsked = "\"$(id -u)\"";
  constexpr std::string_view kAnswered = "\"${EUID:-$(id -u)}\"";
  if (profile.find(kAsked) == std::string_view::npos) return std::nullopt;
  std::string out;
  out.reserve(profile.size() + 32);
  for (size_t pos = 0;;) {
    const size_t found = profile.find(kAsked, pos);
    if (found == std::string_view::npos) {
      out.append(profile.substr(pos));
      break;
    }
    out.append(profile.substr(pos, found - pos));
    out.append(kAnswered);
    pos = found + kAsked.size();
  }
  return out;
}

std::optional<std::string> rewritten_profile(int fd, unsigned& mode) {
  constexpr off_t kMaxProfile = 64 * 1024;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxProfile) return std::nullopt;
  mode = st.st_mode & 0777;
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    got += static_cast<size_t>(n);
  }
  return profile_without_id_subshell(text);
}

}  // namespace sandboxd::runtime
