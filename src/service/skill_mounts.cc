#include "service/skill_mounts.h"

#include <sys/stat.h>
#include <unistd.h>
#include <boost/asio/post.hpp>

#include <spdlog/spdlog.h>
#include <cstring>
#include <filesystem>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/blocking.h"
#include "runtime/volume.h"

namespace sandboxd::service {
namespace {

namespace fs = std::filesystem;
using runtime::Volume;

fs::path root_of(const std::string& data_dir) { return fs::path(data_dir) / "skill-mounts"; }

// The most entries a skill version's folder is walked for (runtime.skillMaxFiles is at
// most 100,000; built-in skills are small).
constexpr size_t kMaxSkillEntries = 100000;

}  // namespace

Result<std::vector<LoadedSkill>> resolve_skills(store::SkillStore& store, const std::string& owner,
                                                const std::vector<SkillReference>& references) {
  std::vector<LoadedSkill> out;
  for (size_t i = 0; i < references.size(); ++i) {
    const auto& ref = references[i];
    const std::string path = "container.skills." + std::to_string(i);
    const bool builtin = store::SkillStore::is_builtin_id(ref.skill_id);
    auto skill = store.find(owner, ref.skill_id);
    if (!skill || builtin != (ref.type == "anthropic"))
      return ApiError::not_found(path + ": " + ref.type + " skill '" + ref.skill_id + "' not found");
    auto version = store.find_version(owner, ref.skill_id, ref.version);
    if (!version)
      return ApiError::not_found(path + ": version '" + ref.version + "' of skill '" + ref.skill_id +
                                 "' not found");
    for (const auto& other : out)
      if (other.name == version->name)
        return ApiError::invalid_request(path + ": two skills are named '" + version->name +
                                         "'; each needs its own folder under /mnt/skills");
    out.push_back(LoadedSkill{ref.type, ref.skill_id, version->version, version->name, version->description,
                              version->directory});
  }
  return out;
}

Result<void> ensure_local_skills(store::SkillStore& store, const std::vector<LoadedSkill>& skills,
                                 int retry_after_sec) {
  for (const auto& skill : skills) {
    if (skill.type != "custom") continue;
    store::SkillVersionRecord version;
    version.skill_id = skill.skill_id;
    version.version = skill.version;
    version.directory = skill.directory;
    try {
      store.ensure_local(version);
    } catch (const store::SkillBucketError& e) {
      spdlog::warn("skills: {}", e.what());
      return ApiError::overloaded(
          "The skill '" + skill.name + "' cannot be read from the sessions bucket now; try again later",
          retry_after_sec);
    }
  }
  return {};
}

namespace {
asio::awaitable<void> sweep_skill_copies(store::SkillStore* store) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    timer.expires_after(std::chrono::seconds(5));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    auto sweep = [store] { return store->drop_deleted_copies(); };
    try {
      if (const size_t dropped = co_await run_blocking(std::move(sweep)); dropped > 0)
        spdlog::info("skills: {} local copies of deleted skill versions removed", dropped);
    } catch (const std::exception& e) {
      spdlog::warn("skills: removing local copies of deleted skills: {}", e.what());
    }
  }
}
}  // namespace

void keep_skill_copies_current(asio::io_context& io, store::SkillStore& store) {
  asio::co_spawn(io, sweep_skill_copies(&store), asio::detached);
}

std::string skills_prompt(const std::vector<LoadedSkill>& skills) {
  std::string text =
      "Skills are available in the code execution sandbox, read-only, one folder each under /mnt/skills/. "
      "Each skill's SKILL.md holds its instructions and names its helper scripts: when a task matches a "
      "skill's description, read that SKILL.md first (for example `cat /mnt/skills/<name>/SKILL.md`) and "
      "follow it; do not read skills the task does not need.\n<available_skills>\n";
  for (const auto& skill : skills)
    text += "- name: " + skill.name + "\n  description: " + skill.description + "\n  path: /mnt/skills/" +
            skill.name + "/SKILL.md\n";
  text += "</available_skills>";
  return text;
}

