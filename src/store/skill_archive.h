// An uploaded skill, checked before anything is kept: the files of a multipart upload
// (each part's filename is its path) or one zip archive, written into a private staging
// folder with every hostile case refused while it is written — absolute paths, `..`,
// links, device entries, duplicates, too many files, too many bytes, zip bombs (sizes
// and ratio checked while inflating, not trusted from the headers). Then the layout
// (one top folder holding SKILL.md) and SKILL.md's front matter (name, description).
// A refused upload is a value (SkillRefusal) and leaves nothing: the staging folder goes
// with the object. A disk that fails while the upload is written is not the client's
// doing: that is thrown.
#pragma once

#include <boost/system/result.hpp>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

namespace sandboxd::store {

// Why an upload is refused, and the message that tells its client what to change.
struct SkillRefusal {
  enum class Kind {
    kPath,         // a path that is absolute, climbs out, repeats, nests too deep...
    kTooLarge,     // more bytes than the limit, uncompressed
    kTooMany,      // more files and folders than the limit
    kArchive,      // a zip that is not one, is corrupt, or holds what a skill may not
    kLayout,       // not one top folder holding SKILL.md
    kManifest,     // SKILL.md's front matter
    kNameChanged,  // a new version whose SKILL.md names another skill
    kNoSuchSkill,  // a new version of a skill the owner does not have
  };
  Kind kind;
  std::string message;
};

template <typename T>
using SkillResult = boost::system::result<T, SkillRefusal>;

// Lets SkillResult<T>::value() throw; callers test has_value()/error() instead.
[[noreturn]] void throw_exception_from_error(const SkillRefusal& refusal, const boost::source_location& loc);

// Folders are entries too: each one a folder of the upload makes counts against
// max_files (files and folders together) and is charged kFolderBytes against max_bytes
// (what a folder takes on disk), and no path is nested deeper than max_depth folders.
// So zero bytes of content cannot make more than max_files inodes, however the paths
// are laid out.
struct SkillLimits {
  uint64_t max_bytes = 30ull << 20;  // all files together, uncompressed, folders charged
  size_t max_files = 1000;           // files and folders together
  size_t max_depth = 16;             // folders above a file, the top folder included
};
inline constexpr uint64_t kFolderBytes = 4096;

// SKILL.md's front matter.
struct SkillManifest {
  std::string name;         // [a-z0-9-]{1,64}
  std::string description;  // 1-1024 characters
};

// Parses and checks SKILL.md's text.
SkillResult<SkillManifest> parse_skill_manifest(std::string_view skill_md);

class SkillStaging {
 public:
  // Creates `dir` (which must not exist); removed on destruction unless taken.
  SkillStaging(std::string dir, SkillLimits limits);
  ~SkillStaging();
  SkillStaging(const SkillStaging&) = delete;
  SkillStaging& operator=(const SkillStaging&) = delete;

  // One file of a multipart upload, in pieces. After a refusal the upload is over.
  SkillResult<void> begin_file(std::string_view path);
  SkillResult<void> write(std::string_view bytes);
  void end_file();
  // True when the upload so far is exactly one file named *.zip: the archive form.
  bool single_zip() const;
  // Replaces that one file with the entries of the archive, checked the same way.
  SkillResult<void> extract_single_zip();

  // After everything arrived: the skill's folder and its manifest.
  struct Checked {
    std::string content_dir;  // the folder holding SKILL.md
    SkillManifest manifest;
  };
  SkillResult<Checked> check();

  const std::string& dir() const { return dir_; }
  // The caller moved the content away; only what is left is removed.
  size_t files() const { return files_; }
  size_t folders() const { return folders_.size(); }
  uint64_t bytes() const { return bytes_; }

 private:
  // Validates a relative path and creates its parent folders (each new one counted and
  // charged); returns the host path.
  SkillResult<std::string> prepare(std::string_view path, bool directory);
  SkillResult<void> count_bytes(uint64_t n);
  SkillResult<void> count_entry();
  SkillResult<void> extract_zip(const std::string& archive);

  std::string dir_;
  SkillLimits limits_;
  int fd_ = -1;  // the file being written
  std::string current_;
  std::string first_path_;
  size_t files_ = 0;
  std::set<std::string> folders_;  // made so far (relative paths): no lstat per segment
  uint64_t bytes_ = 0;
};

}  // namespace sandboxd::store
