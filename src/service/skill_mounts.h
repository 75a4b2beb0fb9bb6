// The skills of one /messages request, inside its container's sandbox at
// /mnt/skills/<name>/ (read-only), for as long as that request runs.
//
// Each container has a host folder, DATA_DIR/skill-mounts/<storage>/, that is a mount
// point of its own with shared propagation; its sandbox's /mnt/skills is a slave copy
// of it (a pre-started sandbox gets it bound onto its skills slot). A request binds each
// skill version's folder (read-only) at <folder>/<name>: the bind propagates into the
// running sandbox, or is there when the sandbox starts. When the request ends its lease
// goes and the binds come off, so a later request without skills sees none. Requests
// that run at once in one container share a skill at the same version (counted).
// A process the request started that still uses a skill then (its working directory,
// an open or mapped file inside it) would keep reading it through the detached bind:
// such processes are killed as the skill comes off (runtime::Sandbox::end_folder_users,
// on either tier), so a skill is readable for its requests only, as promised.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "base/error.h"
#include "base/skill_reference.h"
#include "store/skill_store.h"

namespace sandboxd::service {

namespace asio = boost::asio;

struct LoadedSkill {
  std::string type;  // "custom" | "anthropic"
  std::string skill_id;
  std::string version;  // resolved
  std::string name;     // the folder under /mnt/skills
  std::string description;
  std::string directory;  // host folder of the version
};

// The request's `container.skills`, each resolved to a stored version (404 naming the
// first that is missing). Two skills with the same name are refused (one folder each).
Result<std::vector<LoadedSkill>> resolve_skills(store::SkillStore& store, const std::string& owner,
                                                const std::vector<SkillReference>& references);

// What the upstream model is told (added to the system prompt): each skill's name,
// description and where its SKILL.md is, to be read when a task needs it.
std::string skills_prompt(const std::vector<LoadedSkill>& skills);

// Cluster mode (skills in the bucket, store/skill_bucket.h): the resolved custom
// skills' folders, made here from the bucket's copy where this replica has none yet.
// Blocking (the bucket): a blocking pool's thread. 503 when the bucket cannot be read.
Result<void> ensure_local_skills(store::SkillStore& store, const std::vector<LoadedSkill>& skills,
                                 int retry_after_sec);

// Cluster mode: every few seconds, this replica's copies of skill versions deleted
// through any replica go (SkillStore::drop_deleted_copies, on the blocking pool).
void keep_skill_copies_current(asio::io_context& io, store::SkillStore& store);

class SkillMounts {
 public:
  // Removes what a previous run left under DATA_DIR/skill-mounts (its mounts are gone
  // by then: the start-up cleanup unmounted everything under the data directory).
  explicit SkillMounts(const std::string& data_dir);

  // The container's skills folder (made, and made a shared mount point, if need be).
  static std::string prepare_folder(const std::string& data_dir, const std::string& storage);
  // Unmounts and removes it (the container is deleted).
  static void remove_folder(const std::string& data_dir, const std::string& storage);

  // Ends the processes of the container's sandbox (if one runs) that still use a skill
  // that came off: its folder on the host (detached) and inside (/mnt/skills/NAME), and
  // the most entries of it a walk looks at.
  using EndUsers =
      std::function<void(const std::string& host_dir, const std::string& inside_dir, size_t max_entries)>;

  class Lease {
   public:
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

   private:
    friend class SkillMounts;
    Lease(SkillMounts& owner, std::string folder, EndUsers end_users)
        : owner_(owner), folder_(std::move(folder)), end_users_(std::move(end_users)) {}
    SkillMounts& owner_;
    std::string folder_;
    EndUsers end_users_;
    std::vector<std::string> names_;
  };

  // Binds the skills under the container's folder; released with the lease. 400 when a
  // skill's name is loaded at another version by a request still running there.
  // `end_users` ends the processes that still use a skill as it comes off.
  Result<std::shared_ptr<Lease>> load(const std::string& container_folder,
                                      const std::vector<LoadedSkill>& skills, EndUsers end_users);

 private:
  void release(const std::string& folder, const std::string& name, const EndUsers& end_users);
  void release_locked(const std::string& folder, const std::string& name, const EndUsers* end_users);

  struct Mounted {
    std::string directory;
    int users = 0;
  };
  std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, Mounted> mounted_;  // (folder, name)
};

}  // namespace sandboxd::service
