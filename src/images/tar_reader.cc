#include "images/tar_reader.h"

#include <algorithm>
#include <cstring>

namespace sandboxd::images {
namespace {

constexpr size_t kBlock = 512;

// The ustar header's fields: offsets and lengths.
struct Field {
  size_t offset, length;
};
constexpr Field kName{0, 100}, kMode{100, 8}, kSize{124, 12}, kMtime{136, 12}, kChecksum{148, 8},
    kTypeflag{156, 1}, kLinkname{157, 100}, kMagic{257, 6}, kPrefix{345, 155};

std::string text_field(const char* block, Field f) {
  const char* begin = block + f.offset;
  return std::string(begin, strnlen(begin, f.length));
}

// Octal (NUL or space terminated), or GNU base-256 when the high bit of the first byte
// is set (sizes of 8 GiB and more). Returns false on anything else.
bool numeric_field(const char* block, Field f, uint64_t& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(block + f.offset);
  out = 0;
  if (p[0] & 0x80) {
    if (p[0] != 0x80) return false;  // negative numbers: not for sizes or modes
    for (size_t i = 1; i < f.length; ++i) {
      if (out >> 56) return false;
      out = (out << 8) | p[i];
    }
    return true;
  }
  size_t i = 0;
  while (i < f.length && p[i] == ' ') ++i;
  for (; i < f.length && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (out >> 61) return false;
    out = out * 8 + (p[i] - '0');
  }
  for (; i < f.length; ++i)
    if (p[i] != ' ' && p[i] != '\0') return false;
  return true;  // an empty field reads as 0
}

bool all_zero(const char* block) {
  return std::all_of(block, block + kBlock, [](char c) { return c == 0; });
}

// The header checksum: the sum of the header's bytes with the checksum field read as
// spaces. Old tars summed signed chars; both are accepted, as GNU tar does.
bool checksum_ok(const char* block) {
  uint64_t stored;
  if (!numeric_field(block, kChecksum, stored)) return false;
  uint64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    bool in_field = i >= kChecksum.offset && i < kChecksum.offset + kChecksum.length;
    unsigned char u = in_field ? ' ' : static_cast<unsigned char>(block[i]);
    signed char s = in_field ? ' ' : static_cast<signed char>(block[i]);
    unsigned_sum += u;
    signed_sum += s;
  }
  return stored == unsigned_sum || static_cast<int64_t>(stored) == signed_sum;
}

EntryType type_of(char flag) {
  switch (flag) {
    case '0':
    case '\0':
    case '7':
      return EntryType::kFile;
    case '1':
      return EntryType::kHardlink;
    case '2':
      return EntryType::kSymlink;
    case '3':
      return EntryType::kCharDevice;
    case '4':
      return EntryType::kBlockDevice;
    case '5':
      return EntryType::kDirectory;
    case '6':
      return EntryType::kFifo;
    default:
      return EntryType::kUnsupported;
  }
}

}  // namespace

TarReader::TarReader(Source& source, std::string what) : source_(source), what_(std::move(what)) {}

void TarReader::read_block(char* block, bool at_header) {
  if (!source_.read_full(block, kBlock))
    throw ImageError(what_ + " is truncated (it ends inside " + (at_header ? "a header" : "an entry's data") +
                     " after " + std::to_string(entries_) + " entries)");
}

size_t TarReader::read(char* buf, size_t n) {
  if (remaining_ == 0) return 0;
  size_t want = static_cast<size_t>(std::min<uint64_t>(n, remaining_));
  size_t got = source_.read(buf, want);
  if (got == 0)
    throw ImageError(what_ + " is truncated (it ends inside an entry's data after " +
                     std::to_string(entries_) + " entries)");
  remaining_ -= got;
  return got;
}

void TarReader::skip_rest_of_entry() {
  char buf[65536];
  while (remaining_ > 0) read(buf, sizeof buf);
  while (padding_ > 0) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(padding_, sizeof buf));
    if (!source_.read_full(buf, want))
      throw ImageError(what_ + " is truncated (it ends inside an entry's padding)");
    padding_ -= want;
  }
}

std::string TarReader::read_record_data(uint64_t size, const char* kind) {
  if (size > kMaxLongName)
    throw ImageError(what_ + ": a " + std::string(kind) + " record of " + std::to_string(size) +
                     " bytes (at most " + std::to_string(kMaxLongName) + ")");
  std::string data(size, '\0');
  remaining_ = size;
  padding_ = (kBlock - size % kBlock) % kBlock;
  size_t done = 0;
  while (done < size) done += read(data.data() + done, size - done);
  skip_rest_of_entry();
  return data;
}

