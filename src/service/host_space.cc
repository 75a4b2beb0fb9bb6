#include "service/host_space.h"

#include <cerrno>
#include <system_error>

#include "base/failpoint.h"

namespace sandboxd::service {

void create_storage_dirs(const std::filesystem::path& dir) {
  if (failpoint_on("NO_SPACE"))
    throw std::filesystem::filesystem_error("create_directories", dir,
                                            std::make_error_code(std::errc::no_space_on_device));
  std::filesystem::create_directories(dir);
}

bool is_disk_full(const std::exception& e) {
  const auto* error = dynamic_cast<const std::system_error*>(&e);  // filesystem_error is one
  if (!error) return false;
  const std::error_condition condition = error->code().default_error_condition();
  return condition.category() == std::generic_category() &&
         (condition.value() == ENOSPC || condition.value() == EDQUOT);
}

}  // namespace sandboxd::service
