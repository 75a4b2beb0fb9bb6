// Skills (Anthropic Agent Skills shape): each owner's custom skills, stored as
// immutable versions on disk (DATA_DIR/skills/<skill id>/<version>/, files read-only)
// with their metadata in tables of the metadata database, and the built-in skills that
// ship with sandboxd (a folder of skill folders, served as source "anthropic").
// Versions are epoch-microsecond strings; "latest" resolves to the newest.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "store/database.h"
#include "store/skill_archive.h"
#include "store/skill_bucket.h"

namespace sandboxd::store {

struct SkillRecord {
  std::string id;      // skill_… (custom) or the built-in's name
  std::string source;  // "custom" | "anthropic"
  std::string display_name;
  std::string name;  // SKILL.md's name: the folder under /mnt/skills
  std::string latest_version;
  int64_t created_at_us = 0;
  int64_t updated_at_us = 0;
};

struct SkillVersionRecord {
  std::string skill_id;
  std::string version;
  std::string name;
  std::string description;
  int64_t created_at_us = 0;
  std::string directory;  // host folder holding SKILL.md
};

template <typename T>
struct SkillPage {
  std::vector<T> items;
  bool has_more = false;
};

class SkillStore {
 public:
  // `db_path`: the metadata database (its own connection, WAL). `builtin_dir`: the
  // built-in skills (may be empty or missing: none).
  SkillStore(const std::string& db_path, std::string data_dir, std::string builtin_dir);
  // Any metadata database (its schema is migrated first).
  SkillStore(std::shared_ptr<db::Database> database, std::string data_dir, std::string builtin_dir);
  ~SkillStore();
  SkillStore(const SkillStore&) = delete;
  SkillStore& operator=(const SkillStore&) = delete;

  // A folder for a new upload's staging (under the data directory, same file system).
  std::string new_staging_dir();

  // Stores a checked upload as a new skill, or as a new version of `skill_id`. The
  // staged content is moved, not copied. A version is refused (kNoSuchSkill) when the
  // owner has no such custom skill, and (kNameChanged) when SKILL.md's name is not the
  // skill's.
  SkillRecord create(const std::string& owner, const std::optional<std::string>& display_name,
                     const SkillStaging::Checked& upload);
  SkillResult<SkillVersionRecord> add_version(const std::string& owner, const std::string& skill_id,
                                              const SkillStaging::Checked& upload);

  // nullopt: no such skill for this owner (another owner's is as missing). Built-ins
  // are found by their name.
  std::optional<SkillRecord> find(const std::string& owner, const std::string& skill_id);
  // source: "", "custom" or "anthropic"; `page`: the last id of the previous page.
  SkillPage<SkillRecord> list(const std::string& owner, const std::string& source, size_t limit,
                              const std::string& page);
  SkillPage<SkillVersionRecord> versions(const std::string& owner, const std::string& skill_id, size_t limit,
                                         const std::string& page);
  // How many custom skills the owner has, and how many versions all of them have.
  size_t count_custom(const std::string& owner);
  size_t count_versions(const std::string& owner);
  // `version` may be "latest".
  std::optional<SkillVersionRecord> find_version(const std::string& owner, const std::string& skill_id,
                                                 const std::string& version);
  // False when missing. Removes the files too (a sandbox that has the version
  // mounted keeps it until its request ends).
  bool remove(const std::string& owner, const std::string& skill_id);
  // Removing the last version leaves the skill without one (latest_version ""): found,
  // listed and deletable, but a reference to it resolves to no version.
  enum class VersionRemoval { kRemoved, kMissing };
  VersionRemoval remove_version(const std::string& owner, const std::string& skill_id,
                                const std::string& version);

  static bool is_builtin_id(std::string_view id) { return !id.starts_with("skill_"); }

  // Cluster mode (storage.backend s3): every version is published to the bucket before
  // it is recorded, and its objects go with it; a replica that has no copy makes one
  // on first use (ensure_local). Set once, before serving.
  void set_bucket(SkillBucket* bucket) { bucket_ = bucket; }
  // The version's folder on this host, made from the bucket's copy when missing (read-
  // only, as stored). Blocking (the bucket); throws SkillBucketError.
  void ensure_local(const SkillVersionRecord& version);
  // Removes this host's copies of versions that no longer exist (deleted through
  // another replica). Returns how many went. Blocking.
  size_t drop_deleted_copies();
  const std::string& builtin_dir() const { return builtin_dir_; }

 private:
  struct Builtin {
    SkillRecord record;
    SkillVersionRecord version;
  };
  void load_builtins();
  const Builtin* builtin(const std::string& id) const;
  std::string install(const std::string& skill_id, const std::string& version,
                      const std::string& content_dir);
  std::string next_version(db::Connection& conn, const std::string& skill_id);

  std::string data_dir_, skills_dir_, builtin_dir_;
  std::vector<Builtin> builtins_;
  std::shared_ptr<db::Database> db_;
  SkillBucket* bucket_ = nullptr;
  // Versions installed on disk whose rows are not committed yet ("<id>/<version>"):
  // drop_deleted_copies leaves them alone.
  struct Installing;
  std::mutex installing_mutex_;
  std::set<std::string> installing_;
};

// Where the built-in skills are: `configured` when set, else the first that exists of
// <exe>/../share/sandboxd/skills (an install), the source tree's skills/ (<exe>/../skills,
// for a build in ./build) and /usr/share/sandboxd/skills. Empty when none.
std::string find_builtin_skills_dir(const std::string& configured);

}  // namespace sandboxd::store
