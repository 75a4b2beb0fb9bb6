// `sandboxd run`: one command in a fresh sandbox over a container directory.
#pragma once

#include <string>
#include <vector>

namespace sandboxd::app {

struct RunOptions {
  std::string container;  // a directory; empty = a temporary one
  double timeout_seconds = 60;
  std::string memory;                // a size ("512Mi"); empty = no limit
  std::string workspace_size;        // a size; empty = workspace and outputs are plain folders
  std::vector<std::string> command;  // one argument: a bash script; several: quoted words
};

// The command's exit status (124 on timeout). Throws on a failure to set up the sandbox.
int run_command(const RunOptions& options);

}  // namespace sandboxd::app
