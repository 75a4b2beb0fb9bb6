// Byte sources for reading image archives as streams: a file descriptor, a layer that
// may be gzip-compressed, and a pass-through that computes the SHA-256 of what it reads
// (how blob and layer digests are verified without a second pass over the data).
#pragma once

#include <openssl/evp.h>

#include <zlib.h>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace sandboxd::images {

// What goes wrong with an image: a bad archive, a digest mismatch, a name, the store.
class ImageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Source {
 public:
  virtual ~Source() = default;
  // Reads up to `n` bytes; 0 only at the end of the stream. Throws on errors.
  virtual size_t read(char* buf, size_t n) = 0;
  // Reads exactly `n` bytes; false when the stream ends first (what was read is in buf).
  bool read_full(char* buf, size_t n);
  // Reads and drops everything left; returns how many bytes that was.
  uint64_t drain();
};

// A file, read from its current offset. Owns the descriptor.
class FileSource : public Source {
 public:
  explicit FileSource(const std::string& path);
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  size_t read(char* buf, size_t n) override;

 private:
  std::string path_;
  int fd_ = -1;
};

// A layer as stored: plain tar or gzip (detected by its magic bytes, not by a media
// type an archive could get wrong). Concatenated gzip members are read as one stream.
// zstd, xz and bzip2 are recognised and refused with a clear message.
class DecompressingSource : public Source {
 public:
  DecompressingSource(Source& raw, std::string what);
  ~DecompressingSource() override;
  DecompressingSource(const DecompressingSource&) = delete;
  DecompressingSource& operator=(const DecompressingSource&) = delete;
  size_t read(char* buf, size_t n) override;
  bool gzip() const { return gzip_; }

 private:
  void detect();
  size_t fill();  // more compressed input into in_; 0 at the end

  Source& raw_;
  std::string what_;  // for messages: "layer 2 (blobs/sha256/ab12…)"
  bool detected_ = false, gzip_ = false, stream_ended_ = false, inflating_ = false;
  std::string in_;
  size_t in_pos_ = 0, in_len_ = 0;
  z_stream zs_{};
};

// Passes bytes through and hashes them.
class HashingSource : public Source {
 public:
  explicit HashingSource(Source& inner);
  ~HashingSource() override;
  HashingSource(const HashingSource&) = delete;
  HashingSource& operator=(const HashingSource&) = delete;
  size_t read(char* buf, size_t n) override;
  // Lower-case hex SHA-256 of everything read so far (finishes the hash: call once).
  std::string hex_digest();
  uint64_t bytes() const { return bytes_; }

 private:
  Source& inner_;
  EVP_MD_CTX* ctx_;
  uint64_t bytes_ = 0;
};

// SHA-256 of a string, lower-case hex.
std::string sha256_hex(const std::string& data);

}  // namespace sandboxd::images
