#include "store/skill_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "base/ids.h"
#include "base/utf8.h"
#include "store/schema.h"

namespace sandboxd::store {
namespace {

namespace fs = std::filesystem;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Without the characters people confuse (I, O, l).
std::string random_id(size_t chars) {
  return random_chars("0123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz", chars);
}

// The tables are in store/schema.cc.
using db::Statement;
using db::Transaction;

// Owners and skill ids from outside (a URL) that are not UTF-8 name no stored skill;
// PostgreSQL would refuse them as parameters.
bool storable(const std::string& owner, const std::string& id) {
  return is_valid_utf8(owner) && is_valid_utf8(id);
}

constexpr const char* kSkillColumns = "id, display_name, name, latest_version, created_at_us, updated_at_us";

SkillRecord skill_row(const Statement& row) {
  SkillRecord r;
  r.id = row.text(0);
  r.source = "custom";
  r.display_name = row.blob(1);
  r.name = row.text(2);
  r.latest_version = row.text(3);
  r.created_at_us = row.integer(4);
  r.updated_at_us = row.integer(5);
  return r;
}

constexpr const char* kVersionColumns = "skill_id, version, name, description, created_at_us";

SkillVersionRecord version_row(const Statement& row) {
  SkillVersionRecord r;
  r.skill_id = row.text(0);
  r.version = row.text(1);
  r.name = row.text(2);
  r.description = row.blob(3);
  r.created_at_us = row.integer(4);
  return r;
}

// Stored versions are read-only for everyone (root owns them): immutable once made.
void seal(const fs::path& root) {
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    struct stat st {};
    if (lstat(it->path().c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode))
      chmod(it->path().c_str(), 0555);
    else if (S_ISREG(st.st_mode))
      chmod(it->path().c_str(), (st.st_mode & 0100) ? 0555 : 0444);
  }
  chmod(root.c_str(), 0555);
}

// Stored versions are sealed read-only: give folders their write bit back to remove them.
void remove_sealed(const fs::path& root) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_directory(ec) && !it->is_symlink(ec)) chmod(it->path().c_str(), 0755);
  chmod(root.c_str(), 0755);
  fs::remove_all(root, ec);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A version cursor read as SQLite's CAST(text AS INTEGER) reads it: the leading
// integer, 0 when there is none (PostgreSQL's CAST would refuse such text).
int64_t leading_integer(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  bool negative = i < text.size() && text[i] == '-';
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
  int64_t value = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    int digit = text[i] - '0';
    if (value > (INT64_MAX - digit) / 10) return negative ? INT64_MIN : INT64_MAX;
    value = value * 10 + digit;
  }
  return negative ? -value : value;
}

}  // namespace

// Marks a version installed on disk as not yet recorded while it lives.
struct SkillStore::Installing {
  SkillStore& store;
  std::string key;
  Installing(SkillStore& store, std::string key) : store(store), key(std::move(key)) {
    std::lock_guard lock(store.installing_mutex_);
    store.installing_.insert(this->key);
  }
  ~Installing() {
    std::lock_guard lock(store.installing_mutex_);
    store.installing_.erase(key);
  }
};

std::string find_builtin_skills_dir(const std::string& configured) {
  if (!configured.empty()) return configured;
  std::vector<fs::path> candidates;
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    fs::path exe_dir = fs::path(self).parent_path();
    candidates.push_back(exe_dir / ".." / "share" / "sandboxd" / "skills");  // installed with a prefix
    candidates.push_back(exe_dir / ".." / "skills");  // the source tree, built in ./build
    candidates.push_back("/usr/share/sandboxd/skills");
  } else {
    candidates.push_back("/usr/share/sandboxd/skills");
  }
  std::error_code ec;
  for (const auto& candidate : candidates)
    if (fs::is_directory(candidate, ec)) return fs::weakly_canonical(candidate, ec).string();
  return "";
}

SkillStore::SkillStore(const std::string& db_path, std::string data_dir, std::string builtin_dir)
    : SkillStore(db::open_sqlite(db_path), std::move(data_dir), std::move(builtin_dir)) {}

