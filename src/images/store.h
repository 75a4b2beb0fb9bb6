// The image store: DATA_DIR/images/<name@tag>/{rootfs/, manifest.json}. An image is
// made in a staging directory beside the others and renamed into place only when
// complete, so a failed or interrupted import or build leaves no image behind.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "images/stream.h"

namespace sandboxd::images {

struct ImageRef {
  std::string name;  // "example/python", "registry.local:5000/team/img"
  std::string tag;   // "3.11", "latest"
  std::string str() const { return name + ":" + tag; }
};

// Parses NAME[:TAG] (a tag after the last '/', as docker reads it). Names are
// lower-case components of [a-z0-9._-] starting with a letter or digit, separated by
// '/', the first one optionally with a registry port; tags are [A-Za-z0-9_.-], at most
// 128 characters, not starting with '.' or '-'. Throws ImageError naming the problem.
ImageRef parse_ref(const std::string& text, const std::string& default_tag = "latest");
// The same checks for a name and tag given apart (the configuration's repository/tag).
ImageRef make_ref(const std::string& name, const std::string& tag);

struct ImageInfo {
  ImageRef ref;
  std::string dir;      // DATA_DIR/images/<dir name>
  std::string rootfs;   // dir + "/rootfs"
  std::string digest;   // "sha256:..."
  uint64_t size = 0;    // bytes of the files in rootfs
  std::string created;  // RFC 3339, UTC
  boost::json::object manifest;
};

// Installed packages of a Debian-based root, "name=version" sorted, from its dpkg
// status file (what dpkg-query reads); empty when it has none.
std::vector<std::string> installed_packages(const std::string& rootfs);

std::string utc_now_rfc3339();
std::string human_size(uint64_t bytes);

class ImageStore {
 public:
  explicit ImageStore(const std::string& data_dir);

  const std::string& images_dir() const { return images_dir_; }
  std::vector<ImageInfo> list() const;
  std::optional<ImageInfo> find(const ImageRef& ref) const;
  // Removes an image; false when there is none of that name and tag.
  bool remove(const ImageRef& ref);

  // A directory in which an image is made: rootfs() is filled in, then commit() puts it
  // in place (replacing an image of the same name and tag). Without commit() it is
  // removed with everything in it.
  class Staging {
   public:
    Staging(ImageStore& store, std::string dir);
    ~Staging();
    Staging(const Staging&) = delete;
    Staging& operator=(const Staging&) = delete;
    const std::string& dir() const { return dir_; }
    std::string rootfs() const { return dir_ + "/rootfs"; }
    // Writes manifest.json (with name, tag, size and created filled in) and renames the
    // image into place. Returns the installed image.
    ImageInfo commit(const ImageRef& ref, boost::json::object manifest);

   private:
    ImageStore& store_;
    std::string dir_;
    bool committed_ = false;
  };
  // Makes a staging directory (with an empty rootfs/ of mode 0755), removing first the
  // staging directories of imports that died.
  std::unique_ptr<Staging> stage();

  // Where an image of this name lives (whether or not it exists).
  std::string dir_for(const ImageRef& ref) const;

 private:
  std::optional<ImageInfo> read(const std::string& dir) const;
  std::string images_dir_;
};

// The image `serve` runs sandboxes from, for external.opensandbox.codeExecution.image.
struct ImageSelection {
  std::string rootfs;   // empty: the host's /usr and friends
  std::string label;    // for the log: "example/foo:1 (sha256:…)" or "the host's"
  std::string problem;  // non-empty: no sandbox can start; says which image is missing
};
// An installed image is used; the built-in default name, when not installed, means the
// host image (what sandboxd always ran); any other missing or invalid name is a problem.
ImageSelection select_image(const std::string& data_dir, const std::string& repository,
                            const std::string& tag, bool builtin_default);

}  // namespace sandboxd::images
