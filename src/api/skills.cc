// Skills (docs/http-api.md; Anthropic Agent Skills, as the official SDKs call it): create a
// skill from multipart `files[]` (each filename its path under one top folder holding
// SKILL.md) or one zip, list (built-ins and the owner's; `source` filter, `limit` and
// `page` as the SDK sends them), retrieve, delete, and versions. Another owner's skill
// is a 404. An upload is checked while it is written to a staging folder and stored
// only when everything passed (store/skill_archive.h).

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <ctime>

#include "api/routes.h"
#include "base/blocking.h"
#include "service/store_call.h"
#include "store/multipart.h"
#include "store/skill_archive.h"
#include "store/skill_store.h"

namespace sandboxd::api {

using service::OwnerQuotas;
namespace {

namespace json = boost::json;

// Staging, unpacking, sealing and removing skill folders touch many entries: off the
// I/O threads, on a pool of their own (tree_pool), so a burst of skill uploads
// or deletions queues behind itself and never holds up file transfers and commands.
asio::thread_pool& disk_pool() { return tree_pool(); }

using DiskWork = std::function<Result<json::value>()>;

// What a refused upload is for its client (docs/http-api.md, Skills): the client's to
// fix, a 400 saying what to change; a new version of a skill the owner does not have
// (deleted meanwhile) is as missing as any other.
ApiError upload_error(const store::SkillRefusal& refusal) {
  using Kind = store::SkillRefusal::Kind;
  switch (refusal.kind) {
    case Kind::kNoSuchSkill:
      return ApiError::not_found(refusal.message);
    case Kind::kPath:
    case Kind::kTooLarge:
    case Kind::kTooMany:
    case Kind::kArchive:
    case Kind::kLayout:
    case Kind::kManifest:
    case Kind::kNameChanged:
      break;
  }
  return ApiError::invalid_request(refusal.message);
}

asio::awaitable<Result<json::value>> run_disk_work(DiskWork work) {
  try {
    co_return work();
  } catch (const store::SkillBucketError& e) {  // cluster mode: nothing was recorded
    spdlog::warn("skills: {}", e.what());
    co_return ApiError::overloaded("The sessions bucket does not answer; try again later", 2);
  } catch (const std::exception& e) {
    spdlog::error("skills: {}", e.what());
    co_return ApiError::internal();
  }
}

// (Callers pass a named DiskWork, moved: GCC 12 destroys a lambda temporary converted
// to a coroutine's parameter twice.)
asio::awaitable<Result<json::value>> on_disk_pool(DiskWork work) {
  co_return co_await asio::co_spawn(disk_pool(), run_disk_work(std::move(work)), asio::use_awaitable);
}

std::string iso_time(int64_t micros) {
  std::time_t seconds = static_cast<std::time_t>(micros / 1'000'000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[48];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[64];
  std::snprintf(out, sizeof out, "%s.%06ldZ", buf, static_cast<long>(micros % 1'000'000));
  return out;
}

json::object skill_json(const store::SkillRecord& r) {
  // The SDK's field names (display_name, latest_version_id, source.type) and those of the
  // hosted API's documentation (display_title, latest_version), so both kinds of client read it.
  return {
      {"type", "skill"},
      {"id", r.id},
      {"source", {{"type", r.source}}},
      {"display_name", r.display_name},
      {"display_title", r.display_name},
      {"name", r.name},
      // null once every version is deleted (the skill itself is deleted next)
      {"latest_version_id", r.latest_version.empty() ? json::value(nullptr) : json::value(r.latest_version)},
      {"latest_version", r.latest_version.empty() ? json::value(nullptr) : json::value(r.latest_version)},
      {"created_at", iso_time(r.created_at_us)},
      {"updated_at", iso_time(r.updated_at_us)}};
}

json::object version_json(const store::SkillVersionRecord& v) {
  return {{"type", "skill_version"},
          {"id", v.version},
          {"version", v.version},
          {"skill_id", v.skill_id},
          {"name", v.name},
          {"directory", v.name},
          {"description", v.description},
          {"created_at", iso_time(v.created_at_us)}};
}

template <typename T, typename ToJson>
json::object page_json(const store::SkillPage<T>& page, ToJson to_json) {
  json::array data;
  for (const auto& item : page.items) data.push_back(to_json(item));
  json::object out{{"data", std::move(data)}, {"has_more", page.has_more}};
  const bool empty = page.items.empty();
  out["first_id"] =
      empty ? json::value(nullptr) : json::value(out["data"].as_array().front().as_object().at("id"));
  out["last_id"] =
      empty ? json::value(nullptr) : json::value(out["data"].as_array().back().as_object().at("id"));
  out["next_page"] = page.has_more ? out["last_id"] : json::value(nullptr);
  return out;
}

Result<store::SkillStore*> skill_store(ApiContext& api) {
  if (!api.skills) return ApiError::internal();
  return api.skills;
}

// The upload, staged and checked: files[] parts (or one zip) and display_name. Its
// staging folder is removed on the disk pool (discard), whichever way the request ends.
struct Upload {
  std::unique_ptr<store::SkillStaging> staging;
  std::optional<std::string> display_name;
};

// Removes what is left of an upload's staging folder, on the disk pool (it may hold as
// many entries as runtime.skillMaxFiles allows).
asio::awaitable<void> discard(std::shared_ptr<Upload> upload) {
  if (!upload || !upload->staging) co_return;
  auto remove = [upload] {
    try {
      upload->staging.reset();
    } catch (const std::exception& e) {
      spdlog::warn("skills: removing a staging folder: {}", e.what());
    }
  };
  co_await run_on(disk_pool(), std::move(remove));
}

asio::awaitable<Result<std::shared_ptr<Upload>>> receive_upload(ApiContext& api, RequestContext& ctx) {
  auto boundary =
      store::MultipartParser::boundary_from_content_type(ctx.header_value(http::field::content_type));
  if (!boundary)
    co_return ApiError::invalid_request(
        "Expected a multipart/form-data body with the skill's files in 'files[]'");
  const auto config = api.config();
  store::SkillLimits limits;
  limits.max_bytes = config->skill_max_bytes;
  limits.max_files = static_cast<size_t>(config->skill_max_files);
  auto upload = std::make_shared<Upload>();
  auto make_staging = [dir = api.skills->new_staging_dir(),
                       limits]() -> std::unique_ptr<store::SkillStaging> {
    try {
      return std::make_unique<store::SkillStaging>(dir, limits);
    } catch (const std::exception& e) {
      spdlog::error("skills: {}", e.what());
      return nullptr;
    }
  };
  upload->staging = co_await run_on(disk_pool(), std::move(make_staging));
  if (!upload->staging) co_return ApiError::internal();
  std::optional<ApiError> failure;
  enum class Part { kOther, kFile, kDisplayName } current = Part::kOther;
  std::string display_name;
  store::MultipartParser parser(
      *boundary,
      [&](const store::PartHeaders& part) {
        current = Part::kOther;
        if ((part.name == "files[]" || part.name == "files" || part.name == "file") && part.filename) {
          if (auto begun = upload->staging->begin_file(*part.filename); !begun) {
            failure = upload_error(begun.error());
            return false;
          }
          current = Part::kFile;
        } else if (part.name == "display_name" || part.name == "display_title") {
          display_name.clear();
          current = Part::kDisplayName;
        }
        return true;
      },
      [&](std::string_view data) {
        if (current == Part::kFile)
          if (auto written = upload->staging->write(data); !written) {
            failure = upload_error(written.error());
            return false;
          }
        if (current == Part::kDisplayName) {
          display_name.append(data);
          if (display_name.size() > 255) {
            failure = ApiError::invalid_request("display_name is longer than 255 characters");
            return false;
          }
        }
        return true;
      },
      [&]() {
        if (current == Part::kFile) upload->staging->end_file();
        if (current == Part::kDisplayName) upload->display_name = display_name;
        current = Part::kOther;
        return true;
      });
  // Room for the multipart framing beyond the files themselves; the byte cap proper
  // is the staging's (a clear 400).
  const size_t limit = static_cast<size_t>(limits.max_bytes) + (4u << 20);
  // Each chunk is parsed and written on the disk pool (a part's folders are made, its
  // file created and written there): the I/O thread only reads the socket and awaits,
  // one chunk at a time, so the parser and the staging are never used by two threads.
  auto feed = [&](std::string_view chunk) -> asio::awaitable<Result<void>> {
    auto step = [&parser, &failure, chunk]() -> Result<void> {
      try {
        if (parser.feed(chunk)) return {};
      } catch (const std::exception& e) {  // a disk error while writing
        spdlog::error("skills: staging an upload: {}", e.what());
        return ApiError::internal();
      }
      if (failure) return *failure;
      return ApiError::invalid_request("Malformed multipart body: " + parser.error());
    };
    co_return co_await run_on(disk_pool(), std::move(step));
  };
  auto received = co_await ctx.read_body_stream_async(limit, feed);
  std::optional<ApiError> refused;
  if (!received)
    refused = received.error();
  else if (!parser.finished())
    refused = ApiError::invalid_request("The multipart body ended before its closing boundary");
  else if (upload->staging->files() == 0)
    refused = ApiError::invalid_request("The upload has no files (field 'files[]')");
  if (refused) {
    co_await discard(upload);
    co_return *refused;
  }
  co_return upload;
}

// Room for one more version of the owner's skills, and for one more skill when
// `new_skill` (a skill comes with its first version).
Result<void> room_for_skill(store::SkillStore& skills, const std::string& owner, const ops::Config& config,
                            bool new_skill) {
  if (new_skill)
    if (auto room = OwnerQuotas::room_for_one_more(skills.count_custom(owner), config.skills_per_owner,
                                                   "skills", "quotas.skillsPerOwner", "skills_quota");
        !room)
      return room;
  return OwnerQuotas::room_for_one_more(skills.count_versions(owner), config.skill_versions_per_owner,
                                        "skill versions", "quotas.skillVersionsPerOwner",
                                        "skill_versions_quota");
}

// Unzips (for the archive form) and checks the staged upload, then `store` keeps it.
using Keep = std::function<Result<json::value>(const store::SkillStaging::Checked&)>;
asio::awaitable<Result<json::value>> check_and_store(std::shared_ptr<Upload> upload, Keep keep) {
  DiskWork work = [upload, keep]() -> Result<json::value> {
    if (upload->staging->single_zip())
      if (auto extracted = upload->staging->extract_single_zip(); !extracted)
        return upload_error(extracted.error());
    auto checked = upload->staging->check();
    if (!checked) return upload_error(checked.error());
    return keep(*checked);
  };
  auto kept = co_await on_disk_pool(std::move(work));
  co_await discard(std::move(upload));  // what the store did not take (all of it, if refused)
  co_return kept;
}

asio::awaitable<Result<Response>> create_skill(ApiContext& api, RequestContext& ctx) {
  auto store = skill_store(api);
  if (!store) co_return store.error();
  const std::string owner = ctx.owner;
  auto* skills = *store;
  // quotas.skillsPerOwner and skillVersionsPerOwner: checked before the body is read,
  // and again with the insert.
  auto* quotas = &api.quotas;
  const auto config = api.config();
  auto room_check = [skills, &owner, &config] {
    return room_for_skill(*skills, owner, *config, /*new_skill=*/true);
  };
  if (auto room = co_await store_call(api, std::move(room_check)); !room) co_return room.error();
  auto upload = co_await receive_upload(api, ctx);
  if (!upload) co_return upload.error();
  auto display_name = (*upload)->display_name;
  Keep keep = [skills, owner, display_name, quotas,
               config](const store::SkillStaging::Checked& checked) -> Result<json::value> {
    std::lock_guard creating(quotas->creation_mutex());
    if (auto room = room_for_skill(*skills, owner, *config, /*new_skill=*/true); !room) return room.error();
    return skill_json(skills->create(owner, display_name, checked));
  };
  auto stored = co_await check_and_store(*upload, std::move(keep));
  if (!stored) co_return stored.error();
  co_return json_ok(*stored);
}

asio::awaitable<Result<Response>> create_version(ApiContext& api, RequestContext& ctx) {
  auto store = skill_store(api);
  if (!store) co_return store.error();
  const std::string owner = ctx.owner, skill_id = ctx.params["skill_id"];
  auto* skills = *store;
  auto* quotas = &api.quotas;
  const auto config = api.config();
  auto lookup = [skills, &owner, &skill_id, &config]() -> Result<void> {
    auto skill = skills->find(owner, skill_id);
    if (!skill) return ApiError::not_found("Skill not found: " + skill_id);
    if (skill->source != "custom")
      return ApiError::invalid_request("Built-in skills are read-only: " + skill_id);
    return room_for_skill(*skills, owner, *config, /*new_skill=*/false);
  };
  if (auto found = co_await store_call(api, std::move(lookup)); !found) co_return found.error();
  auto upload = co_await receive_upload(api, ctx);
  if (!upload) co_return upload.error();
  Keep keep = [skills, owner, skill_id, quotas,
               config](const store::SkillStaging::Checked& checked) -> Result<json::value> {
    std::lock_guard creating(quotas->creation_mutex());
    if (auto room = room_for_skill(*skills, owner, *config, /*new_skill=*/false); !room) return room.error();
    auto version = skills->add_version(owner, skill_id, checked);
    if (!version) return upload_error(version.error());
    return version_json(*version);
  };
  auto stored = co_await check_and_store(*upload, std::move(keep));
  if (!stored) co_return stored.error();
  co_return json_ok(*stored);
}

asio::awaitable<Result<Response>> list_skills(ApiContext& api, RequestContext& ctx) {
  auto store = skill_store(api);
  if (!store) co_return store.error();
  auto limit = page_limit(ctx);
  if (!limit) co_return limit.error();
  const std::string source = ctx.query_value("source").value_or("");
  if (!source.empty() && source != "custom" && source != "anthropic")
    co_return ApiError::invalid_request("'source' must be 'custom' or 'anthropic'");
  auto query = [&store, &ctx, &source, &limit] {
    return (*store)->list(ctx.owner, source, *limit, ctx.query_value("page").value_or(""));
  };
  auto page = co_await store_call(api, std::move(query));
  co_return json_ok(page_json(page, skill_json));
}

asio::awaitable<Result<Response>> get_skill(ApiContext& api, RequestContext& ctx) {
  auto store = skill_store(api);
  if (!store) co_return store.error();
  auto query = [&store, &ctx] { return (*store)->find(ctx.owner, ctx.params["skill_id"]); };
  auto skill = co_await store_call(api, std::move(query));
  if (!skill) co_return ApiError::not_found("Skill not found: " + ctx.params["skill_id"]);
  co_return json_ok(skill_json(*skill));
}

asio::awaitable<Result<Response>> delete_skill(ApiContext& api, RequestContext& ctx) {
  auto store = skill_store(api);
  if (!store) co_return store.error();
  const std::string owner = ctx.owner, skill_id = ctx.params["skill_id"];
  auto query = [&store, &owner, &skill_id] { return (*store)->find(owner, skill_id); };
  auto skill = co_await store_call(api, std::move(query));
  if (!skill) co_return ApiError::not_found("Skill not found: " + skill_id);
  if (skill->source != "custom")
    co_return ApiError::invalid_request("Built-in skills cannot be deleted: " + skill_id);
  auto* skills = *store;
  DiskWork work = [skills, owner, skill_id]() -> Result<json::value> {
    if (!skills->remove(owner, skill_id)) return ApiError::not_found("Skill not found: " + skill_id);
    return json::object{{"id", skill_id}, {"type", "skill_deleted"}};
  };
  auto removed = co_await on_disk_pool(std::move(work));
  if (!removed) co_return removed.error();
  co_return json_ok(*removed);
}

asio::awaitable<Result<Response>> list_versions(ApiContext& api, RequestContext& ctx) {
  auto store = skill_store(api);
  if (!store) co_return store.error();
  auto limit = page_limit(ctx);
  if (!limit) co_return limit.error();
  const std::string skill_id = ctx.params["skill_id"];
  auto query = [&store, &ctx, &skill_id, &limit] {
    std::optional<store::SkillPage<store::SkillVersionRecord>> page;
    if ((*store)->find(ctx.owner, skill_id))
      page = (*store)->versions(ctx.owner, skill_id, *limit, ctx.query_value("page").value_or(""));
    return page;
  };
  auto page = co_await store_call(api, std::move(query));
  if (!page) co_return ApiError::not_found("Skill not found: " + skill_id);
  co_return json_ok(page_json(*page, version_json));
}

asio::awaitable<Result<Response>> get_version(ApiContext& api, RequestContext& ctx) {
  auto store = skill_store(api);
  if (!store) co_return store.error();
  const std::string skill_id = ctx.params["skill_id"], version = ctx.params["version"];
  auto query = [&store, &ctx, &skill_id, &version]() -> Result<std::optional<store::SkillVersionRecord>> {
    if (!(*store)->find(ctx.owner, skill_id)) return ApiError::not_found("Skill not found: " + skill_id);
    return (*store)->find_version(ctx.owner, skill_id, version);
  };
  auto lookup = co_await store_call(api, std::move(query));
  if (!lookup) co_return lookup.error();
  auto& found = *lookup;
  if (!found) co_return ApiError::not_found("Version '" + version + "' of skill " + skill_id + " not found");
  co_return json_ok(version_json(*found));
}

asio::awaitable<Result<Response>> delete_version(ApiContext& api, RequestContext& ctx) {
  auto store = skill_store(api);
  if (!store) co_return store.error();
  const std::string owner = ctx.owner, skill_id = ctx.params["skill_id"], version = ctx.params["version"];
  auto query = [&store, &owner, &skill_id] { return (*store)->find(owner, skill_id); };
  auto skill = co_await store_call(api, std::move(query));
  if (!skill) co_return ApiError::not_found("Skill not found: " + skill_id);
  if (skill->source != "custom")
    co_return ApiError::invalid_request("Built-in skills cannot be deleted: " + skill_id);
  auto* skills = *store;
  DiskWork work = [skills, owner, skill_id, version]() -> Result<json::value> {
    auto resolved = skills->find_version(owner, skill_id, version);
    switch (skills->remove_version(owner, skill_id, version)) {
      case store::SkillStore::VersionRemoval::kMissing:
        return ApiError::not_found("Version '" + version + "' of skill " + skill_id + " not found");
      case store::SkillStore::VersionRemoval::kRemoved:
        break;
    }
    return json::object{{"id", resolved ? resolved->version : version}, {"type", "skill_version_deleted"}};
  };
  auto removed = co_await on_disk_pool(std::move(work));
  if (!removed) co_return removed.error();
  co_return json_ok(*removed);
}

}  // namespace

void install_skill_routes(server::HttpServer& http, ApiContext& api) {
  http.route(http::verb::post, "/api/gpt/v1/skills", "skills.create", with_api(api, create_skill));
  http.route(http::verb::get, "/api/gpt/v1/skills", "skills.list", with_api(api, list_skills));
  http.route(http::verb::get, "/api/gpt/v1/skills/{skill_id}", "skills.retrieve", with_api(api, get_skill));
  http.route(http::verb::delete_, "/api/gpt/v1/skills/{skill_id}", "skills.delete",
             with_api(api, delete_skill));
  http.route(http::verb::post, "/api/gpt/v1/skills/{skill_id}/versions", "skills.versions.create",
             with_api(api, create_version));
  http.route(http::verb::get, "/api/gpt/v1/skills/{skill_id}/versions", "skills.versions.list",
             with_api(api, list_versions));
  http.route(http::verb::get, "/api/gpt/v1/skills/{skill_id}/versions/{version}", "skills.versions.retrieve",
             with_api(api, get_version));
  http.route(http::verb::delete_, "/api/gpt/v1/skills/{skill_id}/versions/{version}",
             "skills.versions.delete", with_api(api, delete_version));
}

}  // namespace sandboxd::api