SkillStore::SkillStore(std::shared_ptr<db::Database> database, std::string data_dir, std::string builtin_dir)
    : data_dir_(std::move(data_dir)),
      skills_dir_((fs::path(data_dir_) / "skills").string()),
      builtin_dir_(std::move(builtin_dir)),
      db_(std::move(database)) {
  schema::migrate(*db_);
  fs::create_directories(skills_dir_);
  // Uploads cut short by a crash.
  std::error_code ec;
  fs::remove_all(fs::path(skills_dir_) / ".staging", ec);
  load_builtins();
}

SkillStore::~SkillStore() = default;

void SkillStore::load_builtins() {
  if (builtin_dir_.empty()) return;
  std::error_code ec;
  std::string version = "1";
  if (auto text = read_text(fs::path(builtin_dir_) / "VERSION"); !text.empty()) {
    version.clear();
    for (char c : text)
      if (std::isalnum(static_cast<unsigned char>(c))) version.push_back(c);
  }
  // A YYYYMMDD version is also when the built-ins were made.
  int64_t made_us = 0;
  if (version.size() == 8 && std::all_of(version.begin(), version.end(), ::isdigit)) {
    std::tm tm{};
    tm.tm_year = std::stoi(version.substr(0, 4)) - 1900;
    tm.tm_mon = std::stoi(version.substr(4, 2)) - 1;
    tm.tm_mday = std::stoi(version.substr(6, 2));
    made_us = static_cast<int64_t>(timegm(&tm)) * 1'000'000;
  }
  std::vector<fs::path> folders;
  for (const auto& entry : fs::directory_iterator(builtin_dir_, ec))
    if (entry.is_directory(ec) && fs::is_regular_file(entry.path() / "SKILL.md", ec))
      folders.push_back(entry.path());
  std::sort(folders.begin(), folders.end());
  for (const auto& folder : folders) {
    try {
      auto parsed = parse_skill_manifest(read_text(folder / "SKILL.md"));
      if (!parsed) continue;  // a broken built-in is skipped (its SKILL.md is the packager's to fix)
      const SkillManifest& manifest = *parsed;
      Builtin b;
      b.record.id = folder.filename().string();
      b.record.source = "anthropic";
      b.record.name = manifest.name;
      b.record.display_name = manifest.name;
      b.record.latest_version = version;
      b.record.created_at_us = b.record.updated_at_us = b.version.created_at_us = made_us;
      b.version.skill_id = b.record.id;
      b.version.version = version;
      b.version.name = manifest.name;
      b.version.description = manifest.description;
      b.version.directory = folder.string();
      builtins_.push_back(std::move(b));
    } catch (const std::exception&) {
      // So is one whose SKILL.md cannot be read.
    }
  }
}

const SkillStore::Builtin* SkillStore::builtin(const std::string& id) const {
  for (const auto& b : builtins_)
    if (b.record.id == id) return &b;
  return nullptr;
}

std::string SkillStore::new_staging_dir() {
  return (fs::path(skills_dir_) / ".staging" / random_id(20)).string();
}

std::string SkillStore::install(const std::string& skill_id, const std::string& version,
                                const std::string& content_dir) {
  const fs::path target = fs::path(skills_dir_) / skill_id / version;
  fs::create_directories(target.parent_path());
  chmod(content_dir.c_str(), 0755);
  fs::rename(content_dir, target);
  seal(target);
  return target.string();
}

std::string SkillStore::next_version(db::Connection& conn, const std::string& skill_id) {
  int64_t version = now_us();
  Statement last(conn, "SELECT MAX(CAST(version AS BIGINT)) FROM skill_versions WHERE skill_id = ?");
  last.add(skill_id);
  if (last.step()) version = std::max(version, last.integer(0) + 1);
  return std::to_string(version);
}

