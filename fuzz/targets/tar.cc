// An image layer or image tarball: gzip detection and inflation, then the tar reader
// (ustar, GNU long names, pax), every entry's data read to the end.
#include <cstring>
#include <string>

#include "images/tar_reader.h"

using namespace sandboxd::images;

namespace {
class MemorySource : public Source {
 public:
  MemorySource(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t read(char* buf, size_t n) override {
    n = std::min(n, size_ - offset_);
    std::memcpy(buf, data_ + offset_, n);
    offset_ += n;
    return n;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  MemorySource raw(data, size);
  try {
    DecompressingSource layer(raw, "the fuzz input");
    TarReader reader(layer, "the fuzz input");
    TarEntry entry;
    char buf[4096];
    for (int entries = 0; entries < 10000 && reader.next(entry); ++entries)
      while (reader.read(buf, sizeof buf) > 0) {
      }
  } catch (const ImageError&) {
  }
  return 0;
}
