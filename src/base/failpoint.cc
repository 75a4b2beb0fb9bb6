#include "base/failpoint.h"

#include <cstdlib>

namespace sandboxd {

bool failpoints_built() {
#if SANDBOXD_FAILPOINTS
  return true;
#else
  return false;
#endif
}

std::optional<std::string> failpoint(std::string_view name) {
#if SANDBOXD_FAILPOINTS
  const std::string variable = "SANDBOXD_FAILPOINT_" + std::string(name);
  if (const char* value = std::getenv(variable.c_str()); value && *value) return std::string(value);
#else
  (void)name;
#endif
  return std::nullopt;
}

bool failpoint_on(std::string_view name) { return failpoint(name) == "1"; }

}  // namespace sandboxd
