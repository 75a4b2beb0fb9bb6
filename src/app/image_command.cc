#include "app/image_command.h"

#include <sys/resource.h>

#include <cstdio>

#include "images/build.h"
#include "images/import.h"
#include "images/store.h"

namespace sandboxd::app {

using images::BuildOptions;
using images::human_size;
using images::ImageStore;
using images::import_image;
using images::ImportOptions;
using images::kNotInDebian;
using images::parse_ref;
namespace {

// Deep trees are walked with one descriptor per level: use the hard limit.
void raise_open_files_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

template <typename F>
int guarded(const char* command, F&& body) {
  try {
    raise_open_files_limit();
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sandboxd image %s: %s\n", command, e.what());
    return 1;
  }
}

}  // namespace

int image_import_command(const std::string& data_dir, const std::string& file, const std::string& name) {
  return guarded("import", [&] {
    ImageStore store(data_dir);
    ImportOptions options;
    options.file = file;
    if (!name.empty()) options.name = parse_ref(name);
    auto result = import_image(store, options);
    std::printf("imported %s %s (%s, %lu skipped entries) into %s\n", result.image.ref.str().c_str(),
                result.image.digest.c_str(), human_size(result.image.size).c_str(),
                (unsigned long)result.report.skipped_count, result.image.dir.c_str());
    return 0;
  });
}

int image_build_command(const std::string& data_dir, const std::string& name, bool minimal,
                        const std::vector<std::string>& packages, const std::string& mirror) {
  return guarded("build", [&] {
    ImageStore store(data_dir);
    BuildOptions options;
    options.ref = parse_ref(name);
    options.minimal = minimal;
    options.packages = packages;
    if (!mirror.empty()) options.mirror = mirror;
    auto image = build_image(store, options);
    std::printf(
        "built %s %s (%s, %zu packages) in %s\n", image.ref.str().c_str(), image.digest.c_str(),
        human_size(image.size).c_str(),
        image.manifest.contains("packages") ? image.manifest.at("packages").as_array().size() : size_t{0},
        image.dir.c_str());
    if (!minimal) {
      std::printf("not packaged by Debian, so not in the image:");
      for (const auto& missing : kNotInDebian) std::printf(" %s;", missing.c_str());
      std::printf("\n");
    }
    return 0;
  });
}

int image_ls_command(const std::string& data_dir) {
  return guarded("ls", [&] {
    ImageStore store(data_dir);
    auto images = store.list();
    size_t name_width = 4, tag_width = 3;
    for (const auto& i : images) {
      name_width = std::max(name_width, i.ref.name.size());
      tag_width = std::max(tag_width, i.ref.tag.size());
    }
    std::printf("%-*s  %-*s  %-19s  %10s  %s\n", int(name_width), "NAME", int(tag_width), "TAG", "DIGEST",
                "SIZE", "CREATED");
    for (const auto& i : images) {
      // The digest as docker shows an image id: the algorithm and 12 hex digits.
      std::string digest = i.digest.substr(0, std::min<size_t>(i.digest.size(), 19));
      std::printf("%-*s  %-*s  %-19s  %10s  %s\n", int(name_width), i.ref.name.c_str(), int(tag_width),
                  i.ref.tag.c_str(), digest.c_str(), human_size(i.size).c_str(), i.created.c_str());
    }
    return 0;
  });
}

int image_rm_command(const std::string& data_dir, const std::string& name) {
  return guarded("rm", [&] {
    ImageStore store(data_dir);
    auto ref = parse_ref(name);
    if (!store.remove(ref)) {
      std::fprintf(stderr, "sandboxd image rm: no image %s (see `sandboxd image ls`)\n", ref.str().c_str());
      return 1;
    }
    std::printf("removed %s\n", ref.str().c_str());
    return 0;
  });
}

}  // namespace sandboxd::app