SkillRecord SkillStore::create(const std::string& owner, const std::optional<std::string>& display_name,
                               const SkillStaging::Checked& upload) {
  auto conn = db_->acquire();
  SkillRecord r;
  r.id = "skill_" + random_id(24);
  r.source = "custom";
  r.name = upload.manifest.name;
  r.display_name = display_name && !display_name->empty() ? *display_name : upload.manifest.name;
  r.latest_version = next_version(conn, r.id);
  r.created_at_us = r.updated_at_us = now_us();
  Installing installing{*this, r.id + "/" + r.latest_version};
  const std::string directory = install(r.id, r.latest_version, upload.content_dir);
  try {
    if (bucket_) bucket_->publish(r.id, r.latest_version, directory);
    Transaction transaction(conn);
    Statement(
        conn,
        "INSERT INTO skills (owner, id, display_name, name, latest_version, created_at_us, updated_at_us) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)")
        .add(owner)
        .add(r.id)
        .add_blob(r.display_name)
        .add(r.name)
        .add(r.latest_version)
        .add(r.created_at_us)
        .add(r.updated_at_us)
        .run();
    Statement(conn,
              "INSERT INTO skill_versions (skill_id, version, name, description, created_at_us) "
              "VALUES (?, ?, ?, ?, ?)")
        .add(r.id)
        .add(r.latest_version)
        .add(r.name)
        .add_blob(upload.manifest.description)
        .add(r.created_at_us)
        .run();
    transaction.commit();
  } catch (...) {
    remove_sealed(fs::path(skills_dir_) / r.id);
    if (bucket_) bucket_->forget(r.id);  // what a cut publish sent (best effort)
    throw;
  }
  return r;
}

SkillResult<SkillVersionRecord> SkillStore::add_version(const std::string& owner, const std::string& skill_id,
                                                        const SkillStaging::Checked& upload) {
  auto skill = find(owner, skill_id);
  if (!skill || skill->source != "custom")
    return SkillRefusal{SkillRefusal::Kind::kNoSuchSkill, "Skill not found: " + skill_id};
  if (skill->name != upload.manifest.name)
    return SkillRefusal{SkillRefusal::Kind::kNameChanged,
                        "SKILL.md's name '" + upload.manifest.name + "' differs from the skill's name '" +
                            skill->name + "': a skill keeps its name across versions"};
  auto conn = db_->acquire();
  SkillVersionRecord v;
  v.skill_id = skill_id;
  v.version = next_version(conn, skill_id);
  v.name = upload.manifest.name;
  v.description = upload.manifest.description;
  v.created_at_us = now_us();
  Installing installing{*this, skill_id + "/" + v.version};
  v.directory = install(skill_id, v.version, upload.content_dir);
  try {
    if (bucket_) bucket_->publish(skill_id, v.version, v.directory);
    Transaction transaction(conn);
    Statement(conn,
              "INSERT INTO skill_versions (skill_id, version, name, description, created_at_us) "
              "VALUES (?, ?, ?, ?, ?)")
        .add(skill_id)
        .add(v.version)
        .add(v.name)
        .add_blob(v.description)
        .add(v.created_at_us)
        .run();
    Statement(conn, "UPDATE skills SET latest_version = ?, updated_at_us = ? WHERE id = ? AND owner = ?")
        .add(v.version)
        .add(v.created_at_us)
        .add(skill_id)
        .add(owner)
        .run();
    transaction.commit();
  } catch (...) {
    remove_sealed(v.directory);
    if (bucket_) bucket_->forget(skill_id, v.version);  // what a cut publish sent (best effort)
    throw;
  }
  return v;
}

std::optional<SkillRecord> SkillStore::find(const std::string& owner, const std::string& skill_id) {
  if (auto* b = builtin(skill_id)) return b->record;
  if (!storable(owner, skill_id)) return std::nullopt;
  auto conn = db_->acquire();
  Statement q(conn,
              (std::string("SELECT ") + kSkillColumns + " FROM skills WHERE owner = ? AND id = ?").c_str());
  q.add(owner).add(skill_id);
  if (!q.step()) return std::nullopt;
  return skill_row(q);
}

