#include "store/skill_archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace sandboxd::store {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxPathLength = 1024;
constexpr size_t kMaxSegmentLength = 255;
// A zip entry inflating to more than this many times its compressed size (once it is
// past 1 MiB) is a bomb, whatever its headers claim.
constexpr uint64_t kMaxRatio = 200;

using Kind = SkillRefusal::Kind;

SkillRefusal refuse(Kind kind, std::string why) { return SkillRefusal{kind, std::move(why)}; }

std::string shown(std::string_view path) {
  std::string out;
  for (unsigned char c : path.substr(0, 200))
    out.push_back(c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c));
  return out;
}

// Splits and checks a relative path; refuses anything that could leave the folder.
SkillResult<std::vector<std::string>> segments_of(std::string_view path) {
  if (path.empty()) return refuse(Kind::kPath, "A file has an empty path");
  if (path.size() > kMaxPathLength)
    return refuse(Kind::kPath, "The path '" + shown(path) + "' is longer than 1024 bytes");
  if (path.front() == '/')
    return refuse(Kind::kPath, "Absolute paths are not allowed: '" + shown(path) + "'");
  if (path.find('\\') != std::string_view::npos)
    return refuse(Kind::kPath, "Backslashes are not allowed in paths: '" + shown(path) + "'");
  for (unsigned char c : path)
    if (c < 0x20 || c == 0x7f)
      return refuse(Kind::kPath, "Control characters are not allowed in paths: '" + shown(path) + "'");
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view segment = path.substr(start, end - start);
    if (segment == "..") return refuse(Kind::kPath, "Paths with '..' are not allowed: '" + shown(path) + "'");
    if (segment.size() > kMaxSegmentLength)
      return refuse(Kind::kPath, "A path segment is longer than 255 bytes: '" + shown(path) + "'");
    if (!segment.empty() && segment != ".")
      out.emplace_back(segment);
    else if (segment.empty() && end != path.size())
      return refuse(Kind::kPath, "Empty path segments are not allowed: '" + shown(path) + "'");
    start = end + 1;
  }
  if (out.empty()) return refuse(Kind::kPath, "A file has an empty path");
  return out;
}

uint16_t u16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