SkillMounts::SkillMounts(const std::string& data_dir) {
  const fs::path root = root_of(data_dir);
  // remove_all would follow a bind that is still there into a stored skill: only when
  // nothing is mounted below.
  if (Volume::mounts_under(root.string()).empty()) {
    std::error_code ec;
    fs::remove_all(root, ec);
  } else {
    spdlog::warn("{} still has mounts; left as is", root.string());
  }
  fs::create_directories(root);
}

std::string SkillMounts::prepare_folder(const std::string& data_dir, const std::string& storage) {
  const fs::path folder = root_of(data_dir) / storage;
  fs::create_directories(folder);
  chmod(folder.c_str(), 0755);
  if (!Volume::is_mounted(folder.string())) Volume::make_shared_mount(folder.string());
  return folder.string();
}

void SkillMounts::remove_folder(const std::string& data_dir, const std::string& storage) {
  const fs::path folder = root_of(data_dir) / storage;
  try {
    for (const auto& mount_point : Volume::mounts_under(folder.string())) Volume::unmount(mount_point);
  } catch (const std::exception& e) {
    spdlog::warn("unmounting {}: {}", folder.string(), e.what());
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec))
    fs::remove(entry.path(), ec);  // empty folders only
  fs::remove(folder, ec);
}

Result<std::shared_ptr<SkillMounts::Lease>> SkillMounts::load(const std::string& container_folder,
                                                              const std::vector<LoadedSkill>& skills,
                                                              EndUsers end_users) {
  std::lock_guard lock(mutex_);
  std::vector<std::string> loaded;
  auto undo = [&] {
    for (const auto& name : loaded) release_locked(container_folder, name, nullptr);
  };
  for (const auto& skill : skills) {
    const auto key = std::make_pair(container_folder, skill.name);
    auto it = mounted_.find(key);
    if (it != mounted_.end() && it->second.directory != skill.directory) {
      undo();
      return ApiError::invalid_request("container.skills: skill '" + skill.name +
                                       "' is loaded in this container at another version by a request "
                                       "that is still running; use the same version or another container");
    }
    if (it == mounted_.end()) {
      const std::string target = container_folder + "/" + skill.name;
      try {
        fs::create_directories(target);
        Volume::attach_bind(skill.directory, target, /*read_only=*/true);
      } catch (const std::exception& e) {
        spdlog::error("loading skill {} into {}: {}", skill.name, container_folder, e.what());
        std::error_code ec;
        fs::remove(target, ec);
        undo();
        return ApiError::internal();
      }
      it = mounted_.emplace(key, Mounted{skill.directory, 0}).first;
    }
    ++it->second.users;
    loaded.push_back(skill.name);
  }
  std::shared_ptr<Lease> lease(new Lease(*this, container_folder, std::move(end_users)));
  lease->names_ = std::move(loaded);
  return lease;
}

void SkillMounts::release(const std::string& folder, const std::string& name, const EndUsers& end_users) {
  std::lock_guard lock(mutex_);
  release_locked(folder, name, &end_users);
}

void SkillMounts::release_locked(const std::string& folder, const std::string& name,
                                 const EndUsers* end_users) {
  auto it = mounted_.find({folder, name});
  if (it == mounted_.end() || --it->second.users > 0) return;
  const std::string directory = it->second.directory;
  mounted_.erase(it);
  const std::string target = folder + "/" + name;
  try {
    // The unmount propagates to the sandbox's copy. Busy there means a process the
    // request started still uses the skill: the copy is detached at once (nothing new
    // reaches it by its path) and the processes still inside are ended (off this
    // thread: a walk of the sandbox's processes).
    if (!Volume::try_unmount(target)) {
      Volume::unmount(target);
      if (end_users && *end_users) (*end_users)(directory, "/mnt/skills/" + name, kMaxSkillEntries);
    }
  } catch (const std::exception& e) {
    spdlog::warn("unloading skill {}: {}", target, e.what());
  }
  if (rmdir(target.c_str()) != 0) spdlog::warn("removing {}: {}", target, std::strerror(errno));
}

SkillMounts::Lease::~Lease() {
  for (const auto& name : names_) owner_.release(folder_, name, end_users_);
}

}  // namespace sandboxd::service