SkillPage<SkillRecord> SkillStore::list(const std::string& owner, const std::string& source, size_t limit,
                                        const std::string& page) {
  SkillPage<SkillRecord> out;
  // Built-ins first (by name), then the owner's skills by creation.
  bool custom_started = !page.empty() && !builtin(page);
  if (source != "custom" && !custom_started) {
    bool past = page.empty();
    for (const auto& b : builtins_) {
      if (!past) {
        past = b.record.id == page;
        continue;
      }
      if (out.items.size() == limit) {
        out.has_more = true;
        return out;
      }
      out.items.push_back(b.record);
    }
  }
  if (source == "anthropic") return out;
  if (!storable(owner, page)) return out;  // no such cursor
  auto conn = db_->acquire();
  std::string sql = std::string("SELECT ") + kSkillColumns + " FROM skills WHERE owner = ?";
  if (custom_started)
    sql += " AND (created_at_us, id) > (SELECT created_at_us, id FROM skills WHERE owner = ? AND id = ?)";
  sql += " ORDER BY created_at_us, id LIMIT ?";
  Statement q(conn, sql.c_str());
  q.add(owner);
  if (custom_started) q.add(owner).add(page);
  q.add(static_cast<int64_t>(limit - out.items.size() + 1));
  while (q.step()) {
    if (out.items.size() == limit) {
      out.has_more = true;
      break;
    }
    out.items.push_back(skill_row(q));
  }
  return out;
}

SkillPage<SkillVersionRecord> SkillStore::versions(const std::string& owner, const std::string& skill_id,
                                                   size_t limit, const std::string& page) {
  SkillPage<SkillVersionRecord> out;
  if (auto* b = builtin(skill_id)) {
    if (page.empty() && limit > 0) out.items.push_back(b->version);
    return out;
  }
  if (!find(owner, skill_id)) return out;
  auto conn = db_->acquire();
  std::string sql = std::string("SELECT ") + kVersionColumns + " FROM skill_versions WHERE skill_id = ?";
  if (!page.empty()) sql += " AND CAST(version AS BIGINT) < ?";
  sql += " ORDER BY CAST(version AS BIGINT) DESC LIMIT ?";
  Statement q(conn, sql.c_str());
  q.add(skill_id);
  if (!page.empty()) q.add(leading_integer(page));
  q.add(static_cast<int64_t>(limit + 1));
  while (q.step()) {
    if (out.items.size() == limit) {
      out.has_more = true;
      break;
    }
    auto v = version_row(q);
    v.directory = (fs::path(skills_dir_) / v.skill_id / v.version).string();
    out.items.push_back(std::move(v));
  }
  return out;
}

std::optional<SkillVersionRecord> SkillStore::find_version(const std::string& owner,
                                                           const std::string& skill_id,
                                                           const std::string& version) {
  if (auto* b = builtin(skill_id)) {
    if (version.empty() || version == "latest" || version == b->version.version) return b->version;
    return std::nullopt;
  }
  auto skill = find(owner, skill_id);
  if (!skill) return std::nullopt;
  const std::string wanted = version.empty() || version == "latest" ? skill->latest_version : version;
  if (!is_valid_utf8(wanted)) return std::nullopt;
  auto conn = db_->acquire();
  Statement q(conn, (std::string("SELECT ") + kVersionColumns +
                     " FROM skill_versions WHERE skill_id = ? AND version = ?")
                        .c_str());
  q.add(skill_id).add(wanted);
  if (!q.step()) return std::nullopt;
  auto v = version_row(q);
  v.directory = (fs::path(skills_dir_) / v.skill_id / v.version).string();
  return v;
}

bool SkillStore::remove(const std::string& owner, const std::string& skill_id) {
  if (builtin(skill_id) || !find(owner, skill_id)) return false;
  {
    auto conn = db_->acquire();
    Transaction transaction(conn);
    Statement(conn, "DELETE FROM skill_versions WHERE skill_id = ?").add(skill_id).run();
    Statement(conn, "DELETE FROM skills WHERE id = ? AND owner = ?").add(skill_id).add(owner).run();
    transaction.commit();
  }
  remove_sealed(fs::path(skills_dir_) / skill_id);
  // The other replicas' copies go with their next drop_deleted_copies (the rows are gone).
  if (bucket_) bucket_->forget(skill_id);
  return true;
}

