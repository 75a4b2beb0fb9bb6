#include "store/skill_bucket.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <vector>

#include "base/hex.h"
#include "base/unique_fd.h"

namespace sandboxd::store {
namespace {

namespace fs = std::filesystem;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::optional<std::string> hex_decode(const std::string& hex) {
  if (hex.size() % 2) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int high = hex_digit(hex[i]), low = hex_digit(hex[i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    out.push_back(static_cast<char>(high << 4 | low));
  }
  return out;
}

std::string hex_of(const std::string& bytes) {
  return hex_encode(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

// A path from the manifest stays inside the version's folder: relative, no empty, "."
// or ".." segment.
bool safe_relative(const std::string& path) {
  if (path.empty() || path.front() == '/') return false;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string segment = path.substr(start, end - start);
    if (segment.empty() || segment == "." || segment == "..") return false;
    start = end + 1;
  }
  return path.find('\0') == std::string::npos;
}

// One line per entry: "d <mode> <hex path>" or "f <mode> <size> <object number> <hex path>".
struct Entry {
  bool folder = false;
  unsigned mode = 0;
  uint64_t size = 0;
  size_t object = 0;
  std::string path;
};

}  // namespace

SkillBucket::SkillBucket(std::shared_ptr<S3Client> client, std::string prefix)
    : client_(std::move(client)), prefix_(std::move(prefix) + "skills/") {}

std::string SkillBucket::version_prefix(const std::string& skill_id, const std::string& version) const {
  return prefix_ + skill_id + "/" + version + "/";
}

void SkillBucket::publish(const std::string& skill_id, const std::string& version,
                          const std::string& directory) {
  const std::string base = version_prefix(skill_id, version);
  std::ostringstream manifest;
  size_t objects = 0;
  std::error_code ec;
  const fs::path root(directory);
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st {};
    if (lstat(it->path().c_str(), &st) != 0)
      throw SkillBucketError("skills: cannot read " + it->path().string());
    const std::string relative = fs::relative(it->path(), root).string();
    if (S_ISDIR(st.st_mode)) {
      manifest << "d " << std::oct << (st.st_mode & 07777) << std::dec << " " << hex_of(relative) << "\n";
    } else if (S_ISREG(st.st_mode)) {
      UniqueFd file(::open(it->path().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (!file.valid()) throw SkillBucketError("skills: cannot open " + it->path().string());
      const size_t number = objects++;
      auto stored = client_->put_object_from_fd(base + "files/" + std::to_string(number), file.get(),
                                                static_cast<uint64_t>(st.st_size));
      if (!stored) throw SkillBucketError("skills: storing " + relative + ": " + stored.error().describe());
      manifest << "f " << std::oct << (st.st_mode & 07777) << std::dec << " " << st.st_size << " " << number
               << " " << hex_of(relative) << "\n";
    }
  }
  if (ec) throw SkillBucketError("skills: walking " + directory + ": " + ec.message());
  // Last: its presence says the version is whole.
  if (auto stored = client_->put_object(base + "manifest", manifest.str()); !stored)
    throw SkillBucketError("skills: storing the manifest of " + skill_id + "/" + version + ": " +
                           stored.error().describe());
}

void SkillBucket::materialise(const std::string& skill_id, const std::string& version,
                              const std::string& staging) {
  const std::string base = version_prefix(skill_id, version);
  std::string text;
  {
    char name[] = "/tmp/sandboxd-skill-manifest-XXXXXX";
    UniqueFd fd(mkstemp(name));
    if (!fd.valid()) throw SkillBucketError("skills: cannot make a temporary file");
    unlink(name);
    auto got = client_->get_object(base + "manifest", fd.get());
    if (!got)
      throw SkillBucketError("skills: reading the manifest of " + skill_id + "/" + version + ": " +
                             got.error().describe());
    text.resize(*got);
    if (pread(fd.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
      throw SkillBucketError("skills: reading the manifest of " + skill_id + "/" + version);
  }
  std::vector<Entry> entries;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    Entry entry;
    std::string kind, hex;
    fields >> kind >> std::oct >> entry.mode >> std::dec;
    entry.folder = kind == "d";
    if (!entry.folder) fields >> entry.size >> entry.object;
    fields >> hex;
    auto path = hex_decode(hex);
    if (!fields || (kind != "d" && kind != "f") || !path || !safe_relative(*path))
      throw SkillBucketError("skills: the manifest of " + skill_id + "/" + version + " is damaged");
    entry.path = *path;
    entry.mode &= 0777;
    entries.push_back(std::move(entry));
  }
  fs::create_directories(staging);
  for (const auto& entry : entries) {  // folders come before what they hold (the walk's order)
    const fs::path target = fs::path(staging) / entry.path;
    if (entry.folder) {
      fs::create_directories(target);
      continue;
    }
    fs::create_directories(target.parent_path());
    UniqueFd file(::open(target.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!file.valid()) throw SkillBucketError("skills: cannot create " + target.string());
    auto got = client_->get_object(base + "files/" + std::to_string(entry.object), file.get());
    if (!got || *got != entry.size)
      throw SkillBucketError("skills: reading " + entry.path + " of " + skill_id + "/" + version + ": " +
                             (got ? "a size other than the manifest's" : got.error().describe()));
    fchmod(file.get(), entry.mode);
  }
}

bool SkillBucket::forget(const std::string& skill_id, const std::string& version) {
  const std::string prefix = version.empty() ? prefix_ + skill_id + "/" : version_prefix(skill_id, version);
  auto listed = client_->list_objects(prefix);
  if (!listed) return false;
  bool all = true;
  // The manifest first: a version half deleted is then one never used.
  for (const auto& object : *listed)
    if (object.key.ends_with("/manifest")) all = client_->delete_object(object.key).has_value() && all;
  for (const auto& object : *listed)
    if (!object.key.ends_with("/manifest")) all = client_->delete_object(object.key).has_value() && all;
  return all;
}

}  // namespace sandboxd::store