bool read_at(int fd, void* buffer, size_t length, uint64_t offset) {
  auto* out = static_cast<char*>(buffer);
  while (length > 0) {
    ssize_t n = pread(fd, out, length, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out += n;
    length -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

void write_all(int fd, const char* data, size_t length) {
  while (length > 0) {
    ssize_t n = ::write(fd, data, length);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("writing a skill file: ") + std::strerror(errno));
    data += n;
    length -= static_cast<size_t>(n);
  }
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

}  // namespace

void throw_exception_from_error(const SkillRefusal& refusal, const boost::source_location&) {
  throw std::logic_error("SkillResult::value() on a refusal: " + refusal.message);
}

SkillResult<SkillManifest> parse_skill_manifest(std::string_view text) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  auto first_line_end = text.find('\n');
  if (first_line_end == std::string_view::npos || trim(std::string(text.substr(0, first_line_end))) != "---")
    return refuse(Kind::kManifest, "SKILL.md must start with YAML front matter ('---' on the first line)");
  std::string yaml;
  bool closed = false;
  size_t at = first_line_end + 1;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string line(text.substr(at, end - at));
    at = end + 1;
    if (trim(line) == "---") {
      closed = true;
      break;
    }
    yaml += line + "\n";
  }
  if (!closed) return refuse(Kind::kManifest, "SKILL.md's front matter has no closing '---' line");
  YAML::Node node;
  try {
    node = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {  // yaml-cpp reports a syntax error only by a throw
    return refuse(Kind::kManifest, "SKILL.md's front matter is not valid YAML: " + e.msg);
  }
  if (!node.IsMap())
    return refuse(Kind::kManifest, "SKILL.md's front matter must be a mapping with 'name' and 'description'");
  SkillManifest manifest;
  auto text_field = [&](const char* key) -> SkillResult<std::string> {
    auto value = node[key];
    if (!value) return refuse(Kind::kManifest, std::string("SKILL.md's front matter has no '") + key + "'");
    if (!value.IsScalar())
      return refuse(Kind::kManifest, std::string("SKILL.md's front matter: '") + key + "' must be a string");
    return trim(value.Scalar());
  };
  auto name = text_field("name");
  if (!name) return name.error();
  auto description = text_field("description");
  if (!description) return description.error();
  manifest.name = std::move(*name);
  manifest.description = std::move(*description);
  if (manifest.name.empty() || manifest.name.size() > 64)
    return refuse(Kind::kManifest, "SKILL.md's 'name' must be 1 to 64 characters");
  for (char c : manifest.name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
      return refuse(Kind::kManifest,
                    "SKILL.md's 'name' may hold only lowercase letters, digits and hyphens: '" +
                        shown(manifest.name) + "'");
  if (manifest.description.empty())
    return refuse(Kind::kManifest, "SKILL.md's 'description' must not be empty");
  if (manifest.description.size() > 1024)
    return refuse(Kind::kManifest, "SKILL.md's 'description' is longer than 1024 characters");
  return manifest;
}

SkillStaging::SkillStaging(std::string dir, SkillLimits limits) : dir_(std::move(dir)), limits_(limits) {
  fs::create_directories(fs::path(dir_).parent_path());
  if (mkdir(dir_.c_str(), 0700) != 0)
    throw std::runtime_error("creating " + dir_ + ": " + std::strerror(errno));
}

SkillStaging::~SkillStaging() {
  if (fd_ >= 0) close(fd_);
  std::error_code ec;
  fs::remove_all(dir_, ec);
  fs::remove(dir_ + ".zip", ec);
}

SkillResult<void> SkillStaging::count_bytes(uint64_t n) {
  bytes_ += n;
  if (bytes_ > limits_.max_bytes)
    return refuse(Kind::kTooLarge, "The skill is larger than " + std::to_string(limits_.max_bytes) +
                                       " bytes uncompressed (each folder counts " +
                                       std::to_string(kFolderBytes) + ")");
  return {};
}

SkillResult<void> SkillStaging::count_entry() {
  if (files_ + folders_.size() > limits_.max_files)
    return refuse(Kind::kTooMany,
                  "The skill has more than " + std::to_string(limits_.max_files) + " files and folders");
  return {};
}

SkillResult<std::string> SkillStaging::prepare(std::string_view path, bool directory) {
  auto split = segments_of(path);
  if (!split) return split.error();
  const auto& segments = *split;
  const size_t depth = directory ? segments.size() : segments.size() - 1;
  if (depth > limits_.max_depth)
    return refuse(Kind::kPath, "'" + shown(path) + "' is nested deeper than " +
                                   std::to_string(limits_.max_depth) + " folders");
  std::string host = dir_, relative;
  for (size_t i = 0; i < segments.size(); ++i) {
    host += "/" + segments[i];
    relative += (i ? "/" : "") + segments[i];
    const bool last = i + 1 == segments.size();
    if (last && !directory) break;
    if (folders_.contains(relative)) continue;
    // Not made by this upload as a folder: either new, or a file of it (the staging
    // folder is private and starts empty).
    struct stat st {};
    if (lstat(host.c_str(), &st) == 0)
      return refuse(Kind::kPath, "'" + shown(path) + "' uses a file as a folder (duplicate names)");
    folders_.insert(relative);
    if (auto counted = count_entry(); !counted) return counted.error();
    if (auto counted = count_bytes(kFolderBytes); !counted) return counted.error();
    if (mkdir(host.c_str(), 0755) != 0)
      throw std::runtime_error("mkdir " + host + ": " + std::strerror(errno));
  }
  return host;
}

SkillResult<void> SkillStaging::begin_file(std::string_view path) {
  if (fd_ >= 0) end_file();
  ++files_;
  if (auto counted = count_entry(); !counted) return counted.error();
  auto host = prepare(path, /*directory=*/false);
  if (!host) return host.error();
  fd_ = open(host->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    if (errno == EEXIST) return refuse(Kind::kPath, "The path '" + shown(path) + "' appears more than once");
    throw std::runtime_error("creating " + *host + ": " + std::strerror(errno));
  }
  current_ = std::move(*host);
  if (files_ == 1) first_path_ = std::string(path);
  return {};
}

SkillResult<void> SkillStaging::write(std::string_view bytes) {
  if (fd_ < 0) return {};
  if (auto counted = count_bytes(bytes.size()); !counted) return counted.error();
  write_all(fd_, bytes.data(), bytes.size());
  return {};
}

void SkillStaging::end_file() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

bool SkillStaging::single_zip() const {
  if (files_ != 1 || first_path_.size() < 4) return false;
  std::string ext = first_path_.substr(first_path_.size() - 4);
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".zip";
}

SkillResult<void> SkillStaging::extract_single_zip() {
  end_file();
  const std::string archive = dir_ + ".zip";
  fs::rename(current_, archive);
  // Start over: the archive's entries are what counts.
  for (const auto& entry : fs::directory_iterator(dir_)) fs::remove_all(entry.path());
  files_ = 0;
  folders_.clear();
  bytes_ = 0;
  first_path_.clear();
  auto extracted = extract_zip(archive);
  fs::remove(archive);
  return extracted;
}

SkillResult<void> SkillStaging::extract_zip(const std::string& archive) {
  int fd = open(archive.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("opening the uploaded archive: " + std::string(std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  fstat(fd, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 22) return refuse(Kind::kArchive, "The zip archive is truncated or not a zip file");
  // The end-of-central-directory record, within the last 64 KiB + 22 bytes.
  const uint64_t tail_size = std::min<uint64_t>(size, 65535 + 22);
  std::vector<unsigned char> tail(tail_size);
  if (!read_at(fd, tail.data(), tail.size(), size - tail_size))
    return refuse(Kind::kArchive, "The zip archive cannot be read");
  int64_t eocd = -1;
  for (int64_t i = static_cast<int64_t>(tail_size) - 22; i >= 0; --i)
    if (u32(&tail[static_cast<size_t>(i)]) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd < 0) return refuse(Kind::kArchive, "Not a zip archive (no end of central directory)");
  const unsigned char* e = &tail[static_cast<size_t>(eocd)];
  const uint16_t entries = u16(e + 10);
  const uint32_t cd_size = u32(e + 12), cd_offset = u32(e + 16);
  if (u16(e + 4) != 0 || u16(e + 6) != 0)
    return refuse(Kind::kArchive, "Multi-part zip archives are not supported");
  if (entries == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF)
    return refuse(Kind::kArchive, "ZIP64 archives are not supported (a skill is at most " +
                                      std::to_string(limits_.max_bytes) + " bytes)");
  if (entries > limits_.max_files)
    return refuse(Kind::kTooMany, "The skill has more than " + std::to_string(limits_.max_files) + " files");
  if (static_cast<uint64_t>(cd_offset) + cd_size > size)
    return refuse(Kind::kArchive, "The zip archive's central directory is out of range");
  std::vector<unsigned char> cd(cd_size);
  if (!read_at(fd, cd.data(), cd.size(), cd_offset))
    return refuse(Kind::kArchive, "The zip archive cannot be read");

  std::vector<char> in(64 << 10), out(64 << 10);
  size_t at = 0;
  for (uint16_t n = 0; n < entries; ++n) {
    if (at + 46 > cd.size() || u32(&cd[at]) != 0x02014b50)
      return refuse(Kind::kArchive, "The zip archive's central directory is corrupt");
    const unsigned char* h = &cd[at];
    const uint16_t made_by = u16(h + 4), flags = u16(h + 8), method = u16(h + 10);
    const uint32_t crc = u32(h + 16), compressed = u32(h + 20), uncompressed = u32(h + 24);
    const uint16_t name_length = u16(h + 28), extra_length = u16(h + 30), comment_length = u16(h + 32);
    const uint32_t external = u32(h + 38), local_offset = u32(h + 42);
    if (at + 46 + name_length > cd.size())
      return refuse(Kind::kArchive, "The zip archive's central directory is corrupt");
    std::string name(reinterpret_cast<const char*>(h + 46), name_length);
    at += 46 + static_cast<size_t>(name_length) + extra_length + comment_length;
    if (name.find('\0') != std::string::npos)
      return refuse(Kind::kArchive, "A zip entry's name holds a NUL byte");
    if (flags & 1)
      return refuse(Kind::kArchive, "Encrypted zip entries are not supported: '" + shown(name) + "'");
    const bool unix_mode = (made_by >> 8) == 3;
    const mode_t mode = unix_mode ? static_cast<mode_t>(external >> 16) : 0;
    const mode_t type = mode & S_IFMT;
    if (type == S_IFLNK)
      return refuse(Kind::kArchive, "Links are not allowed in a skill: '" + shown(name) + "'");
    if (type == S_IFCHR || type == S_IFBLK || type == S_IFIFO || type == S_IFSOCK)
      return refuse(Kind::kArchive,
                    "Device and special entries are not allowed in a skill: '" + shown(name) + "'");
    if (name.ends_with('/') || type == S_IFDIR) {
      if (auto prepared = prepare(name, /*directory=*/true); !prepared) return prepared.error();
      continue;
    }
    if (method != 0 && method != 8)
      return refuse(Kind::kArchive, "Zip entry '" + shown(name) + "' uses an unsupported compression method");
    if (static_cast<uint64_t>(uncompressed) + bytes_ > limits_.max_bytes)
      return refuse(Kind::kTooLarge,
                    "The skill is larger than " + std::to_string(limits_.max_bytes) + " bytes uncompressed");
    unsigned char local[30];
    if (!read_at(fd, local, sizeof local, local_offset) || u32(local) != 0x04034b50)
      return refuse(Kind::kArchive, "The zip archive's entry '" + shown(name) + "' is corrupt");
    const uint64_t data_offset = static_cast<uint64_t>(local_offset) + 30 + u16(local + 26) + u16(local + 28);
    if (data_offset + compressed > size)
      return refuse(Kind::kArchive, "The zip archive's entry '" + shown(name) + "' is truncated");

    if (auto begun = begin_file(name); !begun) return begun.error();
    uLong check = crc32(0, nullptr, 0);
    uint64_t written = 0;
    auto emit = [&](const char* data, size_t length) -> SkillResult<void> {
      written += length;
      if (written > uncompressed)
        return refuse(Kind::kArchive, "Zip entry '" + shown(name) +
                                          "' inflates past the size its header declares (a zip bomb?)");
      if (written > (1u << 20) && written / std::max<uint64_t>(compressed, 1) > kMaxRatio)
        return refuse(Kind::kArchive, "Zip entry '" + shown(name) + "' has a compression ratio over " +
                                          std::to_string(kMaxRatio) + ":1 (a zip bomb?)");
      check = crc32(check, reinterpret_cast<const Bytef*>(data), static_cast<uInt>(length));
      return write(std::string_view(data, length));
    };
    uint64_t offset = data_offset, remaining = compressed;
    if (method == 0) {
      if (compressed != uncompressed)
        return refuse(Kind::kArchive, "Zip entry '" + shown(name) + "' is stored with inconsistent sizes");
      while (remaining > 0) {
        size_t chunk = static_cast<size_t>(std::min<uint64_t>(remaining, in.size()));
        if (!read_at(fd, in.data(), chunk, offset))
          return refuse(Kind::kArchive, "The zip archive cannot be read");
        if (auto emitted = emit(in.data(), chunk); !emitted) return emitted.error();
        offset += chunk;
        remaining -= chunk;
      }
    } else {
      z_stream z{};
      if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw std::runtime_error("inflateInit2 failed");
      struct End {
        z_stream& z;
        ~End() { inflateEnd(&z); }
      } end{z};
      int rc = Z_OK;
      while (rc != Z_STREAM_END) {
        if (z.avail_in == 0) {
          if (remaining == 0) return refuse(Kind::kArchive, "Zip entry '" + shown(name) + "' is truncated");
          size_t chunk = static_cast<size_t>(std::min<uint64_t>(remaining, in.size()));
          if (!read_at(fd, in.data(), chunk, offset))
            return refuse(Kind::kArchive, "The zip archive cannot be read");
          offset += chunk;
          remaining -= chunk;
          z.next_in = reinterpret_cast<Bytef*>(in.data());
          z.avail_in = static_cast<uInt>(chunk);
        }
        z.next_out = reinterpret_cast<Bytef*>(out.data());
        z.avail_out = static_cast<uInt>(out.size());
        rc = inflate(&z, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END)
          return refuse(Kind::kArchive, "Zip entry '" + shown(name) + "' is corrupt");
        if (auto emitted = emit(out.data(), out.size() - z.avail_out); !emitted) return emitted.error();
      }
    }
    end_file();
    if (written != uncompressed || check != crc)
      return refuse(Kind::kArchive, "Zip entry '" + shown(name) + "' does not match its size or checksum");
    if (unix_mode && (mode & 0111)) chmod(current_.c_str(), 0755);
  }
  return {};
}

SkillResult<SkillStaging::Checked> SkillStaging::check() {
  end_file();
  std::string content = dir_;
  if (!fs::exists(fs::path(dir_) / "SKILL.md")) {
    std::vector<fs::path> top;
    for (const auto& entry : fs::directory_iterator(dir_)) top.push_back(entry.path());
    if (top.size() != 1 || !fs::is_directory(fs::symlink_status(top[0])))
      return refuse(Kind::kLayout, "All files must be in one top-level folder that holds SKILL.md");
    content = top[0].string();
  }
  const fs::path skill_md = fs::path(content) / "SKILL.md";
  if (!fs::is_regular_file(fs::symlink_status(skill_md)))
    return refuse(Kind::kLayout, "The skill's folder has no SKILL.md");
  if (fs::file_size(skill_md) > (1u << 20)) return refuse(Kind::kLayout, "SKILL.md is larger than 1 MiB");
  std::string text(fs::file_size(skill_md), '\0');
  int fd = open(skill_md.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 || !read_at(fd, text.data(), text.size(), 0)) {
    if (fd >= 0) close(fd);
    throw std::runtime_error("reading SKILL.md");
  }
  close(fd);
  auto manifest = parse_skill_manifest(text);
  if (!manifest) return manifest.error();
  return Checked{content, std::move(*manifest)};
}

}  // namespace sandboxd::store