// pax records: "LENGTH KEY=VALUE\n", LENGTH counting the whole record.
void TarReader::apply_pax(const std::string& records, std::map<std::string, std::string>& into,
                          const std::string& what) {
  size_t pos = 0;
  while (pos < records.size()) {
    if (records[pos] == '\0') break;  // padding some writers leave
    size_t space = records.find(' ', pos);
    if (space == std::string::npos) throw ImageError(what + ": a malformed pax record");
    uint64_t length = 0;
    for (size_t i = pos; i < space; ++i) {
      if (records[i] < '0' || records[i] > '9' || length > records.size())
        throw ImageError(what + ": a malformed pax record length");
      length = length * 10 + (records[i] - '0');
    }
    if (length <= space - pos + 1 || pos + length > records.size() || records[pos + length - 1] != '\n')
      throw ImageError(what + ": a malformed pax record");
    std::string record = records.substr(space + 1, pos + length - 1 - (space + 1));
    size_t eq = record.find('=');
    if (eq == std::string::npos) throw ImageError(what + ": a pax record without '='");
    std::string key = record.substr(0, eq), value = record.substr(eq + 1);
    // An empty value deletes the key (POSIX); only the keys we use are kept.
    if (key == "path" || key == "linkpath" || key == "size") {
      if (value.empty())
        into.erase(key);
      else
        into[key] = value;
    }
    pos += length;
  }
}

bool TarReader::next(TarEntry& entry) {
  if (ended_) return false;
  skip_rest_of_entry();
  std::string long_name, long_link;
  std::map<std::string, std::string> pax;
  char block[kBlock];
  for (;;) {
    // The end: two zero blocks; one zero block and the end of the stream is accepted
    // too, as are archives some writers end without any.
    if (!source_.read_full(block, kBlock)) {
      if (entries_ > 0 && long_name.empty() && long_link.empty() && pax.empty()) {
        ended_ = true;
        return false;
      }
      throw ImageError(what_ + " is truncated (it ends inside a header after " + std::to_string(entries_) +
                       " entries)");
    }
    if (all_zero(block)) {
      ended_ = true;
      return false;
    }
    if (!checksum_ok(block))
      throw ImageError(what_ + ": a corrupt tar header after " + std::to_string(entries_) +
                       " entries (checksum mismatch; not a tar archive, or damaged)");
    uint64_t size = 0, mode = 0, mtime = 0;
    if (!numeric_field(block, kSize, size))
      throw ImageError(what_ + ": a tar header with an unreadable size");
    numeric_field(block, kMode, mode);
    numeric_field(block, kMtime, mtime);
    char flag = block[kTypeflag.offset];
    if (flag == 'L') {
      long_name = read_record_data(size, "GNU long name");
      long_name.resize(strnlen(long_name.c_str(), long_name.size()));
      continue;
    }
    if (flag == 'K') {
      long_link = read_record_data(size, "GNU long link");
      long_link.resize(strnlen(long_link.c_str(), long_link.size()));
      continue;
    }
    if (flag == 'x') {
      apply_pax(read_record_data(size, "pax header"), pax, what_);
      continue;
    }
    if (flag == 'g') {
      apply_pax(read_record_data(size, "pax global header"), global_pax_, what_);
      continue;
    }
    ++entries_;
    entry = TarEntry{};
    entry.typeflag = flag;
    entry.type = type_of(flag);
    entry.mode = static_cast<uint32_t>(mode & 07777);
    entry.mtime = static_cast<int64_t>(mtime);
    // The name: pax, else GNU long name, else ustar prefix + name.
    std::string name = text_field(block, kName);
    if (std::memcmp(block + kMagic.offset, "ustar\0", 6) == 0) {  // POSIX ustar (not GNU's "ustar  ")
      std::string prefix = text_field(block, kPrefix);
      if (!prefix.empty()) name = prefix + "/" + name;
    }
    auto pick = [&](const char* key, const std::string& gnu, std::string fallback) {
      if (auto it = pax.find(key); it != pax.end()) return it->second;
      if (!gnu.empty()) return gnu;
      if (auto it = global_pax_.find(key); it != global_pax_.end()) return it->second;
      return fallback;
    };
    entry.path = pick("path", long_name, name);
    entry.link_target = pick("linkpath", long_link, text_field(block, kLinkname));
    std::string pax_size = pick("size", "", "");
    if (!pax_size.empty()) {
      try {
        size = std::stoull(pax_size);
      } catch (const std::exception&) {
        throw ImageError(what_ + ": a pax size that is not a number: " + pax_size);
      }
    }
    // Only regular files (and unknown types, to be skipped) carry data; a hardlink's
    // size field is ignored, as GNU tar does.
    if (entry.type != EntryType::kFile && entry.type != EntryType::kUnsupported) size = 0;
    entry.size = size;
    remaining_ = size;
    padding_ = (kBlock - size % kBlock) % kBlock;
    return true;
  }
}

}  // namespace sandboxd::images