size_t SkillStore::count_custom(const std::string& owner) {
  if (!storable(owner, "")) return 0;
  auto conn = db_->acquire();
  Statement query(conn, "SELECT COUNT(*) FROM skills WHERE owner = ?");
  query.add(owner);
  return query.step() ? static_cast<size_t>(query.integer(0)) : 0;
}

size_t SkillStore::count_versions(const std::string& owner) {
  if (!storable(owner, "")) return 0;
  auto conn = db_->acquire();
  Statement query(
      conn, "SELECT COUNT(*) FROM skill_versions v JOIN skills s ON s.id = v.skill_id WHERE s.owner = ?");
  query.add(owner);
  return query.step() ? static_cast<size_t>(query.integer(0)) : 0;
}

SkillStore::VersionRemoval SkillStore::remove_version(const std::string& owner, const std::string& skill_id,
                                                      const std::string& version) {
  if (builtin(skill_id)) return VersionRemoval::kMissing;
  auto v = find_version(owner, skill_id, version);
  if (!v) return VersionRemoval::kMissing;
  {
    // The last version may go too (the Skills guide deletes every version, then the
    // skill): the skill stays, with no latest version ('' here), until it is deleted.
    auto conn = db_->acquire();
    Transaction transaction(conn);
    Statement(conn, "DELETE FROM skill_versions WHERE skill_id = ? AND version = ?")
        .add(skill_id)
        .add(v->version)
        .run();
    Statement(
        conn,
        "UPDATE skills SET latest_version = COALESCE((SELECT version FROM skill_versions WHERE skill_id = ? "
        "ORDER BY CAST(version AS BIGINT) DESC LIMIT 1), ''), updated_at_us = ? WHERE id = ?")
        .add(skill_id)
        .add(now_us())
        .add(skill_id)
        .run();
    transaction.commit();
  }
  remove_sealed(v->directory);
  if (bucket_) bucket_->forget(skill_id, v->version);
  return VersionRemoval::kRemoved;
}

void SkillStore::ensure_local(const SkillVersionRecord& version) {
  std::error_code ec;
  if (!bucket_ || is_builtin_id(version.skill_id) || fs::exists(version.directory, ec)) return;
  const std::string staging = new_staging_dir();
  try {
    bucket_->materialise(version.skill_id, version.version, staging);
    fs::create_directories(fs::path(version.directory).parent_path());
    chmod(staging.c_str(), 0755);
    seal(staging);
    // Another request (or replica's sweep) may have made it meanwhile: the first stays.
    if (rename(staging.c_str(), version.directory.c_str()) != 0) remove_sealed(staging);
  } catch (...) {
    remove_sealed(staging);
    throw;
  }
}

size_t SkillStore::drop_deleted_copies() {
  size_t dropped = 0;
  std::error_code ec;
  for (const auto& skill : fs::directory_iterator(skills_dir_, ec)) {
    const std::string skill_id = skill.path().filename().string();
    if (is_builtin_id(skill_id) || !skill.is_directory(ec)) continue;  // (.staging too)
    std::vector<std::string> versions;
    for (const auto& version : fs::directory_iterator(skill.path(), ec))
      versions.push_back(version.path().filename().string());
    for (const auto& version : versions) {
      {
        std::lock_guard lock(installing_mutex_);
        if (installing_.count(skill_id + "/" + version)) continue;
      }
      bool exists = false;
      if (is_valid_utf8(skill_id) && is_valid_utf8(version)) {
        auto conn = db_->acquire();
        Statement q(conn, "SELECT 1 FROM skill_versions WHERE skill_id = ? AND version = ?");
        q.add(skill_id).add(version);
        exists = q.step();
      }
      if (exists) continue;
      remove_sealed(skill.path() / version);
      ++dropped;
    }
    fs::remove(skill.path(), ec);  // once empty
  }
  return dropped;
}

}  // namespace sandboxd::store
