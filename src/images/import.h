// `sandboxd image import`: a `docker save` tarball (manifest.json with Config, RepoTags
// and Layers) or an OCI image layout tarball (oci-layout, index.json, blobs/sha256/...),
// plain or gzip-compressed, made into an image of the store. Every digest the format
// gives is checked: blob names and descriptors against the bytes, the config's
// rootfs.diff_ids against each uncompressed layer.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "images/extract.h"
#include "images/store.h"

namespace sandboxd::images {

struct ImportOptions {
  std::string file;
  std::optional<ImageRef> name;  // default: the tarball's own (RepoTags, OCI ref annotations)
  FILE* progress = stdout;       // one line per stage and per layer
};

struct ImportResult {
  ImageInfo image;
  std::string format;  // "docker-save" or "oci"
  ExtractReport report;
};

// Throws ImageError (or SyscallError); nothing is left in the store then.
ImportResult import_image(ImageStore& store, const ImportOptions& options);

}  // namespace sandboxd::images
