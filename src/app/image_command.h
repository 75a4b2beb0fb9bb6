// The `sandboxd image` commands: import, build, ls, rm. Each returns the exit code and
// prints its own messages.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace sandboxd::app {

int image_import_command(const std::string& data_dir, const std::string& file, const std::string& name);
int image_build_command(const std::string& data_dir, const std::string& name, bool minimal,
                        const std::vector<std::string>& packages, const std::string& mirror);
int image_ls_command(const std::string& data_dir);
int image_rm_command(const std::string& data_dir, const std::string& name);

}  // namespace sandboxd::app
