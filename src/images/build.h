// `sandboxd image build`: a Debian root filesystem made with debootstrap (minbase) and
// apt-get in a chroot, put in the image store like an imported image.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "images/store.h"

namespace sandboxd::images {

// Debian's packages for the contract's runtime environment (Python 3 with the data
// libraries, and the command-line tools).
extern const std::vector<std::string> kDataSciencePackages;
// What the contract lists and Debian bookworm does not package.
extern const std::vector<std::string> kNotInDebian;

struct BuildOptions {
  ImageRef ref;
  bool minimal = false;               // minbase + `packages` only
  std::vector<std::string> packages;  // in addition to (or, minimal, instead of) the set
  std::string mirror = "http://deb.debian.org/debian";
  std::string suite = "bookworm";
  FILE* progress = stdout;
};

// Runs debootstrap and apt-get (their output passed through), strips what a sandbox
// must not have (device nodes, setuid and setgid bits), records the installed packages
// and installs the image. Throws ImageError; nothing is left in the store then.
ImageInfo build_image(ImageStore& store, const BuildOptions& options);

// Removes device nodes, FIFOs and sockets and clears setuid/setgid bits below `root`
// (not following symlinks). Returns how many entries it changed.
uint64_t sanitize_tree(const std::string& root);

}  // namespace sandboxd::images
