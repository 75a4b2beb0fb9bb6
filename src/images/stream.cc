#include "images/stream.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "runtime/syscall_error.h"

namespace sandboxd::images {

using runtime::SyscallError;

bool Source::read_full(char* buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    size_t got = read(buf + done, n - done);
    if (got == 0) return false;
    done += got;
  }
  return true;
}

uint64_t Source::drain() {
  char buf[65536];
  uint64_t total = 0;
  while (size_t got = read(buf, sizeof buf)) total += got;
  return total;
}

FileSource::FileSource(const std::string& path) : path_(path) {
  fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw SyscallError("open(" + path + ", O_RDONLY)", errno);
}

FileSource::~FileSource() {
  if (fd_ >= 0) close(fd_);
}

size_t FileSource::read(char* buf, size_t n) {
  ssize_t got = runtime::retry_eintr([&] { return ::read(fd_, buf, n); });
  if (got < 0) throw SyscallError("read(" + path_ + ")", errno);
  return static_cast<size_t>(got);
}

DecompressingSource::DecompressingSource(Source& raw, std::string what) : raw_(raw), what_(std::move(what)) {
  in_.resize(1 << 16);
}

DecompressingSource::~DecompressingSource() {
  if (inflating_) inflateEnd(&zs_);
}

size_t DecompressingSource::fill() {
  if (in_pos_ < in_len_) return in_len_ - in_pos_;
  in_pos_ = 0;
  in_len_ = raw_.read(in_.data(), in_.size());
  return in_len_;
}

void DecompressingSource::detect() {
  detected_ = true;
  // Enough bytes for every magic number we look at (a short stream is plain).
  while (in_len_ < 6) {
    size_t got = raw_.read(in_.data() + in_len_, in_.size() - in_len_);
    if (got == 0) break;
    in_len_ += got;
  }
  auto starts = [&](const char* magic, size_t len) {
    return in_len_ >= len && std::memcmp(in_.data(), magic, len) == 0;
  };
  if (starts("\x28\xb5\x2f\xfd", 4))
    throw ImageError(what_ + " is zstd-compressed; only plain and gzip layers are supported");
  if (starts("\xfd"
             "7zXZ",
             5))
    throw ImageError(what_ + " is xz-compressed; only plain and gzip layers are supported");
  if (starts("BZh", 3))
    throw ImageError(what_ + " is bzip2-compressed; only plain and gzip layers are supported");
  gzip_ = starts("\x1f\x8b", 2);
  if (!gzip_) return;
  // 15 + 32: the largest window, and zlib recognises the gzip header itself.
  if (inflateInit2(&zs_, 15 + 32) != Z_OK) throw ImageError("inflateInit2 failed for " + what_);
  inflating_ = true;
}

size_t DecompressingSource::read(char* buf, size_t n) {
  if (!detected_) detect();
  if (!gzip_) {
    if (in_pos_ < in_len_) {
      size_t take = std::min(n, in_len_ - in_pos_);
      std::memcpy(buf, in_.data() + in_pos_, take);
      in_pos_ += take;
      return take;
    }
    return raw_.read(buf, n);
  }
  if (stream_ended_ || n == 0) return 0;
  for (;;) {
    if (fill() == 0) throw ImageError(what_ + " is truncated (the gzip stream ends early)");
    zs_.next_in = reinterpret_cast<Bytef*>(in_.data() + in_pos_);
    zs_.avail_in = static_cast<uInt>(in_len_ - in_pos_);
    zs_.next_out = reinterpret_cast<Bytef*>(buf);
    zs_.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    int rc = inflate(&zs_, Z_NO_FLUSH);
    size_t produced = reinterpret_cast<char*>(zs_.next_out) - buf;
    in_pos_ = in_len_ - zs_.avail_in;
    if (rc == Z_STREAM_END) {
      // Another gzip member may follow (pigz, concatenated files): read it as more of
      // the same stream. Trailing zero bytes after the last member are padding.
      bool more = fill() > 0;
      while (more && in_.data()[in_pos_] == '\0') {
        ++in_pos_;
        more = fill() > 0;
      }
      if (more) {
        inflateReset(&zs_);
      } else {
        stream_ended_ = true;
      }
      if (produced > 0 || stream_ended_) return produced;
      continue;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      throw ImageError(what_ + ": gzip data is corrupt (" +
                       (zs_.msg ? zs_.msg : "inflate error " + std::to_string(rc)) + ")");
    if (produced > 0) return produced;
  }
}

HashingSource::HashingSource(Source& inner) : inner_(inner), ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1)
    throw ImageError("SHA-256 is unavailable");
}

HashingSource::~HashingSource() { EVP_MD_CTX_free(ctx_); }

size_t HashingSource::read(char* buf, size_t n) {
  size_t got = inner_.read(buf, n);
  EVP_DigestUpdate(ctx_, buf, got);
  bytes_ += got;
  return got;
}

namespace {
std::string to_hex(const unsigned char* bytes, unsigned len) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(kHex[bytes[i] >> 4]);
    out.push_back(kHex[bytes[i] & 15]);
  }
  return out;
}
}  // namespace

std::string HashingSource::hex_digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx_, md, &len);
  return to_hex(md, len);
}

std::string sha256_hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return to_hex(md, len);
}

}  // namespace sandboxd::images
