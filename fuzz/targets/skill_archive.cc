// An uploaded skill: the first byte picks the form. Even: the rest is one zip archive
// (the `files[]` upload of a single *.zip), unpacked into a staging folder with every
// check (paths, links, sizes, ratio); odd: the rest is SKILL.md's text (front matter).
// A refusal is a value (SkillRefusal): any exception escaping, or a crash, is a finding.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "store/skill_archive.h"

using namespace sandboxd::store;

static std::string staging_root() {
  static const std::string root = [] {
    std::string dir = std::filesystem::temp_directory_path() / ("fuzz-skill-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
  }();
  return root;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 1) {
    if (auto manifest = parse_skill_manifest(input))
      if (manifest->name.empty() || manifest->name.size() > 64 || manifest->description.empty()) abort();
    return 0;
  }
  static std::atomic<uint64_t> counter{0};
  // Small limits, so bombs are found within the fuzzer's time and memory.
  SkillLimits limits{.max_bytes = 1 << 20, .max_files = 64};
  const std::string dir = staging_root() + "/" + std::to_string(++counter);
  {
    SkillStaging staging(dir, limits);
    if (!staging.begin_file("upload.zip")) abort();
    // Past the limit, the refusal is the write's; then there is nothing to unpack.
    if (staging.write(input)) {
      staging.end_file();
      if (!staging.single_zip()) abort();
      if (staging.extract_single_zip()) {
        if (staging.bytes() > limits.max_bytes || staging.files() > limits.max_files) abort();
        if (auto checked = staging.check(); checked && checked->manifest.name.empty()) abort();
      }
    }
  }
  if (std::filesystem::exists(dir)) abort();  // a staging folder outlived its upload
  return 0;
}
