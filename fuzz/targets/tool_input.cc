// The sub-tools' inputs as the model sends them: JSON, then the bash input parser and
// the text editor, which runs against a scratch directory (its path rules keep every
// operation beneath it).
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "base/utf8.h"
#include "tools/bash_tool.h"
#include "tools/text_editor.h"

using namespace sandboxd;
namespace fs = std::filesystem;

static const ContainerPaths& scratch() {
  static ContainerPaths paths = [] {
    char tmpl[] = "/tmp/sandboxd-fuzz-XXXXXX";
    std::string root = mkdtemp(tmpl);
    static std::string remove_at_exit = root;
    atexit([] {
      std::error_code ec;
      fs::remove_all(remove_at_exit, ec);
    });
    ContainerPaths p{root + "/workspace", root + "/uploads", root + "/outputs", ""};
    for (const auto& dir : {p.workspace, p.uploads, p.outputs}) fs::create_directories(dir);
    return p;
  }();
  return paths;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  boost::system::error_code ec;
  auto value = boost::json::parse(std::string_view(reinterpret_cast<const char*>(data), size), ec);
  if (ec || !value.is_object()) return 0;
  const auto& input = value.as_object();
  (void)tools::parse_bash_input(input);
  tools::EditorOptions options;
  options.uid = getuid();
  options.gid = getgid();
  options.max_view_bytes = 1 << 16;
  auto result = tools::run_text_editor(scratch(), input, options);
  std::string json = boost::json::serialize(result);
  if (to_valid_utf8(json) != json) abort();  // results are valid UTF-8 JSON
  return 0;
}
